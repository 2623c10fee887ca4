#include "net/http_server.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/core/detect_ssl.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <variant>
#include <vector>

#include "common/text.h"
#include "common/thread_name.h"
#include "net/io_lag_probe.h"
#include "net/net_internal.h"
#include "net/tls_internal.h"
#include "net/tls_socket_stream.h"

namespace sluice {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
namespace ssl = asio::ssl;

// A connection is plain TCP or TLS for its whole life (a server speaks one or the other); the
// session code is written once and picks the layer through these variants.
using PlainStream = beast::tcp_stream;
using TlsStream = net_internal::TlsSocketStream;  // holds no buffers while idle
using PlainWs = websocket::stream<PlainStream>;
using TlsWs = websocket::stream<TlsStream>;

namespace {

constexpr size_t kHeaderLimit = 16 * 1024;
// Bytes of a pipelined next request buffered while a response is pending; beyond this the
// server stops reading (and so stops noticing a disconnect) until the response is done.
constexpr size_t kMaxPipelined = 64 * 1024;
// After an early error response (413, 400) the rest of the request is read and dropped for a
// moment, so the client sees the response instead of a connection reset.
constexpr size_t kLingerBytes = 8 << 20;
constexpr std::chrono::milliseconds kLingerTime{2000};

// Something Stop() can abort: every live connection registers one.
class Closable {
 public:
  virtual ~Closable() = default;
  virtual void Abort() = 0;
};

}  // namespace

// State every session shares with the server; held by shared_ptr so a session that outlives
// Stop() by a moment still has valid options and callbacks.
struct ServerShared {
  HttpServerOptions options;
  HttpServer::HttpHandler handler;
  HttpServer::WsUpgrade ws_upgrade;
  // Where handlers run (options.handler_threads); null: on the io thread that read the request.
  // Set in Start, before any connection is accepted; the context is the server's (Impl), which
  // joins its threads in Stop before the io context goes.
  asio::io_context* handlers = nullptr;

  std::atomic<uint64_t> next_id{1};
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, std::weak_ptr<Closable>> sessions;  // guarded by mu
  bool stopping = false;                                 // guarded by mu
  // Set in Start when options.tls_cert_chain_pem is; null: plain HTTP.
  std::shared_ptr<ssl::context> tls;
  // Open connections per client IP (accepted and not yet destroyed), for the per-address cap.
  std::mutex addr_mu;
  std::map<std::string, size_t> per_address;  // guarded by addr_mu
  std::atomic<uint64_t> refused{0};

  // False when the server is stopping: the caller must drop the connection.
  bool Register(uint64_t id, std::weak_ptr<Closable> s) {
    std::lock_guard<std::mutex> lock(mu);
    if (stopping) return false;
    sessions[id] = std::move(s);
    return true;
  }
  void Unregister(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu);
    if (sessions.erase(id) > 0) cv.notify_all();
  }
  // False (and counted) when `ip` is at its cap; otherwise its count goes up by one.
  bool Admit(const std::string& ip) {
    const size_t cap = options.max_connections_per_address;
    std::lock_guard<std::mutex> lock(addr_mu);
    size_t& n = per_address[ip];
    if (cap != 0 && n >= cap) {
      refused.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    ++n;
    return true;
  }
  void Release(const std::string& ip) {
    std::lock_guard<std::mutex> lock(addr_mu);
    auto it = per_address.find(ip);
    if (it != per_address.end() && --it->second == 0) per_address.erase(it);
  }
};

// One admitted connection's place under its address's cap, given back when the last session
// object holding it (HTTP, then possibly WebSocket) is gone.
class AddressSlot {
 public:
  AddressSlot(std::shared_ptr<ServerShared> shared, std::string ip)
      : shared_(std::move(shared)), ip_(std::move(ip)) {}
  ~AddressSlot() { shared_->Release(ip_); }
  AddressSlot(const AddressSlot&) = delete;
  AddressSlot& operator=(const AddressSlot&) = delete;

 private:
  const std::shared_ptr<ServerShared> shared_;
  const std::string ip_;
};

namespace {

std::string_view Sv(beast::string_view s) { return {s.data(), s.size()}; }

std::string RemoteAddr(const tcp::socket& socket) {
  beast::error_code ec;
  tcp::endpoint ep = socket.remote_endpoint(ec);
  if (ec) return "unknown";
  return net_internal::FormatEndpoint(ep.address().to_string(), ep.port());
}

// Drops CR and LF so a handler cannot split the response with a header value.
std::string HeaderSafe(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c != '\r' && c != '\n') out.push_back(c);
  }
  return out;
}

std::string ReasonPhrase(int status) {
  std::string_view r =
      Sv(http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status))));
  if (r.empty() || r.front() == '<') return "Status";
  return std::string(r);
}

std::string FormatHead(int status, std::string_view content_type,
                       const std::vector<std::pair<std::string, std::string>>& extra,
                       std::optional<size_t> content_length, bool keep_alive) {
  if (status < 100 || status > 999) status = 500;
  std::string head = "HTTP/1.1 " + std::to_string(status) + " " + ReasonPhrase(status) + "\r\n";
  if (!content_type.empty()) head += "Content-Type: " + HeaderSafe(content_type) + "\r\n";
  for (const auto& [name, value] : extra) {
    head += HeaderSafe(name) + ": " + HeaderSafe(value) + "\r\n";
  }
  if (content_length) {
    head += "Content-Length: " + std::to_string(*content_length) + "\r\n";
  } else {
    head += "Transfer-Encoding: chunked\r\n";
  }
  head += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return head;
}

