// LinkProbe: how fast and how far away the server is, as the agent sees it. The conformance
// suite reads it through this interface so tests can fake the network; HttpLinkProbe measures
// for real against the server's payload endpoint:
//   GET  /v1/conformance/payload?bytes=N  -> exactly N bytes (0 <= N <= 64 MiB),
//                                            application/octet-stream
//   POST /v1/conformance/payload          <- N bytes; -> 200 {"received": N}
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "net/http_types.h"

namespace sluice {

inline constexpr const char* kConformancePayloadPath = "/v1/conformance/payload";
inline constexpr uint64_t kMaxConformancePayloadBytes = uint64_t{64} << 20;

struct LinkMeasurement {
  std::vector<double> rtt_ms;  // one per ping, in order
  uint64_t payload_bytes = 0;  // moved each way
  double download_mib_s = 0;
  double upload_mib_s = 0;
};

class LinkProbe {
 public:
  virtual ~LinkProbe() = default;
  // Non-OK when any phase fails; the message names the phase ("download 8 MiB: ...").
  virtual Result<LinkMeasurement> Measure() = 0;
};

struct HttpLinkProbeOptions {
  int pings = 5;                               // sequential empty GETs for the round-trip time
  uint64_t payload_bytes = uint64_t{8} << 20;  // each way; at most 64 MiB (the server's limit)
  std::chrono::milliseconds timeout{30000};    // per request, connecting included
};

// Opens its own connection per Measure() (HttpClient is single-caller, and the agent's main
// client must not wait behind megabytes of payload). Not thread-safe: one Measure() at a time.
class HttpLinkProbe final : public LinkProbe {
 public:
  HttpLinkProbe(Url server, std::string bearer_token, HttpLinkProbeOptions options = {});
  Result<LinkMeasurement> Measure() override;

 private:
  const Url server_;
  const std::string token_;
  const HttpLinkProbeOptions options_;
};

}  // namespace sluice
