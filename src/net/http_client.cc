#include "net/http_client.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <limits>
#include <optional>
#include <variant>

#include "net/net_internal.h"
#include "net/tls_internal.h"

namespace sluice {

namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

namespace {

constexpr uint64_t kMaxResponseBody = uint64_t{1} << 30;
constexpr size_t kStreamReadSize = 16 * 1024;

std::string_view Sv(beast::string_view s) { return {s.data(), s.size()}; }

}  // namespace

class HttpClient::Impl {
 public:
  Impl(Url base, std::string token, std::chrono::milliseconds timeout, std::string connect_address)
      : base_(std::move(base)),
        token_(std::move(token)),
        timeout_(timeout),
        connect_address_(std::move(connect_address)) {
    where_ = net_internal::FormatEndpoint(base_.host, base_.port);
    if (base_.secure()) {
      // A bad CA file or pin surfaces on the first request, as a connection error would.
      auto ctx = net_internal::TlsClientContext::Create(base_.tls);
      if (ctx.ok()) {
        tls_ = std::move(*ctx);
      } else {
        tls_error_ = ctx.status();
      }
    }
  }

  Result<HttpResponse> Request(std::string_view method, std::string_view target, std::string body,
                               std::string content_type,
                               const std::vector<std::pair<std::string, std::string>>& headers) {
    auto req = BuildRequest(method, target, std::move(body), content_type);
    for (const auto& [k, v] : headers) req.set(beast::string_view(k), beast::string_view(v));
    for (int attempt = 0;; ++attempt) {
      bool reused = connected();
      SLUICE_RETURN_IF_ERROR(Connect());
      http::response_parser<http::string_body> parser;
      parser.body_limit(kMaxResponseBody);
      if (method == "HEAD") parser.skip(true);
      Tcp().expires_after(timeout_);
      beast::error_code ec = Run([&](auto done) {
        WithStream([&](auto& stream) { http::async_write(stream, req, done); });
      });
      if (!ec) {
        ec = Run([&](auto done) {
          WithStream([&](auto& stream) { http::async_read(stream, buf_, parser, done); });
        });
      }
      if (ec) {
        Disconnect();
        if (reused && attempt == 0 && ec != beast::error::timeout) continue;  // stale keep-alive
        return ErrorFor(ec);
      }
      auto& msg = parser.get();
      HttpResponse out;
      out.status = static_cast<int>(msg.result_int());
      out.content_type = std::string(Sv(msg[http::field::content_type]));
      for (const auto& f : msg) {
        out.headers.emplace_back(std::string(Sv(f.name_string())), std::string(Sv(f.value())));
      }
      out.body = std::move(msg.body());
      if (!msg.keep_alive()) Disconnect();
      return out;
    }
  }

  Status StreamLines(std::string_view method, std::string_view target,
                     const std::function<bool(std::string_view)>& on_line, int* http_status) {
    auto req = BuildRequest(method, target, "", "");
    std::optional<http::response_parser<http::buffer_body>> parser;
    for (int attempt = 0;; ++attempt) {
      bool reused = connected();
      SLUICE_RETURN_IF_ERROR(Connect());
      parser.emplace();
      parser->body_limit(std::numeric_limits<uint64_t>::max());
      Tcp().expires_after(timeout_);
      beast::error_code ec = Run([&](auto done) {
        WithStream([&](auto& stream) { http::async_write(stream, req, done); });
      });
      // The stream's head may legitimately come late (the server answers when there is data).
      Tcp().expires_never();
      if (!ec) {
        ec = Run([&](auto done) {
          WithStream([&](auto& stream) { http::async_read_header(stream, buf_, *parser, done); });
        });
      }
      if (ec) {
        Disconnect();
        if (reused && attempt == 0 && ec != beast::error::timeout) continue;
        return ErrorFor(ec);
      }
      break;
    }
    int status = static_cast<int>(parser->get().result_int());
    if (http_status) *http_status = status;
    bool ok_status = status >= 200 && status < 300;
    std::string pending;  // body bytes not yet forming a complete line
    char chunk[kStreamReadSize];
    while (!parser->is_done()) {
      parser->get().body().data = chunk;
      parser->get().body().size = sizeof(chunk);
      beast::error_code ec = Run([&](auto done) {
        WithStream([&](auto& stream) { http::async_read_some(stream, buf_, *parser, done); });
      });
      if (ec == http::error::need_buffer) ec = {};
      size_t n = sizeof(chunk) - parser->get().body().size;
      pending.append(chunk, n);
      if (ok_status) {
        size_t start = 0;
        for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
          std::string_view line(pending.data() + start, nl - start);
          if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
          bool more = false;
          try {
            more = on_line(line);
          } catch (...) {
            more = false;
          }
          if (!more) {
            Disconnect();  // mid-stream: the connection cannot be reused
            return Status::Ok();
          }
        }
        pending.erase(0, start);
      }
      if (ec) {
        Disconnect();
        if (parser->is_done()) break;
        return Status::Unavailable("stream from " + where_ + " broke: " + ec.message());
      }
    }
    if (!parser->get().keep_alive()) Disconnect();
    if (!ok_status) {
      return Status(StatusCodeForHttp(status),
                    "HTTP " + std::to_string(status) + ": " + ErrorMessageFromBody(pending));
    }
    if (!pending.empty()) on_line(pending);  // a last line without '\n'
    return Status::Ok();
  }

