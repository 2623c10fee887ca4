// The server's TLS stream (tls_socket_stream.h) against a plain blocking OpenSSL client on the
// other end of a loopback socket: sniffed bytes, large transfers both ways at once, the ends of
// a stream, timeouts, completion through the executor, and what an idle connection holds.
#include "net/tls_socket_stream.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/core/error.hpp>
#include <csignal>
#include <filesystem>
#include <functional>
#include <future>
#include <thread>

#include "audit/tls_identity.h"
#include "net/tls_internal.h"

namespace sluice::net_internal {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;
using namespace std::string_literals;
namespace fs = std::filesystem;

std::shared_ptr<ssl::context> ServerContext() {
  static std::shared_ptr<ssl::context> ctx = [] {
    std::string tmpl = (fs::temp_directory_path() / "sluice_tls_stream_XXXXXX").string();
    std::string dir = mkdtemp(tmpl.data());
    auto id = LoadOrCreateTlsIdentity(dir, TlsServerNames("127.0.0.1"));
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    auto c = MakeServerTlsContext(id->cert_chain_pem, id->key_pem);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    std::error_code ec;
    fs::remove_all(dir, ec);
    return *c;
  }();
  return ctx;
}

// A blocking OpenSSL client on its own socket (no verification: the server's certificate is
// not what these tests are about).
class Client {
 public:
  explicit Client(uint16_t port) : socket_(ioc_) {
    socket_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    ctx_ = SSL_CTX_new(TLS_client_method());
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, socket_.native_handle());
  }
  ~Client() {
    SSL_free(ssl_);
    SSL_CTX_free(ctx_);
  }
  bool Handshake() { return SSL_connect(ssl_) == 1; }
  bool Write(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      size_t n = 0;
      if (SSL_write_ex(ssl_, data.data() + off, data.size() - off, &n) != 1) return false;
      off += n;
    }
    return true;
  }
  std::string Read(size_t size) {
    std::string out(size, '\0');
    size_t off = 0;
    while (off < size) {
      size_t n = 0;
      if (SSL_read_ex(ssl_, out.data() + off, size - off, &n) != 1) break;
      off += n;
    }
    out.resize(off);
    return out;
  }
  void SendCloseNotify() { SSL_shutdown(ssl_); }
  void CloseTcp() { socket_.close(); }
  // Wakes a thread blocked writing, which close() would not.
  void ShutdownTcp() { ::shutdown(socket_.native_handle(), SHUT_RDWR); }
  SSL* ssl() { return ssl_; }

 private:
  asio::io_context ioc_;
  tcp::socket socket_;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
};

// A listening socket and an io_context run on a thread, for the server end.
class Loopback {
 public:
  Loopback() : acceptor_(ioc_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {}
  ~Loopback() {
    work_.reset();
    ioc_.stop();
    if (thread_.joinable()) thread_.join();
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  tcp::socket Accept() {
    tcp::socket s(ioc_);
    acceptor_.accept(s);
    return s;
  }
  void Run() {
    thread_ = std::thread([this] { ioc_.run(); });
  }
  // Runs `f` on the io thread and waits for it.
  void On(const std::function<void()>& f) {
    std::promise<void> done;
    asio::post(ioc_, [&] {
      f();
      done.set_value();
    });
    done.get_future().wait();
  }
  asio::io_context& ioc() { return ioc_; }

 private:
  asio::io_context ioc_;
  asio::executor_work_guard<asio::io_context::executor_type> work_{ioc_.get_executor()};
  tcp::acceptor acceptor_;
  std::thread thread_;
};

using Done = std::promise<std::pair<boost::system::error_code, size_t>>;

std::string Pattern(size_t size, unsigned seed) {
  std::string s(size, '\0');
  for (size_t i = 0; i < size; ++i)
    s[i] = static_cast<char>((i * 131 + seed * 7 + (i >> 11)) & 0xff);
  return s;
}

// A handshaken pair: the server's stream (its io thread running) and the client.
struct Pair {
  Loopback loop;
  std::unique_ptr<Client> client;
  std::unique_ptr<TlsSocketStream> server;

  // `sniff`: bytes the server reads raw before TLS, as the server's protocol detection does.
  explicit Pair(size_t sniff = 0) {
    client = std::make_unique<Client>(loop.port());
    tcp::socket s = loop.Accept();
    std::thread hello([&] { EXPECT_TRUE(client->Handshake()); });
    std::string first(sniff, '\0');
    if (sniff > 0) asio::read(s, asio::buffer(first));
    server = std::make_unique<TlsSocketStream>(std::move(s), ServerContext()->native_handle());
    Done done;
    server->async_handshake(asio::buffer(first), [&](boost::system::error_code ec, size_t n) {
      done.set_value({ec, n});
    });
    loop.Run();
    auto [ec, n] = done.get_future().get();
    EXPECT_FALSE(ec) << ec.message();
    hello.join();
  }
  ~Pair() {
    loop.On([&] { server.reset(); });
  }

  std::pair<boost::system::error_code, std::string> ServerReadSome(size_t max) {
    std::string buf(max, '\0');
    Done done;
    loop.On([&] {
      server->async_read_some(asio::buffer(buf), [&](boost::system::error_code ec, size_t n) {
        done.set_value({ec, n});
      });
    });
    auto [ec, n] = done.get_future().get();
    buf.resize(n);
    return {ec, buf};
  }
};

TEST(TlsSocketStreamTest, TheSniffedBytesAreReadFirstAndDataFlowsBothWays) {
  Pair p(/*sniff=*/5);  // a TLS record header, as async_detect_ssl leaves it
  ASSERT_TRUE(p.client->Write("hello"));
  auto [ec, got] = p.ServerReadSome(64);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(got, "hello");

  Done done;
  std::string out = "world";
  p.loop.On([&] {
    asio::async_write(*p.server, asio::buffer(out), [&](boost::system::error_code e, size_t n) {
      done.set_value({e, n});
    });
  });
  EXPECT_EQ(p.client->Read(5), "world");
  auto [wec, wn] = done.get_future().get();
  EXPECT_FALSE(wec);
  EXPECT_EQ(wn, 5u);
}

TEST(TlsSocketStreamTest, LargeTransfersBothWaysAtOnce) {
  Pair p;
  const std::string up = Pattern(3 << 20, 1);
  const std::string down = Pattern(3 << 20, 2);
  std::string received(up.size(), '\0');
  Done read_done;
  Done write_done;
  // Both in flight on the server at once; the client writes all before it reads, so the
  // server's write waits on a full socket while its read keeps going.
  p.loop.On([&] {
    asio::async_read(*p.server, asio::buffer(received),
                     [&](boost::system::error_code ec, size_t n) {
                       read_done.set_value({ec, n});
                     });
    asio::async_write(*p.server, asio::buffer(down), [&](boost::system::error_code ec, size_t n) {
      write_done.set_value({ec, n});
    });
  });
  ASSERT_TRUE(p.client->Write(up));
  std::string back = p.client->Read(down.size());
  auto [rec, rn] = read_done.get_future().get();
  auto [wec, wn] = write_done.get_future().get();
  EXPECT_FALSE(rec) << rec.message();
  EXPECT_FALSE(wec) << wec.message();
  EXPECT_EQ(rn, up.size());
  EXPECT_EQ(wn, down.size());
  EXPECT_TRUE(received == up);
  EXPECT_TRUE(back == down);
}

// Counts the records of application data the client receives (TLS 1.3 names a record's real
// type inside it: SSL3_RT_INNER_CONTENT_TYPE).
void CountDataRecords(int write_p, int, int content_type, const void* buf, size_t len, SSL*,
                      void* arg) {
  if (write_p || content_type != SSL3_RT_INNER_CONTENT_TYPE || len < 1) return;
  if (static_cast<const unsigned char*>(buf)[0] == SSL3_RT_APPLICATION_DATA)
    ++*static_cast<int*>(arg);
}

// Writes `buffers` with asio::async_write on the server's io thread; the client reads `size`
// bytes. Returns what the client read and the records it took.
template <typename Buffers>
std::pair<std::string, int> WriteAndCountRecords(Pair& p, const Buffers& buffers, size_t size) {
  int records = 0;
  SSL_set_msg_callback(p.client->ssl(), CountDataRecords);
  SSL_set_msg_callback_arg(p.client->ssl(), &records);
  Done done;
  p.loop.On([&] {
    asio::async_write(*p.server, buffers, [&](boost::system::error_code e, size_t n) {
      done.set_value({e, n});
    });
  });
  std::string got = p.client->Read(size);
  auto [ec, n] = done.get_future().get();
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(n, size);
  SSL_set_msg_callback(p.client->ssl(), nullptr);
  return {got, records};
}

// Beast hands over a WebSocket message as its frame header and its payload: one record, one
// socket write, not one per buffer.
TEST(TlsSocketStreamTest, ABufferSequenceGoesOutInAsFewRecordsAsItsSizeAllows) {
  Pair p;
  ASSERT_EQ(SSL_version(p.client->ssl()), TLS1_3_VERSION);

  const std::string header = "\x81\x7e\x01\x00"s;
  const std::string payload = Pattern(256, 3);
  const std::array<asio::const_buffer, 3> frame{asio::buffer(header), asio::const_buffer(),
                                                asio::buffer(payload)};
  auto [got, records] = WriteAndCountRecords(p, frame, header.size() + payload.size());
  EXPECT_TRUE(got == header + payload);
  EXPECT_EQ(records, 1);

  // 30 KiB in three buffers: a record holds at most 16 KiB, so two records.
  const std::string a = Pattern(10 << 10, 4), b = Pattern(10 << 10, 5), c = Pattern(10 << 10, 6);
  const std::array<asio::const_buffer, 3> large{asio::buffer(a), asio::buffer(b), asio::buffer(c)};
  auto [got2, records2] = WriteAndCountRecords(p, large, a.size() + b.size() + c.size());
  EXPECT_TRUE(got2 == a + b + c);
  EXPECT_EQ(records2, 2);

  // One buffer larger than a record is written in place, a record at a time.
  const std::string big = Pattern(40 << 10, 7);
  auto [got3, records3] = WriteAndCountRecords(p, asio::buffer(big), big.size());
  EXPECT_TRUE(got3 == big);
  EXPECT_EQ(records3, 3);
}

TEST(TlsSocketStreamTest, CloseNotifyIsEndOfStreamAndACutIsTruncation) {
  {
    Pair p;
    p.client->SendCloseNotify();
    auto [ec, got] = p.ServerReadSome(64);
    EXPECT_EQ(ec, asio::error::eof) << ec.message();
  }
  {
    Pair p;
    // The client first reads what the server sent after the handshake (TLS 1.3 tickets come
    // with this), so its close is a FIN and not a reset for unread bytes.
    std::string x = "x";
    Done sent;
    p.loop.On([&] {
      asio::async_write(*p.server, asio::buffer(x), [&](boost::system::error_code e, size_t n) {
        sent.set_value({e, n});
      });
    });
    ASSERT_EQ(p.client->Read(1), "x");
    sent.get_future().wait();
    p.client->CloseTcp();
    auto [ec, got] = p.ServerReadSome(64);
    EXPECT_EQ(ec, asio::ssl::error::stream_truncated) << ec.message();
  }
}

// A hostile client asks for a key update with every message while the server never writes:
// the answers OpenSSL queues while reading stay bounded, and the connection is dropped.
TEST(TlsSocketStreamTest, KeyUpdatesAskedWhileTheServerNeverWritesAreBounded) {
  // The client's OpenSSL writes with write(2): once the test cuts its socket, a write would
  // raise SIGPIPE and end the test binary.
  std::signal(SIGPIPE, SIG_IGN);
  Pair p;
  std::thread hostile([&] {
    for (int i = 0; i < 20000; ++i) {
      if (SSL_key_update(p.client->ssl(), SSL_KEY_UPDATE_REQUESTED) != 1) break;
      if (!p.client->Write("x")) break;
    }
  });
  // The server reads on its own thread until the stream fails, noting the most output queued.
  std::string buf(16, '\0');
  size_t most = 0;
  int reads = 0;
  std::promise<boost::system::error_code> failed;
  std::function<void()> read_next = [&] {
    p.server->next_layer().expires_after(10s);
    p.server->async_read_some(asio::buffer(buf), [&](boost::system::error_code ec, size_t) {
      most = std::max(most, p.server->core()->PendingBytes());
      ++reads;
      if (ec) return failed.set_value(ec);
      read_next();
    });
  };
  p.loop.On(read_next);
  auto result = failed.get_future();
  ASSERT_EQ(result.wait_for(60s), std::future_status::ready);
  boost::system::error_code last = result.get();
  p.client->ShutdownTcp();
  hostile.join();
  EXPECT_EQ(last, asio::error::no_buffer_space) << last.message() << " after " << reads;
  EXPECT_LE(most, 64u * 1024 + 1024);
}

TEST(TlsSocketStreamTest, GarbageFailsTheHandshakeWithoutACrash) {
  Loopback loop;
  asio::io_context cioc;
  tcp::socket raw(cioc);
  raw.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), loop.port()));
  TlsSocketStream server(loop.Accept(), ServerContext()->native_handle());
  std::string junk = "\x16\x03\x01\x00\x05hello, not a ClientHello at all"s;
  asio::write(raw, asio::buffer(junk));
  Done done;
  server.async_handshake(asio::const_buffer(), [&](boost::system::error_code ec, size_t n) {
    done.set_value({ec, n});
  });
  loop.Run();
  auto fut = done.get_future();
  ASSERT_EQ(fut.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(fut.get().first);
  loop.On([] {});
}

