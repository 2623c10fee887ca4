#include "agent/link_probe.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <mutex>

#include "common/json.h"
#include "net/http_server.h"

namespace sluice {
namespace {

constexpr const char* kToken = "join-token-123";

// The server side of the payload contract, as the real server is to implement it; `mode` lets a
// test break it on purpose.
struct PayloadServer {
  enum Mode { kContract, kShortDownload, kWrongReceived, kNoEndpoint };
  std::atomic<Mode> mode{kContract};
  std::mutex mu;
  std::vector<HttpRequest> requests;  // without bodies
  std::unique_ptr<HttpServer> server;

  void Start() {
    HttpServerOptions options;
    options.body_limit = [](const HttpRequest&) { return size_t{65} << 20; };
    server = std::make_unique<HttpServer>(
        options,
        [this](HttpRequest req, std::shared_ptr<ResponseWriter> w) { Handle(std::move(req), w); },
        nullptr);
    Status st = server->Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  Url url() const { return *ParseUrl("http://127.0.0.1:" + std::to_string(server->port())); }

  void Handle(HttpRequest req, const std::shared_ptr<ResponseWriter>& w) {
    HttpRequest head = req;
    head.body.clear();
    {
      std::lock_guard<std::mutex> lock(mu);
      requests.push_back(head);
    }
    HttpResponse r;
    if (req.Header("authorization") != std::string("Bearer ") + kToken) {
      r.status = 401;
      r.body = ErrorBody(Status::Unauthenticated("bad token"));
    } else if (mode == kNoEndpoint || req.path != kConformancePayloadPath) {
      r.status = 404;
      r.body = ErrorBody(Status::NotFound("no route for " + req.path));
    } else if (req.method == "GET") {
      uint64_t n = std::stoull(req.query["bytes"]);
      if (mode == kShortDownload && n > 0) --n;
      r.content_type = "application/octet-stream";
      r.body.assign(n, 'x');
    } else if (req.method == "POST") {
      int64_t n = static_cast<int64_t>(req.body.size());
      if (mode == kWrongReceived) --n;
      r.body = DumpJson(Json{{"received", n}});
    }
    w->Send(std::move(r));
  }
};

TEST(HttpLinkProbeTest, MeasuresRoundTripsAndBothDirections) {
  PayloadServer s;
  s.Start();
  HttpLinkProbeOptions options;
  options.pings = 3;
  options.payload_bytes = 1 << 20;
  HttpLinkProbe probe(s.url(), kToken, options);
  auto m = probe.Measure();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->rtt_ms.size(), 3u);
  for (double ms : m->rtt_ms) EXPECT_GT(ms, 0);
  EXPECT_EQ(m->payload_bytes, 1u << 20);
  EXPECT_GT(m->download_mib_s, 0);
  EXPECT_GT(m->upload_mib_s, 0);

  std::lock_guard<std::mutex> lock(s.mu);
  // A warm-up, three pings, one download, one upload.
  ASSERT_EQ(s.requests.size(), 6u);
  EXPECT_EQ(s.requests[0].target, "/v1/conformance/payload?bytes=0");
  EXPECT_EQ(s.requests[4].target, "/v1/conformance/payload?bytes=1048576");
  EXPECT_EQ(s.requests[5].method, "POST");
  EXPECT_EQ(s.requests[5].Header("content-type"), "application/octet-stream");
  EXPECT_EQ(s.requests[5].Header("content-length"), "1048576");
}

TEST(HttpLinkProbeTest, AShortDownloadIsAnError) {
  PayloadServer s;
  s.Start();
  s.mode = PayloadServer::kShortDownload;
  HttpLinkProbe probe(s.url(), kToken, {.pings = 1, .payload_bytes = 1 << 20});
  auto m = probe.Measure();
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message(), "download 1 MiB: got 1048575 bytes");
}

TEST(HttpLinkProbeTest, AWrongUploadCountIsAnError) {
  PayloadServer s;
  s.Start();
  s.mode = PayloadServer::kWrongReceived;
  HttpLinkProbe probe(s.url(), kToken, {.pings = 1, .payload_bytes = 1000});
  auto m = probe.Measure();
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message(), "upload 1000 bytes: server received 999 bytes");
}

TEST(HttpLinkProbeTest, AServerWithoutTheEndpointOrWithAnotherTokenIsNamed) {
  PayloadServer s;
  s.Start();
  s.mode = PayloadServer::kNoEndpoint;
  auto m = HttpLinkProbe(s.url(), kToken).Measure();
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message(), "connect: HTTP 404: no route for /v1/conformance/payload");

  s.mode = PayloadServer::kContract;
  m = HttpLinkProbe(s.url(), "wrong-token").Measure();
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message(), "connect: HTTP 401: bad token");
}

TEST(HttpLinkProbeTest, AnUnreachableServerIsUnavailable) {
  // A port bound but not listening: connecting is refused at once.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  Url url = *ParseUrl("http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)));
  auto m = HttpLinkProbe(url, kToken, {.timeout = std::chrono::milliseconds(2000)}).Measure();
  ::close(fd);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnavailable) << m.status().ToString();
  EXPECT_EQ(m.status().message().rfind("connect: ", 0), 0u) << m.status().message();
}

TEST(HttpLinkProbeTest, PayloadsOverTheServersLimitAreRefused) {
  auto m = HttpLinkProbe(*ParseUrl("http://127.0.0.1:9"), kToken,
                         {.payload_bytes = kMaxConformancePayloadBytes + 1})
               .Measure();
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice
