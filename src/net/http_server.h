// HttpServer: HTTP/1.1 and WebSocket over plain TCP or TLS for the Sluice server (DESIGN.md §5,
// docs/design-notes.md "TLS"). Beast and OpenSSL live in the .cc files only; this header stays
// cheap to include.
//
// Threading: the io threads (`threads`) do the sockets, TLS, HTTP parsing and WebSocket framing
// and call the WebSocket callbacks; HTTP handlers run on threads of their own
// (`handler_threads`; 0: on the io thread that read the request), so a slow request never holds
// up the reading of other connections. One request at a time per connection (never
// concurrently for one connection). Responses may be produced later, from any thread, through
// ResponseWriter / WsConnection, which are thread-safe and outlive the connection safely (calls
// after the peer is gone are ignored).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "net/http_types.h"

namespace sluice {

// Answers one HTTP request. Held as shared_ptr by the handler for as long as it likes; every
// method is thread-safe. A writer dropped without an answer sends 500 (or ends a started
// stream), so a forgotten request never hangs the client.
class ResponseWriter {
 public:
  class Impl;
  explicit ResponseWriter(std::shared_ptr<Impl> impl);
  ~ResponseWriter();
  ResponseWriter(const ResponseWriter&) = delete;
  ResponseWriter& operator=(const ResponseWriter&) = delete;

  // Sends a complete response. Only the first Send/StartStream counts; later calls are ignored.
  void Send(HttpResponse response);
  // Starts a chunked response. False when a response was already started or the client is gone.
  bool StartStream(int status, std::string content_type);
  // Queues one chunk (sent in order, flushed at once). False when the connection is gone, no
  // stream is open, or the client is behind: the chunks it has not taken yet would pass
  // HttpServerOptions::max_queued_bytes (behind() then says so, and only EndStream is left).
  // An empty chunk is ignored (it would end the stream on the wire).
  bool WriteChunk(std::string data);
  // True once a chunk was refused because the client had fallen behind.
  bool behind() const;
  // Ends the stream (terminating chunk); the connection is then reused for the next request.
  // `last`, when not empty, is queued as one more chunk first, whatever the bound: room for a
  // line that says why the stream ends.
  void EndStream(std::string last = "");
  // True once the client disconnected or the response was completely handed to the socket.
  bool closed() const;
  // `fn` runs once when the client disconnects or the response finished; immediately (on the
  // calling thread) if that already happened. It may run on an io thread: keep it short.
  void OnClose(std::function<void()> fn);

 private:
  std::shared_ptr<Impl> impl_;
};

// One accepted WebSocket. Thread-safe; calls after the connection closed are ignored.
class WsConnection {
 public:
  class Impl;
  WsConnection(uint64_t id, std::string remote_addr, std::weak_ptr<Impl> impl);
  ~WsConnection();

  // Queues a text message; one write is in flight at a time and messages go out in order.
  void Send(std::string text);
  // Starts a normal close handshake (1000). on_close follows when the connection is down.
  void Close();
  std::string remote_addr() const { return remote_addr_; }
  uint64_t id() const { return id_; }

 private:
  const uint64_t id_;
  const std::string remote_addr_;
  const std::weak_ptr<Impl> impl_;
};

struct WsHandler {
  // Never called concurrently for one connection; may be for different connections.
  std::function<void(const std::shared_ptr<WsConnection>&, std::string_view message)> on_message;
  // Called once when the connection is gone (peer close, error, timeout, server Stop).
  std::function<void(const std::shared_ptr<WsConnection>&)> on_close;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: pick a free port; see HttpServer::port()
  int threads = 2;
  // Threads that run the HTTP handlers (named sluice-api); 0: the io threads run them.
  int handler_threads = 0;
  size_t default_body_limit = 1 << 20;
  // Per-request body limit, consulted after the headers arrive (e.g. larger for uploads).
  std::function<size_t(const HttpRequest& head)> body_limit;
  // Closes a connection that sends nothing (or too slowly: a request's headers and body must
  // each arrive within this) while no response is pending.
  std::chrono::milliseconds http_idle_timeout{60000};
  std::chrono::milliseconds ws_keepalive_interval{15000};  // ping period
  std::chrono::milliseconds ws_idle_timeout{45000};        // nothing received for this long: close
  size_t ws_max_message = 4 << 20;
  // Bytes queued for one peer that has not read them: WebSocket messages, or the chunks of a
  // streamed HTTP response. A WebSocket peer this far behind is disconnected, never buffered
  // without bound (an agent reconnects and is reconciled by its hello); a stream's next chunk is
  // refused (ResponseWriter::WriteChunk), and its handler ends the stream saying why.
  size_t max_queued_bytes = 16 << 20;

  // TLS: with a certificate chain (PEM, leaf first) and its private key (PEM), every connection
  // is HTTPS/WSS (TLS 1.2 or later; 1.3 with OpenSSL 3 clients). A plain HTTP request to a TLS
  // server gets a 400 saying so. Both empty: plain HTTP. Bad PEM fails Start.
  std::string tls_cert_chain_pem{};
  std::string tls_key_pem{};
  // A TLS client must complete its handshake within this (from accept), or it is dropped.
  std::chrono::milliseconds tls_handshake_timeout{10000};

  // Open connections one client IP address may hold (HTTP and WebSocket together); a new one
  // beyond it is closed right after accept and counted in refused_connections(). 0: no cap.
  // Benchmarks that drive the server from loopback raise it.
  size_t max_connections_per_address = 256;
};

class HttpServer {
 public:
  using HttpHandler = std::function<void(HttpRequest, std::shared_ptr<ResponseWriter>)>;
  // Decides a WebSocket upgrade (any path). A non-OK result refuses the handshake with
  // 401/403/404 (Unauthenticated/PermissionDenied/NotFound) or 400, and a JSON error body.
  // `conn` may be sent to right away; messages go out once the handshake completes.
  using WsUpgrade = std::function<Result<WsHandler>(const HttpRequest& upgrade_request,
                                                    const std::shared_ptr<WsConnection>& conn)>;

  HttpServer(HttpServerOptions options, HttpHandler handler, WsUpgrade ws_upgrade);
  ~HttpServer();  // Stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds, listens and starts the io threads. Unavailable when the address cannot be bound.
  Status Start();
  // The bound port (after Start).
  uint16_t port() const;
  // "127.0.0.1:PORT" (IPv6 hosts in brackets).
  std::string address() const;
  // Stops accepting, closes every connection, joins the threads. Idempotent.
  void Stop();
  // Connections closed at accept because their address was at max_connections_per_address.
  uint64_t refused_connections() const;
  // True when the server speaks TLS (the options carried a certificate).
  bool tls() const;
  // How late the io threads run what is ready now (a 100 ms probe timer's lateness, or how
  // overdue the pending one is): what the server reads from a peer was sent about that long
  // before. Zero or near it on a server keeping up. Any thread.
  std::chrono::milliseconds io_lag() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