std::string ErrorResponse(int status, const Status& st) {
  std::string body = ErrorBody(st);
  return FormatHead(status, "application/json", {}, body.size(), false) + body;
}

HttpRequest RequestFromMessage(const http::request<http::string_body>& msg,
                               std::string remote_addr) {
  HttpRequest req;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  std::string_view target = Sv(msg.target());
  size_t q = target.find('?');
  req.path = PercentDecode(target.substr(0, q), false);
  if (q != std::string_view::npos) req.query = ParseQuery(target.substr(q + 1));
  for (const auto& field : msg) {
    std::string name = ToLower(Sv(field.name_string()));
    auto [it, inserted] = req.headers.emplace(name, std::string(field.value()));
    if (!inserted) {
      it->second += ", ";
      it->second += std::string(field.value());
    }
  }
  req.remote_addr = std::move(remote_addr);
  return req;
}

}  // namespace

class HttpSession;

// The shared state behind a ResponseWriter. While a response is pending it holds the session
// strongly, so a long-poll keeps its connection object alive; the link is dropped as soon as
// the response finished or the client went away, which breaks the session<->writer cycle.
class ResponseWriter::Impl {
 public:
  enum class State { kNone, kSent, kStreaming, kEnded };

  Impl(std::shared_ptr<HttpSession> session, size_t max_pending)
      : max_pending_(max_pending), session_(std::move(session)) {}

  void Send(HttpResponse response);
  bool StartStream(int status, std::string content_type);
  bool WriteChunk(std::string data);
  bool behind() const {
    std::lock_guard<std::mutex> lock(mu_);
    return behind_;
  }
  void EndStream(std::string last);
  // The session handed `bytes` of chunks to the socket: they no longer count against the bound.
  void Drained(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ -= std::min(pending_, bytes);
  }
  void Abandon();  // the public writer was dropped

  bool closed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }
  void OnClose(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!closed_) {
        on_close_.push_back(std::move(fn));
        return;
      }
    }
    if (fn) fn();
  }
  // Called on the session's strand when the response finished or the client is gone.
  void MarkClosed() {
    std::vector<std::function<void()>> fns;
    std::shared_ptr<HttpSession> release;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      closed_ = true;
      fns.swap(on_close_);
      release.swap(session_);
    }
    for (auto& fn : fns) {
      try {
        if (fn) fn();
      } catch (...) {
        // A throwing callback must not take the io thread down.
      }
    }
  }

 private:
  mutable std::mutex mu_;
  const size_t max_pending_;                     // HttpServerOptions::max_queued_bytes
  size_t pending_ = 0;                           // chunk bytes queued, not yet written; mu_
  bool behind_ = false;                          // a chunk was refused for them; mu_
  State state_ = State::kNone;                   // guarded by mu_
  bool closed_ = false;                          // guarded by mu_
  std::vector<std::function<void()>> on_close_;  // guarded by mu_
  std::shared_ptr<HttpSession> session_;         // guarded by mu_
};

class WsSession;

