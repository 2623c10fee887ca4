#include <gtest/gtest.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "net/http_client.h"
#include "net/http_server.h"
#include "net/net_test_util.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testing::Latch;
using testing::RawSocket;

Url LocalUrl(uint16_t port) {
  auto url = ParseUrl("http://127.0.0.1:" + std::to_string(port));
  EXPECT_TRUE(url.ok());
  return *url;
}

std::unique_ptr<HttpServer> StartServer(HttpServer::HttpHandler handler,
                                        HttpServerOptions options = {}) {
  auto server = std::make_unique<HttpServer>(std::move(options), std::move(handler), nullptr);
  Status st = server->Start();
  EXPECT_TRUE(st.ok()) << st.ToString();
  return server;
}

TEST(ParseUrlTest, AcceptsHttpWsIpv6AndNames) {
  auto a = ParseUrl("http://example.com");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "example.com");
  EXPECT_EQ(a->port, 80);
  auto b = ParseUrl("ws://[::1]:8080/base/");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->scheme, "ws");
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->port, 8080);
  EXPECT_EQ(b->base_path, "/base");
  EXPECT_EQ(b->ToString(), "ws://[::1]:8080/base");
  auto c = ParseUrl("http://10.0.0.1:9");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->host, "10.0.0.1");
  auto d = ParseUrl("https://x");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->port, 443);
  EXPECT_TRUE(d->secure());
  EXPECT_TRUE(d->tls.system_store());
  auto e = ParseUrl("WSS://[::1]:9443/p");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->scheme, "wss");
  EXPECT_EQ(e->port, 9443);
  EXPECT_EQ(e->ToString(), "wss://[::1]:9443/p");
  EXPECT_FALSE(c->secure());
  EXPECT_EQ(ParseUrl("ftp://x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseUrl("http://x:70000").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseUrl("http://").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseUrl("http://[::1").status().code(), StatusCode::kInvalidArgument);
}

TEST(HttpTest, RoundTripCarriesMethodPathQueryHeadersBody) {
  std::promise<HttpRequest> seen;
  auto server = StartServer([&](HttpRequest req, std::shared_ptr<ResponseWriter> w) {
    HttpResponse r;
    r.status = 201;
    r.body = "{\"echo\":\"" + req.body + "\"}";
    r.headers.emplace_back("X-Reply", "yes");
    w->Send(r);
    seen.set_value(std::move(req));
  });
  HttpClient client(LocalUrl(server->port()), "tok123");
  auto resp =
      client.Request("PUT", "/v1/a%20b?x=1&name=hello%20world&plus=a+b", "payload", "text/plain");
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(resp->status, 201);
  EXPECT_EQ(resp->body, "{\"echo\":\"payload\"}");
  EXPECT_EQ(resp->content_type, "application/json");
  bool found = false;
  for (auto& [k, v] : resp->headers) found |= (k == "X-Reply" && v == "yes");
  EXPECT_TRUE(found);

  auto fut = seen.get_future();
  ASSERT_EQ(fut.wait_for(2s), std::future_status::ready);
  HttpRequest req = fut.get();
  EXPECT_EQ(req.method, "PUT");
  EXPECT_EQ(req.path, "/v1/a b");
  EXPECT_EQ(req.target, "/v1/a%20b?x=1&name=hello%20world&plus=a+b");
  EXPECT_EQ(req.query["x"], "1");
  EXPECT_EQ(req.query["name"], "hello world");
  EXPECT_EQ(req.query["plus"], "a b");
  EXPECT_EQ(req.Header("Authorization"), "Bearer tok123");
  EXPECT_EQ(req.Header("content-type"), "text/plain");
  EXPECT_EQ(req.Header("absent"), "");
  EXPECT_EQ(req.body, "payload");
  EXPECT_EQ(req.remote_addr.rfind("127.0.0.1:", 0), 0u) << req.remote_addr;

  // The same client reuses its connection for a second request.
  auto again = client.Request("GET", "/two");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->status, 201);
}

