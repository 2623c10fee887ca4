#include <gtest/gtest.h>

#include <atomic>
#include <future>

#include "net/http_server.h"
#include "net/net_test_util.h"
#include "net/ws_client.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testing::Latch;
using testing::RawSocket;

// Echoes every message with a prefix; greets each connection before the handshake completes.
struct EchoServer {
  explicit EchoServer(HttpServerOptions options = {}) {
    server = std::make_unique<HttpServer>(
        options,
        [](HttpRequest, std::shared_ptr<ResponseWriter> w) {
          w->Send({200, "text/plain", "plain", {}});
        },
        [this](const HttpRequest& req,
               const std::shared_ptr<WsConnection>& conn) -> Result<WsHandler> {
          if (req.Header("authorization") == "Bearer bad") {
            return Status::Unauthenticated("agent token rejected");
          }
          if (req.path != "/v1/agent/connect") return Status::NotFound("no such socket");
          conn->Send("hello " + std::to_string(conn->id()));
          WsHandler h;
          h.on_message = [](const std::shared_ptr<WsConnection>& c, std::string_view m) {
            if (m == "bye") return c->Close();
            if (m.rfind("flood ", 0) == 0) {  // N messages of 256 KiB
              for (int i = std::stoi(std::string(m.substr(6))); i > 0; --i) {
                c->Send(std::string(256 << 10, 'x'));
              }
              return;
            }
            c->Send("echo:" + std::string(m));
          };
          h.on_close = [this](const std::shared_ptr<WsConnection>&) {
            ++closed;
            server_closed.Set();
          };
          return h;
        });
    Status st = server->Start();
    EXPECT_TRUE(st.ok()) << st.ToString();
  }

  WsClient::Options ClientOptions(std::string token = "good") {
    WsClient::Options o;
    o.url = *ParseUrl("ws://127.0.0.1:" + std::to_string(server->port()));
    o.path = "/v1/agent/connect";
    o.headers.emplace_back("Authorization", "Bearer " + token);
    return o;
  }

  std::atomic<int> closed{0};
  Latch server_closed;
  std::unique_ptr<HttpServer> server;
};

// Collects messages and the close status, with deadline waits.
struct Inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> messages;
  std::optional<Status> close_status;

  std::function<void(std::string_view)> OnMessage() {
    return [this](std::string_view m) {
      std::lock_guard<std::mutex> lock(mu);
      messages.emplace_back(m);
      cv.notify_all();
    };
  }
  std::function<void(Status)> OnClose() {
    return [this](Status s) {
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_FALSE(close_status.has_value()) << "on_close called twice";
      close_status = std::move(s);
      cv.notify_all();
    };
  }
  bool WaitMessages(size_t n, std::chrono::milliseconds d) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, d, [&] { return messages.size() >= n; });
  }
  bool WaitClosed(std::chrono::milliseconds d) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, d, [&] { return close_status.has_value(); });
  }
};

