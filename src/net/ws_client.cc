#include "net/ws_client.h"

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <deque>
#include <mutex>
#include <thread>
#include <variant>

#include "net/net_internal.h"
#include "net/tls_internal.h"

namespace sluice {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using PlainWs = websocket::stream<beast::tcp_stream>;
using TlsWs = websocket::stream<beast::ssl_stream<beast::tcp_stream>>;

namespace {
// How long a local Close waits for the server's close frame before dropping the socket.
constexpr std::chrono::milliseconds kCloseGrace{1000};
}  // namespace

class WsClient::Impl : public std::enable_shared_from_this<Impl> {
  // First in the class: members below deduce their return types through WithWs.
  // Runs `f` on the WebSocket stream (TLS or plain).
  template <typename F>
  decltype(auto) WithWs(F&& f) {
    if (auto* t = std::get_if<TlsWs>(&ws_)) return f(*t);
    return f(std::get<PlainWs>(ws_));
  }
  beast::tcp_stream& Tcp() {
    return WithWs([](auto& ws) -> beast::tcp_stream& { return beast::get_lowest_layer(ws); });
  }

 public:
  Impl(Options options, std::function<void(std::string_view)> on_message,
       std::function<void(Status)> on_close)
      : options_(std::move(options)),
        on_message_(std::move(on_message)),
        on_close_(std::move(on_close)),
        ping_timer_(ioc_),
        close_timer_(ioc_) {
    where_ = net_internal::FormatEndpoint(options_.url.host, options_.url.port);
    if (options_.url.secure()) {
      auto ctx = net_internal::TlsClientContext::Create(options_.url.tls);
      if (ctx.ok()) {
        tls_ = std::move(*ctx);
        ws_.emplace<TlsWs>(ioc_, tls_->context());
        return;
      }
      tls_error_ = ctx.status();  // reported by Connect
    }
    ws_.emplace<PlainWs>(ioc_);
  }

  ~Impl() {
    // Reached only once no handler holds us: the io thread is done or was never started. The
    // last reference may be dropped on the io thread itself, which cannot join itself.
    if (io_thread_.joinable()) {
      if (io_thread_.get_id() == std::this_thread::get_id()) {
        io_thread_.detach();
      } else {
        io_thread_.join();
      }
    }
  }

  Status Connect() {
    if (started_.exchange(true)) return Status::FailedPrecondition("Connect called twice");
    if (options_.url.secure() && !tls_) return tls_error_;
    beast::error_code ec;
    tcp::resolver resolver(ioc_);
    auto results = resolver.resolve(options_.url.host, std::to_string(options_.url.port), ec);
    if (ec) return Status::Unavailable("cannot resolve " + where_ + ": " + ec.message());
    auto& tcp_stream = Tcp();
    tcp_stream.expires_after(options_.connect_timeout);
    ec = Run([&](auto done) { tcp_stream.async_connect(results, done); });
    if (ec) {
      tcp_stream.close();
      return Status::Unavailable("cannot connect to " + where_ + ": " + ec.message());
    }
    tcp_stream.socket().set_option(tcp::no_delay(true), ec);
    if (auto* tls_ws = std::get_if<TlsWs>(&ws_)) {
      // Under the same deadline as the TCP connect.
      auto& tls = tls_ws->next_layer();
      Status prepared = tls_->Prepare(tls.native_handle(), options_.url.host);
      if (!prepared.ok()) {
        tcp_stream.close();
        return prepared;
      }
      ec = Run(
          [&](auto done) { tls.async_handshake(net_internal::ssl::stream_base::client, done); });
      if (ec) {
        Status st = ec == beast::error::timeout
                        ? Status::Unavailable("TLS handshake with " + where_ + " timed out")
                        : tls_->HandshakeError(tls.native_handle(), ec, where_);
        tcp_stream.close();
        return st;
      }
    }
    auto headers = options_.headers;
    WithWs([&](auto& ws) {
      ws.set_option(websocket::stream_base::decorator([headers](websocket::request_type& req) {
        req.set(http::field::user_agent, "sluice-agent");
        for (const auto& [name, value] : headers) {
          req.set(beast::string_view(name.data(), name.size()), value);
        }
      }));
      ws.read_message_max(options_.max_message);
    });
    websocket::response_type response;
    std::string target = options_.url.base_path + options_.path;
    if (target.empty()) target = "/";
    ec = Run([&](auto done) {
      WithWs([&](auto& ws) { ws.async_handshake(response, where_, target, done); });
    });
    if (ec) {
      tcp_stream.close();
      if (ec == websocket::error::upgrade_declined) {
        int status = static_cast<int>(response.result_int());
        return Status(StatusCodeForHttp(status), "WebSocket upgrade refused with HTTP " +
                                                     std::to_string(status) + ": " +
                                                     ErrorMessageFromBody(response.body()));
      }
      if (ec == beast::error::timeout) {
        return Status::Unavailable("WebSocket handshake with " + where_ + " timed out");
      }
      return Status::Unavailable("WebSocket handshake with " + where_ + " failed: " + ec.message());
    }
    tcp_stream.expires_never();  // the websocket timeout takes over
    websocket::stream_base::timeout t;
    t.handshake_timeout = options_.connect_timeout;
    t.idle_timeout = options_.idle_timeout;
    // Beast's idle check only counts traffic when keep-alive pings are on (otherwise the
    // connection times out after idle_timeout no matter what); our own ping timer adds pings
    // at keepalive_interval so idle middleboxes see traffic.
    t.keep_alive_pings = true;
    WithWs([&](auto& ws) {
      ws.set_option(t);
      ws.text(true);
    });
    connected_ = true;
    ioc_.restart();
    DoRead();
    SchedulePing();
    io_thread_ = std::thread([self = shared_from_this()] {
      try {
        self->ioc_.run();
      } catch (...) {
        self->Finish(Status::Internal("WebSocket io thread failed"));
      }
    });
    return Status::Ok();
  }