// A caller that checked where a name points (webhooks) connects to that address itself: the name
// is not looked up again (".invalid" never resolves, RFC 6761), yet the request still names it.
TEST(HttpTest, AGivenAddressIsConnectedToWithoutLookingTheNameUp) {
  std::promise<std::string> host;
  auto server = StartServer([&](HttpRequest req, std::shared_ptr<ResponseWriter> w) {
    w->Send({200, "application/json", "{}", {}});
    host.set_value(req.Header("Host"));
  });
  auto url = ParseUrl("http://hooks.sluice-test.invalid:" + std::to_string(server->port()));
  ASSERT_TRUE(url.ok());
  HttpClient looked_up(*url, "", 5s);
  auto refused = looked_up.Request("POST", "/hook", "{}");
  ASSERT_FALSE(refused.ok()) << "the name resolved: the test proves nothing";
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);

  HttpClient pinned(*url, "", 5s, "127.0.0.1");
  auto r = pinned.Request("POST", "/hook", "{}");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  auto fut = host.get_future();
  ASSERT_EQ(fut.wait_for(2s), std::future_status::ready);
  EXPECT_EQ(fut.get(), "hooks.sluice-test.invalid:" + std::to_string(server->port()));

  // Only a numeric address is taken: a name there would be a second lookup.
  HttpClient named(*url, "", 5s, "localhost");
  EXPECT_FALSE(named.Request("POST", "/hook", "{}").ok());
}

TEST(HttpTest, HandlerNotFoundAndThrowingHandler) {
  auto server = StartServer([](HttpRequest req, std::shared_ptr<ResponseWriter> w) {
    if (req.path == "/boom") throw std::runtime_error("kaboom");
    w->Send({404, "application/json", ErrorBody(Status::NotFound("no route " + req.path)), {}});
  });
  HttpClient client(LocalUrl(server->port()), "");
  auto r = client.Request("GET", "/nope");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(ErrorMessageFromBody(r->body), "no route /nope");
  auto boom = client.Request("GET", "/boom");
  ASSERT_TRUE(boom.ok());
  EXPECT_EQ(boom->status, 500);
  EXPECT_NE(boom->body.find("kaboom"), std::string::npos);
}

TEST(HttpTest, LongPollAnsweredFromAnotherThread) {
  std::vector<std::thread> answerers;
  std::mutex mu;
  auto server = StartServer([&](HttpRequest, std::shared_ptr<ResponseWriter> w) {
    std::lock_guard<std::mutex> lock(mu);
    answerers.emplace_back([w] {
      std::this_thread::sleep_for(100ms);  // simulates the event arriving later
      w->Send({200, "application/json", "{\"event\":1}", {}});
    });
  });
  HttpClient client(LocalUrl(server->port()), "");
  auto start = std::chrono::steady_clock::now();
  auto r = client.Request("GET", "/v1/wait");
  auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->body, "{\"event\":1}");
  EXPECT_GE(elapsed, 90ms);
  std::lock_guard<std::mutex> lock(mu);
  for (auto& t : answerers) t.join();
}

// io_lag() shows how late the io threads run what is ready: near zero while they keep up, and
// growing while the only one is held (here by a handler run on it, as with no handler threads),
// so the node loss rules can tell the server's own delay from a node's silence.
TEST(HttpTest, IoLagGrowsWhileTheIoThreadIsHeldAndFallsWhenItIsFree) {
  HttpServerOptions opt;
  opt.threads = 1;
  opt.handler_threads = 0;  // handlers run on the io thread
  Latch entered;
  Latch release;
  auto server = StartServer(
      [&](HttpRequest req, std::shared_ptr<ResponseWriter> w) {
        if (req.path == "/hold") {
          entered.Set();
          release.Wait(10s);
        }
        w->Send({200, "text/plain", "ok", {}});
      },
      opt);
  auto wait_for = [&](auto condition) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!condition() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
    }
    return condition();
  };
  EXPECT_TRUE(wait_for([&] { return server->io_lag() < 50ms; })) << server->io_lag().count();
  auto held = std::async(std::launch::async, [&] {
    HttpClient client(LocalUrl(server->port()), "");
    return client.Request("GET", "/hold");
  });
  ASSERT_TRUE(entered.Wait(5s));
  EXPECT_TRUE(wait_for([&] { return server->io_lag() >= 500ms; })) << server->io_lag().count();
  release.Set();
  ASSERT_TRUE(held.get().ok());
  EXPECT_TRUE(wait_for([&] { return server->io_lag() < 50ms; })) << server->io_lag().count();
}

