#include "agent/link_probe.h"

#include <algorithm>
#include <chrono>

#include "common/json.h"
#include "net/http_client.h"

namespace sluice {
namespace {

// Sub-millisecond resolution: loopback and LAN round trips are well under 1 ms, which the
// Clock (whole milliseconds) cannot see. Measurements only; no decision depends on it.
double MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

double MibPerSecond(uint64_t bytes, double ms) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0) / (std::max(ms, 0.001) / 1000.0);
}

Status HttpError(std::string_view phase, const HttpResponse& r) {
  return Status::Unavailable(std::string(phase) + ": HTTP " + std::to_string(r.status) + ": " +
                             ErrorMessageFromBody(r.body));
}

Status Phase(std::string_view phase, const Status& s) {
  return Status(s.code(), std::string(phase) + ": " + s.message());
}

std::string Mib(uint64_t bytes) {
  if (bytes % (1024 * 1024) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

}  // namespace

HttpLinkProbe::HttpLinkProbe(Url server, std::string bearer_token, HttpLinkProbeOptions options)
    : server_(std::move(server)), token_(std::move(bearer_token)), options_(options) {}

Result<LinkMeasurement> HttpLinkProbe::Measure() {
  if (options_.payload_bytes > kMaxConformancePayloadBytes) {
    return Status::InvalidArgument("link payload of " + Mib(options_.payload_bytes) +
                                   " is over the server's 64 MiB limit");
  }
  HttpClient client(server_, token_, options_.timeout);
  const std::string path = kConformancePayloadPath;
  LinkMeasurement m;
  m.payload_bytes = options_.payload_bytes;

  // One unmeasured request first: it pays for the TCP connect, which is not a round trip.
  auto warm = client.Request("GET", path + "?bytes=0");
  if (!warm.ok()) return Phase("connect", warm.status());
  if (warm->status != 200) return HttpError("connect", *warm);

  for (int i = 0; i < std::max(options_.pings, 1); ++i) {
    auto start = std::chrono::steady_clock::now();
    auto r = client.Request("GET", path + "?bytes=0");
    double ms = MillisSince(start);
    if (!r.ok()) return Phase("ping", r.status());
    if (r->status != 200) return HttpError("ping", *r);
    if (!r->body.empty()) return Status::Internal("ping: expected an empty body");
    m.rtt_ms.push_back(ms);
  }

  const uint64_t n = options_.payload_bytes;
  const std::string down_phase = "download " + Mib(n);
  auto start = std::chrono::steady_clock::now();
  auto down = client.Request("GET", path + "?bytes=" + std::to_string(n));
  double down_ms = MillisSince(start);
  if (!down.ok()) return Phase(down_phase, down.status());
  if (down->status != 200) return HttpError(down_phase, *down);
  if (down->body.size() != n) {
    return Status::Internal(down_phase + ": got " + std::to_string(down->body.size()) + " bytes");
  }
  m.download_mib_s = MibPerSecond(n, down_ms);

  // Not all zeros, so no compressing proxy on the way can flatter the upload.
  std::string body(n, '\0');
  uint32_t x = 0x9e3779b9u;
  for (auto& c : body) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    c = static_cast<char>(x);
  }
  const std::string up_phase = "upload " + Mib(n);
  start = std::chrono::steady_clock::now();
  auto up = client.Request("POST", path, std::move(body), "application/octet-stream");
  double up_ms = MillisSince(start);
  if (!up.ok()) return Phase(up_phase, up.status());
  if (up->status != 200) return HttpError(up_phase, *up);
  auto j = ParseJson(up->body);
  if (!j.ok()) return Phase(up_phase, j.status());
  auto received = GetInt(*j, "received", "response");
  if (!received.ok()) return Phase(up_phase, received.status());
  if (*received != static_cast<int64_t>(n)) {
    return Status::Internal(up_phase + ": server received " + std::to_string(*received) + " bytes");
  }
  m.upload_mib_s = MibPerSecond(n, up_ms);
  return m;
}

}  // namespace sluice