class HttpSession : public Closable, public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket&& socket, std::shared_ptr<ServerShared> shared, uint64_t id,
              std::shared_ptr<AddressSlot> slot)
      : shared_(std::move(shared)), id_(id), slot_(std::move(slot)) {
    if (shared_->tls) {
      stream_.emplace<TlsStream>(std::move(socket), shared_->tls->native_handle());
    } else {
      stream_.emplace<PlainStream>(std::move(socket));
    }
    remote_addr_ = RemoteAddr(Tcp().socket());
  }
  ~HttpSession() override { shared_->Unregister(id_); }

  void Start() {
    asio::dispatch(Tcp().get_executor(), [self = shared_from_this()] {
      if (std::holds_alternative<TlsStream>(self->stream_)) return self->DetectTls();
      self->ReadHeader();
    });
  }
  void Abort() override {
    asio::post(Tcp().get_executor(), [self = shared_from_this()] { self->DoClose(); });
  }
  template <typename F>
  void Post(F&& f) {
    asio::post(Tcp().get_executor(), std::forward<F>(f));
  }

  // The Do* methods run on the strand, posted by ResponseWriter::Impl in call order.
  void DoSend(HttpResponse r) {
    if (closed_) return;
    std::string text = FormatHead(r.status, r.content_type, r.headers, r.body.size(), keep_alive_);
    if (!head_request_) text += r.body;
    response_done_ = true;
    Enqueue(std::move(text));
  }
  void DoStartStream(int status, std::string content_type) {
    if (closed_) return;
    Enqueue(FormatHead(status, content_type, {}, std::nullopt, keep_alive_));
  }
  void DoChunk(std::string data) {
    if (closed_ || data.empty()) return;
    queued_chunk_bytes_ += data.size();
    char size[24];
    std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
    std::string text = size;
    text += data;
    text += "\r\n";
    Enqueue(std::move(text));
  }
  void DoEndStream() {
    if (closed_) return;
    response_done_ = true;
    Enqueue("0\r\n\r\n");
  }

 private:
  beast::tcp_stream& Tcp() {
    if (auto* t = std::get_if<TlsStream>(&stream_)) return beast::get_lowest_layer(*t);
    return std::get<PlainStream>(stream_);
  }
  // Runs `f` on the stream HTTP is spoken over (TLS or plain).
  template <typename F>
  void WithStream(F&& f) {
    if (auto* t = std::get_if<TlsStream>(&stream_)) return f(*t);
    f(std::get<PlainStream>(stream_));
  }

  // TLS ports first look at the first bytes: a TLS ClientHello goes on to the handshake, and
  // anything else (a plain HTTP request) gets a readable 400 instead of a handshake failure.
  // Detection and handshake share one deadline, so a client that connects and sends nothing,
  // or trickles a handshake, cannot hold the connection (and its slot) for long.
  void DetectTls() {
    Tcp().expires_after(shared_->options.tls_handshake_timeout);
    beast::async_detect_ssl(Tcp(), buffer_,
                            [self = shared_from_this()](beast::error_code ec, bool is_tls) {
                              self->OnDetect(ec, is_tls);
                            });
  }
  void OnDetect(beast::error_code ec, bool is_tls) {
    if (closed_) return;
    if (ec) return DoClose();
    if (!is_tls) return RefusePlainHttp();
    // The sniffed bytes are handed to the TLS stream, which reads them first.
    std::get<TlsStream>(stream_).async_handshake(
        buffer_.data(),
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHandshake(ec); });
    buffer_.consume(buffer_.size());
  }
  void OnHandshake(beast::error_code ec) {
    if (closed_) return;
    if (ec) return DoClose();  // garbage, a wrong protocol version, a timeout: nothing to say
    ReadHeader();
  }
  void RefusePlainHttp() {
    close_after_ = true;
    write_buf_ = ErrorResponse(
        400, Status::InvalidArgument("this server speaks HTTPS: use https:// (or wss://)"));
    writing_ = true;
    asio::async_write(Tcp(), asio::buffer(write_buf_),
                      [self = shared_from_this()](beast::error_code ec, size_t) {
                        self->writing_ = false;
                        if (ec || self->closed_) return self->DoClose();
                        self->LingerClose();
                      });
  }

  void ReadHeader() {
    if (closed_) return;
    response_done_ = false;
    close_after_ = false;
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    // The real limit is set once the headers are known (it may depend on them); Beast would
    // otherwise reject a large Content-Length while still parsing headers.
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    Tcp().expires_after(shared_->options.http_idle_timeout);
    WithStream([&](auto& stream) {
      http::async_read_header(
          stream, buffer_, *parser_,
          [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
    });
  }

  static bool IsHttpParseError(const beast::error_code& ec) {
    return ec.category() == http::make_error_code(http::error::bad_method).category() &&
           ec != http::error::end_of_stream && ec != http::error::partial_message;
  }

  void OnHeader(beast::error_code ec) {
    if (closed_) return;
    if (ec == http::error::header_limit) {
      return SendErrorAndClose(431, Status::InvalidArgument("request headers exceed 16 KiB"));
    }
    if (ec) {
      if (IsHttpParseError(ec)) {
        return SendErrorAndClose(
            400, Status::InvalidArgument("malformed HTTP request: " + ec.message()));
      }
      return DoClose();  // eof, reset, idle timeout
    }
    auto& msg = parser_->get();
    req_ = RequestFromMessage(msg, remote_addr_);
    if (websocket::is_upgrade(msg)) return Upgrade();
    keep_alive_ = msg.keep_alive();
    head_request_ = msg.method() == http::verb::head;

    size_t limit = shared_->options.default_body_limit;
    if (shared_->options.body_limit) {
      try {
        limit = shared_->options.body_limit(req_);
      } catch (...) {
        return SendErrorAndClose(500, Status::Internal("body limit callback failed"));
      }
    }
    if (auto cl = parser_->content_length(); cl && *cl > limit) {
      return SendErrorAndClose(
          413, Status::ResourceExhausted("request body of " + std::to_string(*cl) +
                                         " bytes exceeds the limit of " + std::to_string(limit)));
    }
    parser_->body_limit(limit);
    body_limit_ = limit;
    if (parser_->is_done()) return Dispatch();
    if (ToLower(req_.Header("expect")) == "100-continue") {
      Enqueue("HTTP/1.1 100 Continue\r\n\r\n");
    }
    Tcp().expires_after(shared_->options.http_idle_timeout);
    WithStream([&](auto& stream) {
      http::async_read(
          stream, buffer_, *parser_,
          [self = shared_from_this()](beast::error_code ec, size_t) { self->OnBody(ec); });
    });
  }

  void OnBody(beast::error_code ec) {
    if (closed_) return;
    if (ec == http::error::body_limit) {
      return SendErrorAndClose(413,
                               Status::ResourceExhausted("request body exceeds the limit of " +
                                                         std::to_string(body_limit_) + " bytes"));
    }
    if (ec) {
      if (IsHttpParseError(ec)) {
        return SendErrorAndClose(
            400, Status::InvalidArgument("malformed HTTP request body: " + ec.message()));
      }
      return DoClose();
    }
    req_.body = std::move(parser_->get().body());
    Dispatch();
  }

  void Dispatch() {
    parser_.reset();
    writer_state_ = std::make_shared<ResponseWriter::Impl>(shared_from_this(),
                                                           shared_->options.max_queued_bytes);
    auto writer = std::make_shared<ResponseWriter>(writer_state_);
    // The client may now legitimately wait for minutes (long-poll, log stream).
    Tcp().expires_never();
    StartWatch();
    if (!shared_->handler) {
      writer->Send({404, "application/json", ErrorBody(Status::NotFound("no handler")), {}});
      return;
    }
    if (shared_->handlers == nullptr) return CallHandler(*shared_, std::move(req_), writer);
    // Off the io thread: this one goes back to reading sockets while the handler runs.
    asio::post(*shared_->handlers,
               [shared = shared_, req = std::move(req_), writer = std::move(writer)]() mutable {
                 CallHandler(*shared, std::move(req), writer);
               });
  }

  static void CallHandler(const ServerShared& shared, HttpRequest req,
                          const std::shared_ptr<ResponseWriter>& writer) {
    try {
      shared.handler(std::move(req), writer);
    } catch (const std::exception& e) {
      writer->Send({500,
                    "application/json",
                    ErrorBody(Status::Internal(std::string("handler failed: ") + e.what())),
                    {}});
    } catch (...) {
      writer->Send({500, "application/json", ErrorBody(Status::Internal("handler failed")), {}});
    }
  }

  // Reads while a response is pending, to notice a client that went away (so long-polls and
  // streams can be abandoned) and to buffer a pipelined next request.
  void StartWatch() {
    if (closed_ || watching_ || buffer_.size() >= kMaxPipelined) return;
    watching_ = true;
    WithStream([&](auto& stream) {
      stream.async_read_some(
          buffer_.prepare(4096),
          [self = shared_from_this()](beast::error_code ec, size_t n) { self->OnWatch(ec, n); });
    });
  }

  void OnWatch(beast::error_code ec, size_t n) {
    watching_ = false;
    buffer_.commit(n);
    if (closed_) return;
    if (ec && ec != asio::error::operation_aborted) return DoClose();
    if (next_pending_) {
      next_pending_ = false;
      return ReadHeader();
    }
    if (!ec) StartWatch();
  }

  void Enqueue(std::string text) {
    out_.push_back(std::move(text));
    if (!writing_) DoWrite();
  }

  void DoWrite() {
    writing_ = true;
    write_buf_.clear();
    for (auto& s : out_) write_buf_ += s;
    out_.clear();
    writing_chunk_bytes_ = queued_chunk_bytes_;
    queued_chunk_bytes_ = 0;
    Tcp().expires_after(shared_->options.http_idle_timeout);
    WithStream([&](auto& stream) {
      asio::async_write(
          stream, asio::buffer(write_buf_),
          [self = shared_from_this()](beast::error_code ec, size_t) { self->OnWrite(ec); });
    });
  }

  void OnWrite(beast::error_code ec) {
    writing_ = false;
    if (closed_) return;
    if (ec) return DoClose();
    if (writer_state_ && writing_chunk_bytes_ > 0) writer_state_->Drained(writing_chunk_bytes_);
    writing_chunk_bytes_ = 0;
    if (!out_.empty()) return DoWrite();
    if (response_done_) FinishResponse();
  }

  void FinishResponse() {
    if (writer_state_) {
      writer_state_->MarkClosed();
      writer_state_.reset();
    }
    if (close_after_) return LingerClose();
    if (!keep_alive_) return DoClose();
    if (watching_) {
      next_pending_ = true;
      beast::error_code ec;
      Tcp().socket().cancel(ec);
      return;
    }
    ReadHeader();
  }

  void SendErrorAndClose(int status, const Status& st) {
    close_after_ = true;
    response_done_ = true;
    keep_alive_ = false;
    Enqueue(ErrorResponse(status, st));
  }

  // Half-closes and drains what the client is still sending for a moment, then closes.
  void LingerClose() {
    beast::error_code ec;
    Tcp().socket().shutdown(tcp::socket::shutdown_send, ec);
    if (watching_) return;  // OnWatch -> DoClose on eof
    Tcp().expires_after(
        std::min<std::chrono::milliseconds>(kLingerTime, shared_->options.http_idle_timeout));
    Drain();
  }
  // Raw bytes, below TLS: they are thrown away, so there is no need to decrypt them.
  void Drain() {
    drain_buf_.resize(16 * 1024);
    Tcp().async_read_some(asio::buffer(drain_buf_),
                          [self = shared_from_this()](beast::error_code ec, size_t n) {
                            self->drained_ += n;
                            if (ec || self->drained_ > kLingerBytes) return self->DoClose();
                            self->Drain();
                          });
  }

  void DoClose() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ec;
    Tcp().socket().shutdown(tcp::socket::shutdown_both, ec);
    Tcp().close();
    if (writer_state_) {
      writer_state_->MarkClosed();
      writer_state_.reset();
    }
    shared_->Unregister(id_);
  }

  void Upgrade();

  std::variant<std::monostate, PlainStream, TlsStream> stream_;  // set in the constructor
  const std::shared_ptr<ServerShared> shared_;
  const uint64_t id_;
  const std::shared_ptr<AddressSlot> slot_;  // handed on to the WebSocket session, if any
  std::string remote_addr_;

  // All below: touched only on the strand.
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpRequest req_;
  size_t body_limit_ = 0;
  bool keep_alive_ = true;
  bool head_request_ = false;
  std::deque<std::string> out_;
  std::string write_buf_;
  // A stream's chunk bytes in out_ and in write_buf_ (ResponseWriter::Impl bounds their sum).
  size_t queued_chunk_bytes_ = 0;
  size_t writing_chunk_bytes_ = 0;
  bool writing_ = false;
  bool response_done_ = false;  // the last byte of the response is queued
  bool close_after_ = false;
  bool watching_ = false;
  bool next_pending_ = false;  // the watch read is being cancelled to read the next request
  bool closed_ = false;
  std::string drain_buf_;
  size_t drained_ = 0;
  std::shared_ptr<ResponseWriter::Impl> writer_state_;
};