// With handler threads, a handler that takes long (here: until released) runs off the one io
// thread, which meanwhile reads and answers another connection's request; handlers run on
// threads named sluice-api. With handlers on the io thread the second request would wait for the
// first handler (5 s here) and the test fails.
TEST(HttpTest, ASlowHandlerOnItsOwnThreadHoldsUpNoOtherRequest) {
  HttpServerOptions opt;
  opt.threads = 1;
  opt.handler_threads = 2;
  Latch entered;
  Latch release;
  std::atomic<bool> slow_done{false};
  std::mutex mu;
  std::vector<std::string> thread_names;
  auto server = StartServer(
      [&](HttpRequest req, std::shared_ptr<ResponseWriter> w) {
        char name[16] = {};
        pthread_getname_np(pthread_self(), name, sizeof name);
        {
          std::lock_guard<std::mutex> lock(mu);
          thread_names.emplace_back(name);
        }
        if (req.path == "/slow") {
          entered.Set();
          release.Wait(5s);
          slow_done = true;
          w->Send({200, "text/plain", "slow", {}});
          return;
        }
        w->Send({200, "text/plain", "fast", {}});
      },
      opt);
  auto slow = std::async(std::launch::async, [&] {
    HttpClient client(LocalUrl(server->port()), "");
    return client.Request("GET", "/slow");
  });
  ASSERT_TRUE(entered.Wait(3s));
  HttpClient client(LocalUrl(server->port()), "");
  auto fast = client.Request("GET", "/fast");
  ASSERT_TRUE(fast.ok()) << fast.status().ToString();
  EXPECT_EQ(fast->body, "fast");
  EXPECT_FALSE(slow_done) << "the second request waited for the first one's handler";
  release.Set();
  auto answered = slow.get();
  ASSERT_TRUE(answered.ok()) << answered.status().ToString();
  EXPECT_EQ(answered->body, "slow");
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(thread_names.size(), 2u);
  for (const auto& name : thread_names) EXPECT_EQ(name, "sluice-api");
}

TEST(HttpTest, DroppedWriterAnswers500) {
  auto server = StartServer([](HttpRequest, std::shared_ptr<ResponseWriter>) {});
  HttpClient client(LocalUrl(server->port()), "");
  auto r = client.Request("GET", "/");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 500);
}