TEST(TlsSocketStreamTest, AWaitEndsAtTheTcpStreamsExpiry) {
  Pair p;
  std::string buf(16, '\0');
  Done done;
  p.loop.On([&] {
    p.server->next_layer().expires_after(100ms);
    p.server->async_read_some(asio::buffer(buf), [&](boost::system::error_code ec, size_t n) {
      done.set_value({ec, n});
    });
  });
  auto fut = done.get_future();
  ASSERT_EQ(fut.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(fut.get().first, boost::beast::error::timeout);
}

TEST(TlsSocketStreamTest, AReadOfBufferedBytesCompletesThroughTheExecutor) {
  Pair p;
  ASSERT_TRUE(p.client->Write("abc"));
  auto [ec, got] = p.ServerReadSome(1);  // the rest of the record stays inside OpenSSL
  ASSERT_FALSE(ec);
  EXPECT_EQ(got, "a");
  // The next read needs no socket: it must still not complete inside async_read_some.
  std::string buf(8, '\0');
  std::promise<bool> inline_call;
  bool initiating = false;
  p.loop.On([&] {
    initiating = true;
    p.server->async_read_some(asio::buffer(buf), [&](boost::system::error_code e, size_t n) {
      EXPECT_FALSE(e);
      EXPECT_EQ(std::string(buf.data(), n), "bc");
      inline_call.set_value(initiating);
    });
    initiating = false;
  });
  EXPECT_FALSE(inline_call.get_future().get());
}

#if !defined(__SANITIZE_ADDRESS__)
// Heap bytes one idle, handshaken server connection holds: measured as what destroying the
// server ends of `n` connections gives back (the clients stay), for this stream and, as the
// baseline in the same run, Boost.Asio's ssl::stream, which the server used before.
template <typename MakeServer>
double HeldPerConnection(int n, MakeServer make_server) {
  Loopback loop;
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::shared_ptr<void>> servers;
  for (int i = 0; i < n; ++i) {
    clients.push_back(std::make_unique<Client>(loop.port()));
    tcp::socket s = loop.Accept();
    // A handshake and one message, so buffers sized by traffic have been used once.
    Client* c = clients.back().get();
    std::thread hello([c] {
      EXPECT_TRUE(c->Handshake());
      EXPECT_TRUE(c->Write("ping"));
    });
    servers.push_back(make_server(std::move(s), loop.ioc()));
    hello.join();
  }
  size_t before = mallinfo2().uordblks;
  servers.clear();
  size_t after = mallinfo2().uordblks;
  return before > after ? static_cast<double>(before - after) / n : 0.0;
}

TEST(TlsSocketStreamTest, AnIdleConnectionHoldsAFractionOfAsiosSslStream) {
  const int n = 50;
  double ours = HeldPerConnection(n, [](tcp::socket s, asio::io_context& ioc) {
    auto stream = std::make_shared<TlsSocketStream>(std::move(s), ServerContext()->native_handle());
    Done hs;
    stream->async_handshake(asio::const_buffer(), [&](boost::system::error_code ec, size_t n2) {
      hs.set_value({ec, n2});
    });
    auto f = hs.get_future();
    while (f.wait_for(0s) != std::future_status::ready) ioc.run_one();
    EXPECT_FALSE(f.get().first);
    std::string buf(16, '\0');
    Done rd;
    stream->async_read_some(asio::buffer(buf), [&](boost::system::error_code ec, size_t n2) {
      rd.set_value({ec, n2});
    });
    auto r = rd.get_future();
    while (r.wait_for(0s) != std::future_status::ready) ioc.run_one();
    return std::shared_ptr<void>(stream);
  });
  double asios = HeldPerConnection(n, [](tcp::socket s, asio::io_context&) {
    auto stream = std::make_shared<asio::ssl::stream<tcp::socket>>(std::move(s), *ServerContext());
    boost::system::error_code ec;
    stream->handshake(asio::ssl::stream_base::server, ec);
    EXPECT_FALSE(ec) << ec.message();
    std::string buf(16, '\0');
    stream->read_some(asio::buffer(buf), ec);
    return std::shared_ptr<void>(stream);
  });
  std::printf(
      "idle TLS connection, server end: %.1f KiB here, %.1f KiB with asio::ssl::stream "
      "(%.1fx)\n",
      ours / 1024, asios / 1024, ours > 0 ? asios / ours : 0.0);
  EXPECT_GT(ours, 0.0);
  EXPECT_LT(ours, 24 * 1024.0);
  EXPECT_LT(ours * 3, asios);
}
#endif

}  // namespace
}  // namespace sluice::net_internal