std::string RawUpgrade(RawSocket& raw) {
  raw.Write(
      "GET /v1/agent/connect HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
  return raw.Read(3s, "\r\n\r\n");
}

// A client frame (masked with a zero key, so the payload goes as is).
std::string Frame(uint8_t opcode, const std::string& payload) {
  std::string f;
  f.push_back(static_cast<char>(0x80 | opcode));
  f.push_back(static_cast<char>(0x80 | payload.size()));  // payload < 126 bytes
  f.append(4, '\0');
  return f + payload;
}

TEST(WsTest, EchoRoundTrip) {
  EchoServer echo;
  Inbox inbox;
  WsClient client(echo.ClientOptions(), inbox.OnMessage(), inbox.OnClose());
  ASSERT_TRUE(client.Connect().ok());
  EXPECT_TRUE(client.connected());
  client.Send("one");
  client.Send("two");
  ASSERT_TRUE(inbox.WaitMessages(3, 3s));
  {
    std::lock_guard<std::mutex> lock(inbox.mu);
    EXPECT_EQ(inbox.messages[0].rfind("hello ", 0), 0u);  // sent before the handshake finished
    EXPECT_EQ(inbox.messages[1], "echo:one");
    EXPECT_EQ(inbox.messages[2], "echo:two");
  }
  client.Close();
  ASSERT_TRUE(inbox.WaitClosed(1s));
  EXPECT_TRUE(inbox.close_status->ok());
  EXPECT_FALSE(client.connected());
  EXPECT_TRUE(echo.server_closed.Wait(3s));
  client.Close();  // idempotent
}

TEST(WsTest, ServerInitiatedCloseReachesClient) {
  EchoServer echo;
  Inbox inbox;
  WsClient client(echo.ClientOptions(), inbox.OnMessage(), inbox.OnClose());
  ASSERT_TRUE(client.Connect().ok());
  client.Send("bye");
  ASSERT_TRUE(inbox.WaitClosed(3s));
  EXPECT_EQ(inbox.close_status->code(), StatusCode::kUnavailable);
}

TEST(WsTest, RefusedUpgradeMapsToStatus) {
  EchoServer echo;
  Inbox inbox;
  WsClient bad(echo.ClientOptions("bad"), inbox.OnMessage(), inbox.OnClose());
  Status st = bad.Connect();
  EXPECT_EQ(st.code(), StatusCode::kUnauthenticated) << st.ToString();
  EXPECT_NE(st.message().find("agent token rejected"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("401"), std::string::npos);

  auto opts = echo.ClientOptions();
  opts.path = "/elsewhere";
  WsClient lost(opts, inbox.OnMessage(), inbox.OnClose());
  EXPECT_EQ(lost.Connect().code(), StatusCode::kNotFound);
}

TEST(WsTest, ConnectionRefusedIsUnavailable) {
  uint16_t port;
  {
    EchoServer echo;
    port = echo.server->port();
  }
  WsClient::Options o;
  o.url = *ParseUrl("ws://127.0.0.1:" + std::to_string(port));
  o.path = "/v1/agent/connect";
  WsClient client(o, nullptr, nullptr);
  Status st = client.Connect();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("127.0.0.1:" + std::to_string(port)), std::string::npos);
}

TEST(WsTest, GarbageFramesCloseTheConnectionAndServerLives) {
  EchoServer echo;
  {
    RawSocket raw(echo.server->port());
    ASSERT_EQ(RawUpgrade(raw).rfind("HTTP/1.1 101", 0), 0u);
    // Reserved bits and opcode set, unmasked: a protocol violation.
    raw.Write(std::string("\xff\xff\xff\xff\xff\xff\xff\xff\x00\x01garbage", 17));
    EXPECT_TRUE(raw.WaitClosed(3s));
  }
  EXPECT_TRUE(echo.server_closed.Wait(3s));
  Inbox inbox;
  WsClient client(echo.ClientOptions(), inbox.OnMessage(), inbox.OnClose());
  ASSERT_TRUE(client.Connect().ok());
  client.Send("still there?");
  EXPECT_TRUE(inbox.WaitMessages(2, 3s));
}

TEST(WsTest, BinaryFrameClosesWith1003) {
  EchoServer echo;
  RawSocket raw(echo.server->port());
  ASSERT_EQ(RawUpgrade(raw).rfind("HTTP/1.1 101", 0), 0u);
  raw.Write(Frame(0x2, "\x01\x02\x03"));
  std::string got = raw.Read(3s, "\x03\xeb");
  // The greeting text frame, then a close frame carrying 1003 (0x03eb).
  EXPECT_NE(got.find(std::string("\x88\x02\x03\xeb", 4)), std::string::npos);
}

TEST(WsTest, OversizedMessageClosesWith1009) {
  HttpServerOptions opt;
  opt.ws_max_message = 1024;
  EchoServer echo(opt);
  {
    // A frame header announcing 2000 bytes is refused before the payload is read.
    RawSocket raw(echo.server->port());
    ASSERT_EQ(RawUpgrade(raw).rfind("HTTP/1.1 101", 0), 0u);
    raw.Write(std::string("\x81\xfe\x07\xd0\x00\x00\x00\x00", 8));
    std::string got = raw.Read(3s, "\x03\xf1");
    EXPECT_NE(got.find(std::string("\x88\x02\x03\xf1", 4)), std::string::npos);
  }
  // Through the real client: the connection is dropped and both sides learn of it.
  Inbox inbox;
  WsClient client(echo.ClientOptions(), inbox.OnMessage(), inbox.OnClose());
  ASSERT_TRUE(client.Connect().ok());
  client.Send(std::string(4096, 'x'));
  ASSERT_TRUE(inbox.WaitClosed(3s));
  EXPECT_EQ(inbox.close_status->code(), StatusCode::kUnavailable);
  EXPECT_FALSE(client.connected());
  std::unique_lock<std::mutex> lock(inbox.mu);
  EXPECT_EQ(inbox.messages.size(), 1u);  // the greeting, never an echo
}

TEST(WsTest, KeepalivePingsAndDeadPeerIsNoticed) {
  HttpServerOptions opt;
  opt.ws_keepalive_interval = 50ms;
  opt.ws_idle_timeout = 300ms;
  EchoServer echo(opt);

  // A live client answers pings (Beast sends pongs), so it outlives the idle timeout.
  Inbox inbox;
  WsClient client(echo.ClientOptions(), inbox.OnMessage(), inbox.OnClose());
  ASSERT_TRUE(client.Connect().ok());
  EXPECT_FALSE(inbox.WaitClosed(700ms));
  client.Send("alive");
  EXPECT_TRUE(inbox.WaitMessages(2, 2s));

  // A dead peer that never answers: the server pings it, then drops it.
  RawSocket raw(echo.server->port());
  ASSERT_EQ(RawUpgrade(raw).rfind("HTTP/1.1 101", 0), 0u);
  std::string got = raw.Read(3s);
  EXPECT_TRUE(raw.peer_closed());
  EXPECT_NE(got.find('\x89'), std::string::npos);  // a ping frame arrived
}

// A peer that stops reading is disconnected once max_queued_bytes wait for it, never buffered
// without bound; one that reads gets everything.
TEST(WsTest, APeerThatDoesNotReadIsDroppedNotBufferedWithoutBound) {
  HttpServerOptions opt;
  opt.max_queued_bytes = 1 << 20;
  EchoServer echo(opt);
  RawSocket raw(echo.server->port());
  ASSERT_EQ(RawUpgrade(raw).rfind("HTTP/1.1 101", 0), 0u);
  raw.Write(Frame(0x1, "flood 256"));  // 64 MiB, far past the socket buffers and the bound
  EXPECT_TRUE(echo.server_closed.Wait(10s))
      << "the server kept queueing for a peer that reads nothing";
  EXPECT_EQ(echo.closed.load(), 1);

  // A reader that keeps up is not affected by the bound.
  Inbox inbox;
  WsClient client(echo.ClientOptions(), inbox.OnMessage(), inbox.OnClose());
  ASSERT_TRUE(client.Connect().ok());
  for (int round = 1; round <= 4; ++round) {  // 3 MiB in all, never 1 MiB waiting at once
    client.Send("flood 3");
    ASSERT_TRUE(inbox.WaitMessages(1 + 3 * round, 10s)) << "round " << round;
  }
  EXPECT_FALSE(inbox.WaitClosed(100ms));
}

TEST(WsTest, StopClosesOpenSocketsPromptly) {
  EchoServer echo;
  Inbox inbox;
  WsClient client(echo.ClientOptions(), inbox.OnMessage(), inbox.OnClose());
  ASSERT_TRUE(client.Connect().ok());
  ASSERT_TRUE(inbox.WaitMessages(1, 3s));
  auto start = std::chrono::steady_clock::now();
  echo.server->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  EXPECT_EQ(echo.closed.load(), 1);
  ASSERT_TRUE(inbox.WaitClosed(3s));
  EXPECT_EQ(inbox.close_status->code(), StatusCode::kUnavailable);
  client.Send("into the void");  // dropped, must not crash
}

}  // namespace
}  // namespace sluice