// ---- ResponseWriter ----

void ResponseWriter::Impl::Send(HttpResponse response) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::kNone || closed_ || !session_) return;
  state_ = State::kSent;
  // Posting under the lock keeps the strand's order equal to the call order across threads.
  session_->Post([s = session_, r = std::move(response)]() mutable { s->DoSend(std::move(r)); });
}

bool ResponseWriter::Impl::StartStream(int status, std::string content_type) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::kNone || closed_ || !session_) return false;
  state_ = State::kStreaming;
  session_->Post([s = session_, status, ct = std::move(content_type)]() mutable {
    s->DoStartStream(status, std::move(ct));
  });
  return true;
}

bool ResponseWriter::Impl::WriteChunk(std::string data) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::kStreaming || closed_ || !session_ || behind_) return false;
  if (data.empty()) return true;
  if (pending_ + data.size() > max_pending_) {
    // A client this far behind is not buffered for without bound (a job stream of a chatty job
    // read by a client that stopped reading would grow until memory ran out).
    behind_ = true;
    return false;
  }
  pending_ += data.size();
  session_->Post([s = session_, d = std::move(data)]() mutable { s->DoChunk(std::move(d)); });
  return true;
}

void ResponseWriter::Impl::EndStream(std::string last) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::kStreaming || closed_ || !session_) return;
  state_ = State::kEnded;
  if (!last.empty()) {
    session_->Post([s = session_, d = std::move(last)]() mutable { s->DoChunk(std::move(d)); });
  }
  session_->Post([s = session_] { s->DoEndStream(); });
}