 private:
  http::request<http::string_body> BuildRequest(std::string_view method, std::string_view target,
                                                std::string body, const std::string& content_type) {
    http::request<http::string_body> req;
    req.method_string(beast::string_view(method.data(), method.size()));
    req.target(base_.base_path + std::string(target));
    req.version(11);
    req.set(http::field::host, where_);
    req.set(http::field::user_agent, "sluice");
    if (!token_.empty()) req.set(http::field::authorization, "Bearer " + token_);
    if (!body.empty() && !content_type.empty()) req.set(http::field::content_type, content_type);
    req.keep_alive(true);
    req.body() = std::move(body);
    req.prepare_payload();
    return req;
  }

  // Runs one asynchronous operation to completion on this thread; the tcp_stream's expiry
  // turns a hang into beast::error::timeout.
  template <typename Start>
  beast::error_code Run(Start&& start) {
    return net_internal::RunToCompletion(ioc_, std::forward<Start>(start));
  }

  bool connected() const { return stream_.index() != 0; }
  beast::tcp_stream& Tcp() {
    if (auto* t = std::get_if<TlsStream>(&stream_)) return beast::get_lowest_layer(*t);
    return std::get<beast::tcp_stream>(stream_);
  }
  // Runs `f` on the stream HTTP is spoken over (TLS or plain); connected() must hold.
  template <typename F>
  void WithStream(F&& f) {
    if (auto* t = std::get_if<TlsStream>(&stream_)) return f(*t);
    f(std::get<beast::tcp_stream>(stream_));
  }

  Status Connect() {
    if (connected()) return Status::Ok();
    if (base_.secure() && !tls_) return tls_error_;
    beast::error_code ec;
    tcp::resolver resolver(ioc_);
    // A given address is used as it is (numeric, no lookup): the caller checked it, and a second
    // lookup could answer differently.
    auto results = connect_address_.empty()
                       ? resolver.resolve(base_.host, std::to_string(base_.port), ec)
                       : resolver.resolve(connect_address_, std::to_string(base_.port),
                                          tcp::resolver::numeric_host, ec);
    if (ec) return Status::Unavailable("cannot resolve " + where_ + ": " + ec.message());
    auto& tcp_stream = stream_.emplace<beast::tcp_stream>(ioc_);
    tcp_stream.expires_after(timeout_);
    ec = Run([&](auto done) { tcp_stream.async_connect(results, done); });
    if (ec) {
      Disconnect();
      return Status::Unavailable("cannot connect to " + where_ + ": " + ec.message());
    }
    tcp_stream.socket().set_option(tcp::no_delay(true), ec);
    if (!base_.secure()) return Status::Ok();
    // The handshake runs under the same deadline as the TCP connect.
    beast::tcp_stream connected_tcp = std::move(tcp_stream);
    auto& tls = stream_.emplace<TlsStream>(std::move(connected_tcp), tls_->context());
    SLUICE_RETURN_IF_ERROR(tls_->Prepare(tls.native_handle(), base_.host));
    ec = Run([&](auto done) { tls.async_handshake(net_internal::ssl::stream_base::client, done); });
    if (ec) {
      Status st = ec == beast::error::timeout
                      ? Status::DeadlineExceeded("TLS handshake with " + where_ + " timed out")
                      : tls_->HandshakeError(tls.native_handle(), ec, where_);
      Disconnect();
      return st;
    }
    return Status::Ok();
  }

  // Drops the connection without a TLS close_notify: every response is delimited by length or
  // chunking, so nothing depends on a clean TLS shutdown, and waiting for one could hang.
  void Disconnect() {
    if (!connected()) return;
    beast::error_code ec;
    Tcp().socket().shutdown(tcp::socket::shutdown_both, ec);
    Tcp().close();
    stream_.emplace<std::monostate>();
    buf_.consume(buf_.size());
  }

  Status ErrorFor(beast::error_code ec) {
    if (ec == beast::error::timeout) {
      return Status::DeadlineExceeded("request to " + where_ + " timed out");
    }
    return Status::Unavailable("request to " + where_ + " failed: " + ec.message());
  }

  const Url base_;
  const std::string token_;
  const std::chrono::milliseconds timeout_;
  const std::string connect_address_;  // "" : look base_.host up
  std::string where_;
  std::unique_ptr<net_internal::TlsClientContext> tls_;  // https only
  Status tls_error_;                                     // why tls_ could not be made
  asio::io_context ioc_;
  std::variant<std::monostate, beast::tcp_stream, TlsStream> stream_;  // monostate: none
  beast::flat_buffer buf_;
};

HttpClient::HttpClient(Url base, std::string bearer_token, std::chrono::milliseconds timeout,
                       std::string connect_address)
    : impl_(std::make_unique<Impl>(std::move(base), std::move(bearer_token), timeout,
                                   std::move(connect_address))) {}
HttpClient::~HttpClient() = default;

Result<HttpResponse> HttpClient::Request(
    std::string_view method, std::string_view path_and_query, std::string body,
    std::string content_type, const std::vector<std::pair<std::string, std::string>>& headers) {
  try {
    return impl_->Request(method, path_and_query, std::move(body), std::move(content_type),
                          headers);
  } catch (const std::exception& e) {
    return Status::Internal(std::string("HTTP client failed: ") + e.what());
  }
}

Status HttpClient::StreamLines(std::string_view method, std::string_view path_and_query,
                               const std::function<bool(std::string_view)>& on_line,
                               int* http_status) {
  try {
    return impl_->StreamLines(method, path_and_query, on_line, http_status);
  } catch (const std::exception& e) {
    return Status::Internal(std::string("HTTP client failed: ") + e.what());
  }
}

}  // namespace sluice