  void Send(std::string text) {
    if (!connected_) return;
    asio::post(ioc_, [self = shared_from_this(), t = std::move(text)]() mutable {
      if (self->finished_ || self->closing_) return;
      self->out_.push_back(std::move(t));
      if (!self->writing_) self->DoWrite();
    });
  }

  void Close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!close_called_) {
        close_called_ = true;
        if (io_thread_.joinable()) {
          asio::post(ioc_, [self = shared_from_this()] { self->StartClose(); });
        }
      }
    }
    std::thread to_join;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (io_thread_.joinable() && io_thread_.get_id() != std::this_thread::get_id()) {
        to_join = std::move(io_thread_);
      }
    }
    if (to_join.joinable()) {
      to_join.join();
      // Run what was posted after the loop ended (e.g. our StartClose) so no queued handler
      // keeps this object alive.
      ioc_.restart();
      ioc_.poll();
    }
  }

  bool connected() const { return connected_; }

 private:
  template <typename Start>
  beast::error_code Run(Start&& start) {
    return net_internal::RunToCompletion(ioc_, std::forward<Start>(start));
  }

  void DoRead() {
    WithWs([&](auto& ws) {
      ws.async_read(read_buf_, [self = shared_from_this()](beast::error_code ec, size_t) {
        self->OnRead(ec);
      });
    });
  }

  void OnRead(beast::error_code ec) {
    if (ec) {
      if (local_close_) return Finish(Status::Ok());
      if (ec == websocket::error::closed) {
        auto reason = WithWs([](auto& ws) { return ws.reason(); });
        return Finish(Status::Unavailable("server closed the connection (" +
                                          std::to_string(reason.code) + " " +
                                          std::string(reason.reason.c_str()) + ")"));
      }
      return Finish(Status::Unavailable("connection to " + where_ + " lost: " + ec.message()));
    }
    std::string message = beast::buffers_to_string(read_buf_.data());
    read_buf_.consume(read_buf_.size());
    if (on_message_ && !closing_) {
      try {
        on_message_(message);
      } catch (...) {
        // A throwing callback must not kill the io thread; the message is dropped.
      }
    }
    DoRead();
  }

  void DoWrite() {
    if (out_.empty() || closing_) return;
    writing_ = true;
    WithWs([&](auto& ws) {
      ws.async_write(asio::buffer(out_.front()),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       self->writing_ = false;
                       // On error the read side notices; once finished the queue is gone.
                       if (ec || self->finished_ || self->out_.empty()) return;
                       self->out_.pop_front();
                       self->DoWrite();
                     });
    });
  }

  void SchedulePing() {
    ping_timer_.expires_after(options_.keepalive_interval);
    ping_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec || self->finished_) return;
      if (!self->closing_ && !self->pinging_) {
        self->pinging_ = true;
        self->WithWs([&](auto& ws) {
          ws.async_ping({}, [self](beast::error_code) { self->pinging_ = false; });
        });
      }
      self->SchedulePing();
    });
  }

  void StartClose() {
    if (finished_ || closing_) return;
    closing_ = true;
    local_close_ = true;
    WithWs(
        [](auto& ws) { ws.async_close(websocket::close_code::normal, [](beast::error_code) {}); });
    close_timer_.expires_after(kCloseGrace);
    close_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec || self->finished_) return;
      self->Tcp().close();  // the pending read fails -> Finish
    });
  }

  void Finish(Status status) {
    if (finished_) return;
    finished_ = true;
    connected_ = false;
    ping_timer_.cancel();
    close_timer_.cancel();
    // A write in flight still reads out_.front(); the queue goes with the object then.
    if (!writing_) out_.clear();
    Tcp().close();
    // Beast's idle timer may still be pending; it must not hold Close() up.
    ioc_.stop();
    if (on_close_) {
      try {
        on_close_(std::move(status));
      } catch (...) {
      }
    }
  }

  const Options options_;
  const std::function<void(std::string_view)> on_message_;
  const std::function<void(Status)> on_close_;
  std::string where_;

  asio::io_context ioc_;
  std::unique_ptr<net_internal::TlsClientContext> tls_;  // wss only; outlives ws_
  Status tls_error_;                                     // why tls_ could not be made
  std::variant<std::monostate, PlainWs, TlsWs> ws_;      // set in the constructor
  asio::steady_timer ping_timer_;
  asio::steady_timer close_timer_;
  std::atomic<bool> started_{false};
  std::atomic<bool> connected_{false};

  std::mutex mu_;
  std::thread io_thread_;      // guarded by mu_
  bool close_called_ = false;  // guarded by mu_

  // Touched only on the io thread.
  beast::flat_buffer read_buf_;
  std::deque<std::string> out_;
  bool writing_ = false;
  bool pinging_ = false;
  bool closing_ = false;
  bool local_close_ = false;
  bool finished_ = false;
};

WsClient::WsClient(Options options, std::function<void(std::string_view)> on_message,
                   std::function<void(Status)> on_close)
    : impl_(
          std::make_shared<Impl>(std::move(options), std::move(on_message), std::move(on_close))) {}

WsClient::~WsClient() { Close(); }

Status WsClient::Connect() {
  try {
    return impl_->Connect();
  } catch (const std::exception& e) {
    return Status::Internal(std::string("WebSocket connect failed: ") + e.what());
  }
}

void WsClient::Send(std::string text) { impl_->Send(std::move(text)); }
void WsClient::Close() { impl_->Close(); }
bool WsClient::connected() const { return impl_->connected(); }

}  // namespace sluice