void ResponseWriter::Impl::Abandon() {
  State state;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state = state_;
  }
  if (state == State::kNone) {
    Send({500,
          "application/json",
          ErrorBody(Status::Internal("the server dropped the request without answering")),
          {}});
  } else if (state == State::kStreaming) {
    EndStream("");
  }
}

ResponseWriter::ResponseWriter(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
ResponseWriter::~ResponseWriter() { impl_->Abandon(); }
void ResponseWriter::Send(HttpResponse response) { impl_->Send(std::move(response)); }
bool ResponseWriter::StartStream(int status, std::string content_type) {
  return impl_->StartStream(status, std::move(content_type));
}
bool ResponseWriter::WriteChunk(std::string data) { return impl_->WriteChunk(std::move(data)); }
bool ResponseWriter::behind() const { return impl_->behind(); }
void ResponseWriter::EndStream(std::string last) { impl_->EndStream(std::move(last)); }
bool ResponseWriter::closed() const { return impl_->closed(); }
void ResponseWriter::OnClose(std::function<void()> fn) { impl_->OnClose(std::move(fn)); }

// ---- WebSocket ----

class WsConnection::Impl : public Closable, public std::enable_shared_from_this<Impl> {
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
  // `Stream` is PlainStream or TlsStream: the upgraded HTTP connection, moved in.
  template <typename Stream>
  Impl(Stream&& stream, std::shared_ptr<ServerShared> shared, uint64_t id, std::string remote_addr,
       std::shared_ptr<AddressSlot> slot)
      : executor_(stream.get_executor()),
        ping_timer_(executor_),
        shared_(std::move(shared)),
        id_(id),
        remote_addr_(std::move(remote_addr)),
        slot_(std::move(slot)) {
    ws_.template emplace<websocket::stream<std::decay_t<Stream>>>(std::move(stream));
  }
  ~Impl() override { shared_->Unregister(id_); }

  void Run(http::request<http::string_body> req, HttpRequest head) {
    if (!shared_->Register(id_, weak_from_this())) {
      beast::error_code ec;
      Tcp().socket().close(ec);
      return;
    }
    conn_ = std::make_shared<WsConnection>(id_, remote_addr_, weak_from_this());
    Result<WsHandler> decided = Status::NotFound("no WebSocket endpoint");
    if (shared_->ws_upgrade) {
      try {
        decided = shared_->ws_upgrade(head, conn_);
      } catch (const std::exception& e) {
        decided = Status::Internal(std::string("upgrade handler failed: ") + e.what());
      } catch (...) {
        decided = Status::Internal("upgrade handler failed");
      }
    }
    if (!decided.ok()) return Refuse(decided.status());
    handler_ = std::move(decided).value();

    Tcp().expires_never();  // the websocket timeout below takes over
    websocket::stream_base::timeout t;
    t.handshake_timeout = shared_->options.http_idle_timeout;
    t.idle_timeout = shared_->options.ws_idle_timeout;
    // Beast's idle check only counts traffic when keep-alive pings are on (otherwise the
    // connection times out after idle_timeout no matter what): it pings at idle/2 and drops a
    // peer silent for that long after the ping. Our timer adds pings at ws_keepalive_interval
    // so middleboxes that cut idle TCP see traffic.
    t.keep_alive_pings = true;
    WithWs([&](auto& ws) {
      ws.set_option(t);
      ws.read_message_max(shared_->options.ws_max_message);
      ws.text(true);
      ws.async_accept(req,
                      [self = shared_from_this()](beast::error_code ec) { self->OnAccept(ec); });
    });
  }

  void Abort() override {
    asio::post(executor_, [self = shared_from_this()] {
      beast::error_code ec;
      self->Tcp().socket().shutdown(tcp::socket::shutdown_both, ec);
      self->Tcp().close();
      self->Finish();
    });
  }

  void Send(std::string text) {
    asio::post(executor_, [self = shared_from_this(), t = std::move(text)]() mutable {
      if (self->finished_) return;
      self->queued_ += t.size();
      self->out_.push_back(std::move(t));
      if (self->queued_ > self->shared_->options.max_queued_bytes) {
        // A peer that does not read is dropped, not buffered without bound
        // (HttpServerOptions::max_queued_bytes): cut, since a close handshake would queue too.
        beast::error_code ec;
        self->Tcp().socket().shutdown(tcp::socket::shutdown_both, ec);
        self->Tcp().close();
        self->Finish();
        return;
      }
      if (self->accepted_ && !self->writing_) self->DoWrite();
    });
  }

  void Close() {
    asio::post(executor_, [self = shared_from_this()] {
      if (self->finished_) return;
      self->close_requested_ = true;
      if (self->accepted_) self->DoClose(websocket::close_code::normal);
    });
  }

 private:
  void Refuse(const Status& st) {
    int status = 400;
    if (st.code() == StatusCode::kUnauthenticated) status = 401;
    if (st.code() == StatusCode::kPermissionDenied) status = 403;
    if (st.code() == StatusCode::kNotFound) status = 404;
    refusal_ = ErrorResponse(status, st);
    Tcp().expires_after(shared_->options.http_idle_timeout);
    WithWs([&](auto& ws) {
      asio::async_write(ws.next_layer(), asio::buffer(refusal_),
                        [self = shared_from_this()](beast::error_code, size_t) {
                          beast::error_code ec;
                          self->Tcp().socket().shutdown(tcp::socket::shutdown_both, ec);
                          self->Tcp().close();
                          self->handler_ = {};
                          self->shared_->Unregister(self->id_);
                        });
    });
  }

  void OnAccept(beast::error_code ec) {
    if (ec) return Finish();
    accepted_ = true;
    SchedulePing();
    DoRead();
    if (!out_.empty() && !writing_) DoWrite();
    if (close_requested_) DoClose(websocket::close_code::normal);
  }

  void DoRead() {
    WithWs([&](auto& ws) {
      ws.async_read(read_buf_, [self = shared_from_this()](beast::error_code ec, size_t) {
        self->OnRead(ec);
      });
    });
  }

  void OnRead(beast::error_code ec) {
    if (ec) return Finish();
    if (!WithWs([](auto& ws) { return ws.got_text(); })) {
      read_buf_.consume(read_buf_.size());
      // Only text (JSON) is spoken on the agent channel.
      DoClose(websocket::close_code::unknown_data);
      DoRead();  // completes with an error when the close handshake is done
      return;
    }
    std::string message = beast::buffers_to_string(read_buf_.data());
    read_buf_.consume(read_buf_.size());
    // A flat_buffer keeps the capacity of the largest message it ever held (a hello or a
    // conformance report, tens of KiB) for the life of the connection; idle agents send
    // heartbeats of a hundred bytes, so the server gives the rest back (issue 12 item 4).
    if (read_buf_.capacity() > kKeptReadBuffer) read_buf_.shrink_to_fit();
    if (handler_.on_message && !closing_) {
      try {
        handler_.on_message(conn_, message);
      } catch (...) {
        DoClose(websocket::close_code::internal_error);
      }
    }
    DoRead();
  }

  void DoWrite() {
    if (closing_ || out_.empty()) return;
    writing_ = true;
    WithWs([&](auto& ws) {
      ws.async_write(asio::buffer(out_.front()),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       self->writing_ = false;
                       // On error the read side notices and finishes; once finished, the queue
                       // is no longer ours to touch (Finish may have dropped it).
                       if (ec || self->finished_ || self->out_.empty()) return;
                       self->queued_ -= self->out_.front().size();
                       self->out_.pop_front();
                       if (!self->out_.empty()) self->DoWrite();
                     });
    });
  }

  void DoClose(websocket::close_code code) {
    if (closing_ || finished_) return;
    closing_ = true;
    WithWs([&](auto& ws) {
      ws.async_close(code, [self = shared_from_this()](beast::error_code) {
        // The pending read completes with an error and calls Finish().
      });
    });
  }

  void SchedulePing() {
    ping_timer_.expires_after(shared_->options.ws_keepalive_interval);
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

  void Finish() {
    if (finished_) return;
    finished_ = true;
    ping_timer_.cancel();
    // A write in flight still reads out_.front(); the queue goes with the object then.
    if (!writing_) out_.clear();
    if (accepted_ && handler_.on_close) {
      try {
        handler_.on_close(conn_);
      } catch (...) {
      }
    }
    handler_ = {};  // drop captures (which often hold conn_) now
    shared_->Unregister(id_);
  }

  asio::any_io_executor executor_;                   // the connection's strand
  std::variant<std::monostate, PlainWs, TlsWs> ws_;  // set in the constructor
  asio::steady_timer ping_timer_;
  const std::shared_ptr<ServerShared> shared_;
  const uint64_t id_;
  const std::string remote_addr_;
  const std::shared_ptr<AddressSlot> slot_;

  // All below: touched only on the strand.
  std::shared_ptr<WsConnection> conn_;
  WsHandler handler_;
  static constexpr size_t kKeptReadBuffer = 4096;
  beast::flat_buffer read_buf_;
  std::deque<std::string> out_;
  size_t queued_ = 0;  // bytes in out_
  std::string refusal_;
  bool accepted_ = false;
  bool writing_ = false;
  bool closing_ = false;
  bool close_requested_ = false;
  bool pinging_ = false;
  bool finished_ = false;
};

void HttpSession::Upgrade() {
  // The connection now belongs to the WebSocket session; this object retires.
  closed_ = true;
  shared_->Unregister(id_);
  auto msg = parser_->release();
  parser_.reset();
  std::shared_ptr<WsConnection::Impl> ws;
  if (auto* t = std::get_if<TlsStream>(&stream_)) {
    ws = std::make_shared<WsConnection::Impl>(std::move(*t), shared_, shared_->next_id.fetch_add(1),
                                              remote_addr_, slot_);
  } else {
    ws = std::make_shared<WsConnection::Impl>(std::move(std::get<PlainStream>(stream_)), shared_,
                                              shared_->next_id.fetch_add(1), remote_addr_, slot_);
  }
  ws->Run(std::move(msg), std::move(req_));
}

WsConnection::WsConnection(uint64_t id, std::string remote_addr, std::weak_ptr<Impl> impl)
    : id_(id), remote_addr_(std::move(remote_addr)), impl_(std::move(impl)) {}
WsConnection::~WsConnection() = default;

void WsConnection::Send(std::string text) {
  if (auto impl = impl_.lock()) impl->Send(std::move(text));
}

void WsConnection::Close() {
  if (auto impl = impl_.lock()) impl->Close();
}

// ---- HttpServer ----

class HttpServer::Impl {
 public:
  explicit Impl(std::shared_ptr<ServerShared> shared)
      : shared_(std::move(shared)),
        acceptor_(asio::make_strand(ioc_)),
        retry_timer_(ioc_),
        lag_probe_(ioc_, std::chrono::milliseconds(100)) {}

  Status Start() {
    std::lock_guard<std::mutex> lock(mu_);
    if (started_) return Status::FailedPrecondition("server already started");
    const auto& opt = shared_->options;
    if (!opt.tls_cert_chain_pem.empty() || !opt.tls_key_pem.empty()) {
      auto ctx = net_internal::MakeServerTlsContext(opt.tls_cert_chain_pem, opt.tls_key_pem);
      if (!ctx.ok()) return ctx.status();
      shared_->tls = *std::move(ctx);
    }
    beast::error_code ec;
    tcp::endpoint endpoint;
    auto addr = asio::ip::make_address(opt.host, ec);
    if (!ec) {
      endpoint = tcp::endpoint(addr, opt.port);
    } else {
      tcp::resolver resolver(ioc_);
      auto results = resolver.resolve(opt.host, std::to_string(opt.port), ec);
      if (ec || results.empty()) {
        return Status::InvalidArgument("cannot resolve listen host '" + opt.host + "'");
      }
      endpoint = results.begin()->endpoint();
    }
    std::string where = net_internal::FormatEndpoint(endpoint.address().to_string(), opt.port);
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      beast::error_code ignored;
      acceptor_.close(ignored);
      return Status::Unavailable("cannot listen on " + where + ": " + ec.message());
    }
    port_ = acceptor_.local_endpoint(ec).port();
    address_ = net_internal::FormatEndpoint(endpoint.address().to_string(), port_);
    started_ = true;
    work_.emplace(ioc_.get_executor());
    if (opt.handler_threads > 0) {
      handler_work_.emplace(handler_ioc_.get_executor());
      shared_->handlers = &handler_ioc_;
      RunOnThreads(handler_ioc_, opt.handler_threads, "sluice-api", handler_threads_);
    }
    DoAccept();
    lag_probe_.Start();
    RunOnThreads(ioc_, std::max(1, opt.threads), "sluice-io", threads_);
    return Status::Ok();
  }

  void Stop() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_ || stopped_) return;
    stopped_ = true;
    asio::post(acceptor_.get_executor(), [this] {
      beast::error_code ec;
      acceptor_.close(ec);
      retry_timer_.cancel();
    });
    lag_probe_.Stop();
    std::vector<std::shared_ptr<Closable>> live;
    {
      std::lock_guard<std::mutex> slock(shared_->mu);
      shared_->stopping = true;
      for (auto& [id, weak] : shared_->sessions) {
        if (auto s = weak.lock()) live.push_back(std::move(s));
      }
    }
    for (auto& s : live) s->Abort();
    live.clear();
    {
      // Give the aborts a moment to run their close callbacks before the threads stop.
      std::unique_lock<std::mutex> slock(shared_->mu);
      shared_->cv.wait_for(slock, std::chrono::seconds(2),
                           [&] { return shared_->sessions.empty(); });
    }
    work_.reset();
    ioc_.stop();
    for (auto& t : threads_) t.join();
    threads_.clear();
    // The io threads post no more handlers now; those queued or running finish (their answers
    // go nowhere: the io context is stopped) before Stop returns and the handler goes.
    handler_work_.reset();
    for (auto& t : handler_threads_) t.join();
    handler_threads_.clear();
  }

  uint16_t port() const { return port_; }
  std::string address() const { return address_; }
  uint64_t refused() const { return shared_->refused.load(std::memory_order_relaxed); }
  const HttpServerOptions& options() const { return shared_->options; }
  std::chrono::milliseconds io_lag() const { return lag_probe_.Lag(); }

 private:
  // `n` threads named `name` running `ctx` until it runs out of work (or is stopped); a handler
  // that throws past every edge is dropped and the thread keeps serving the others.
  static void RunOnThreads(asio::io_context& ctx, int n, const char* name,
                           std::vector<std::thread>& threads) {
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&ctx, name] {
        NameThisThread(name);
        for (;;) {
          try {
            ctx.run();
            return;
          } catch (...) {
          }
        }
      });
    }
  }

  void DoAccept() {
    acceptor_.async_accept(asio::make_strand(ioc_), [this](beast::error_code ec,
                                                           tcp::socket socket) {
      if (!acceptor_.is_open()) return;
      if (ec) {
        // Out of descriptors and the like: back off briefly instead of spinning.
        retry_timer_.expires_after(std::chrono::milliseconds(50));
        retry_timer_.async_wait([this](beast::error_code ec) {
          if (!ec && acceptor_.is_open()) DoAccept();
        });
        return;
      }
      beast::error_code opt_ec;
      tcp::endpoint peer = socket.remote_endpoint(opt_ec);
      std::string ip = opt_ec ? std::string("unknown") : peer.address().to_string();
      // Over its cap, an address's new connection is closed at once: one client holding
      // thousands of idle sockets then costs the others nothing but this accept.
      if (!shared_->Admit(ip)) {
        socket.close(opt_ec);
        return DoAccept();
      }
      auto slot = std::make_shared<AddressSlot>(shared_, std::move(ip));
      socket.set_option(tcp::no_delay(true), opt_ec);  // latency target: no Nagle delay
      uint64_t id = shared_->next_id.fetch_add(1);
      auto session = std::make_shared<HttpSession>(std::move(socket), shared_, id, std::move(slot));
      if (shared_->Register(id, session)) session->Start();
      DoAccept();
    });
  }

  std::shared_ptr<ServerShared> shared_;
  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  asio::steady_timer retry_timer_;
  net_internal::IoLagProbe lag_probe_;  // how late the io threads run what is ready
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::vector<std::thread> threads_;
  // After ioc_: destroyed first, so the answers of handlers it still held (a writer dropped
  // sends a 500) are posted to an io context that still exists.
  asio::io_context handler_ioc_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> handler_work_;
  std::vector<std::thread> handler_threads_;
  std::mutex mu_;
  bool started_ = false;  // guarded by mu_
  bool stopped_ = false;  // guarded by mu_
  uint16_t port_ = 0;     // set in Start
  std::string address_;   // set in Start
};

HttpServer::HttpServer(HttpServerOptions options, HttpHandler handler, WsUpgrade ws_upgrade) {
  auto shared = std::make_shared<ServerShared>();
  shared->options = std::move(options);
  shared->handler = std::move(handler);
  shared->ws_upgrade = std::move(ws_upgrade);
  impl_ = std::make_unique<Impl>(std::move(shared));
}

HttpServer::~HttpServer() { Stop(); }
Status HttpServer::Start() { return impl_->Start(); }
uint16_t HttpServer::port() const { return impl_->port(); }
std::string HttpServer::address() const { return impl_->address(); }
void HttpServer::Stop() { impl_->Stop(); }
uint64_t HttpServer::refused_connections() const { return impl_->refused(); }
bool HttpServer::tls() const { return !impl_->options().tls_cert_chain_pem.empty(); }
std::chrono::milliseconds HttpServer::io_lag() const { return impl_->io_lag(); }

}  // namespace sluice