TEST(HttpTest, ChunkedStreamReadLineByLineAndStoppedEarly) {
  Latch stream_closed;
  std::vector<std::thread> producers;
  std::mutex mu;
  auto server = StartServer([&](HttpRequest req, std::shared_ptr<ResponseWriter> w) {
    if (req.path == "/fail") {
      w->Send({403, "application/json", ErrorBody(Status::PermissionDenied("not yours")), {}});
      return;
    }
    bool endless = req.path == "/endless";
    ASSERT_TRUE(w->StartStream(200, "application/x-ndjson"));
    w->OnClose([&] { stream_closed.Set(); });
    std::lock_guard<std::mutex> lock(mu);
    producers.emplace_back([w, endless] {
      for (int i = 0; endless ? !w->closed() : i < 100; ++i) {
        if (!w->WriteChunk("{\"n\":" + std::to_string(i) + "}\n")) return;
        if (endless) std::this_thread::sleep_for(1ms);
      }
      w->EndStream();
    });
  });
  HttpClient client(LocalUrl(server->port()), "");
  std::vector<std::string> lines;
  int status = 0;
  Status st = client.StreamLines(
      "GET", "/logs",
      [&](std::string_view line) {
        lines.emplace_back(line);
        return true;
      },
      &status);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(status, 200);
  ASSERT_EQ(lines.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(lines[i], "{\"n\":" + std::to_string(i) + "}");

  int seen = 0;
  st = client.StreamLines(
      "GET", "/endless", [&](std::string_view) { return ++seen < 5; }, &status);
  EXPECT_TRUE(st.ok());
  EXPECT_EQ(seen, 5);
  // The server notices the client left and tells the producer via OnClose / closed().
  EXPECT_TRUE(stream_closed.Wait(5s));

  st = client.StreamLines(
      "GET", "/fail", [](std::string_view) { return true; }, &status);
  EXPECT_EQ(status, 403);
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(st.message().find("not yours"), std::string::npos);

  std::lock_guard<std::mutex> lock(mu);
  for (auto& t : producers) t.join();
}

// A client that stops reading a stream is not buffered for without bound: once the chunks it has
// not taken pass max_queued_bytes, WriteChunk refuses the next one and behind() says why; the
// last chunk EndStream is given still goes out, and a client that reads again gets every chunk
// that was accepted, that line and the end of the stream.
TEST(HttpTest, AStreamWhoseClientStopsReadingIsBoundedAndEndsSayingWhy) {
  HttpServerOptions opt;
  opt.max_queued_bytes = 1 << 20;
  std::promise<std::pair<size_t, bool>> result;  // chunks accepted; behind()
  std::thread producer;
  auto server = StartServer(
      [&](HttpRequest, std::shared_ptr<ResponseWriter> w) {
        ASSERT_TRUE(w->StartStream(200, "text/plain"));
        producer = std::thread([w, &result] {
          const std::string chunk(64 << 10, 'x');
          size_t accepted = 0;
          // 64 MiB at most: far more than the bound and what the two sockets hold.
          while (accepted < 1024 && w->WriteChunk(chunk)) ++accepted;
          const bool behind = w->behind();
          w->EndStream("the end: behind\n");
          result.set_value({accepted, behind});
        });
      },
      opt);
  RawSocket raw(server->port());
  ASSERT_TRUE(raw.connected());
  ASSERT_TRUE(raw.Write("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto done = result.get_future();
  ASSERT_EQ(done.wait_for(30s), std::future_status::ready);
  const auto [accepted, behind] = done.get();
  EXPECT_TRUE(behind);
  EXPECT_LT(accepted, 1024u);
  EXPECT_GT(accepted, 0u);
  const std::string all = raw.Read(30s, "0\r\n\r\n");
  EXPECT_NE(all.find("the end: behind"), std::string::npos);
  const size_t body = all.find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos);
  EXPECT_EQ(static_cast<size_t>(
                std::count(all.begin() + static_cast<std::ptrdiff_t>(body), all.end(), 'x')),
            accepted * (64 << 10));
  producer.join();
}

TEST(HttpTest, OversizedBodyIs413ForContentLengthAndChunked) {
  std::atomic<int> handled{0};
  HttpServerOptions opt;
  opt.default_body_limit = 1024;
  opt.body_limit = [](const HttpRequest& head) -> size_t {
    return head.path == "/upload" ? 1 << 20 : 1024;
  };
  auto server = StartServer(
      [&](HttpRequest req, std::shared_ptr<ResponseWriter> w) {
        ++handled;
        w->Send({200, "text/plain", std::to_string(req.body.size()), {}});
      },
      opt);
  HttpClient client(LocalUrl(server->port()), "");
  auto big = client.Request("POST", "/small", std::string(4096, 'x'));
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  EXPECT_EQ(big->status, 413);
  EXPECT_NE(big->body.find("RESOURCE_EXHAUSTED"), std::string::npos);
  auto upload = client.Request("POST", "/upload", std::string(4096, 'x'));
  ASSERT_TRUE(upload.ok());
  EXPECT_EQ(upload->status, 200);
  EXPECT_EQ(upload->body, "4096");

  RawSocket raw(server->port());
  ASSERT_TRUE(raw.connected());
  std::string chunk(1000, 'y');
  std::string request = "POST /small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 3; ++i) request += "3e8\r\n" + chunk + "\r\n";
  request += "0\r\n\r\n";
  raw.Write(request);
  std::string reply = raw.Read(3s, "}}");
  EXPECT_EQ(reply.rfind("HTTP/1.1 413", 0), 0u) << reply;
  EXPECT_EQ(handled.load(), 1);
}

TEST(HttpTest, MalformedRequestIs400AndServerKeepsServing) {
  auto server = StartServer([](HttpRequest, std::shared_ptr<ResponseWriter> w) {
    w->Send({200, "text/plain", "ok", {}});
  });
  {
    RawSocket raw(server->port());
    ASSERT_TRUE(raw.connected());
    raw.Write("\x16\x03\x01garbage \x01\x02 not http\r\n\r\n");
    std::string reply = raw.Read(3s);
    EXPECT_TRUE(reply.rfind("HTTP/1.1 400", 0) == 0 || reply.empty()) << reply;
    EXPECT_TRUE(raw.peer_closed());
  }
  {
    RawSocket raw(server->port());
    raw.Write("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: banana\r\n\r\n");
    EXPECT_EQ(raw.Read(3s).rfind("HTTP/1.1 400", 0), 0u);
  }
  HttpClient client(LocalUrl(server->port()), "");
  auto r = client.Request("GET", "/");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->body, "ok");
}

TEST(HttpTest, HugeHeadersAre431) {
  auto server = StartServer([](HttpRequest, std::shared_ptr<ResponseWriter> w) {
    w->Send({200, "text/plain", "ok", {}});
  });
  RawSocket raw(server->port());
  raw.Write("GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n");
  std::string reply = raw.Read(3s, "}}");
  EXPECT_EQ(reply.rfind("HTTP/1.1 431", 0), 0u) << reply.substr(0, 100);
}

TEST(HttpTest, SlowClientIsClosedByIdleTimeout) {
  HttpServerOptions opt;
  opt.http_idle_timeout = 200ms;
  auto server = StartServer(
      [](HttpRequest, std::shared_ptr<ResponseWriter> w) {
        w->Send({200, "text/plain", "ok", {}});
      },
      opt);
  RawSocket raw(server->port());
  raw.Write("GET / HTTP/1.1\r\nHost: x\r\n");  // never finishes the headers
  EXPECT_TRUE(raw.WaitClosed(5s));
}

TEST(HttpTest, StopWithOpenConnectionsIsPrompt) {
  std::shared_ptr<ResponseWriter> parked;
  Latch parked_set;
  Latch writer_closed;
  auto server = StartServer([&](HttpRequest, std::shared_ptr<ResponseWriter> w) {
    w->OnClose([&] { writer_closed.Set(); });
    parked = w;  // a long-poll nobody answers
    parked_set.Set();
  });
  RawSocket idle(server->port());
  RawSocket polling(server->port());
  polling.Write("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(parked_set.Wait(3s));
  auto start = std::chrono::steady_clock::now();
  server->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  EXPECT_TRUE(writer_closed.Wait(1s));
  EXPECT_TRUE(parked->closed());
  EXPECT_TRUE(idle.WaitClosed(2s));
  EXPECT_TRUE(polling.WaitClosed(2s));
  parked->Send({200, "text/plain", "late", {}});  // ignored, must not crash
  server->Stop();                                 // idempotent
}

TEST(HttpTest, ClientFailsWithUnavailableWhileServerDownThenRecovers) {
  auto handler = [](HttpRequest, std::shared_ptr<ResponseWriter> w) {
    w->Send({200, "text/plain", "up", {}});
  };
  auto server = StartServer(handler);
  uint16_t port = server->port();
  HttpClient client(LocalUrl(port), "", 2s);
  ASSERT_TRUE(client.Request("GET", "/").ok());
  server.reset();
  auto down = client.Request("GET", "/");
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(down.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << down.status().message();

  HttpServerOptions opt;
  opt.port = port;
  server = StartServer(handler, opt);
  auto up = client.Request("GET", "/");
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  EXPECT_EQ(up->body, "up");
}

}  // namespace
}  // namespace sluice
