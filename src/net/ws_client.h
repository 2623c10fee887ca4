// WsClient: the agent's end of the agent channel (DESIGN.md §5), one WebSocket connection over
// plain TCP (ws://) or TLS (wss://, the server verified as options.url.tls says). After Connect it
// runs its own io thread; callbacks run on that thread, never concurrently. One WsClient is one
// connection: to reconnect, make a new one.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "net/http_types.h"

namespace sluice {

class WsClient {
 public:
  struct Options {
    Url url;
    std::string path;  // appended to url.base_path, e.g. "/v1/agent/connect"
    std::vector<std::pair<std::string, std::string>> headers;  // sent with the upgrade request
    std::chrono::milliseconds connect_timeout{5000};      // TCP connect + TLS + WebSocket handshake
    std::chrono::milliseconds keepalive_interval{15000};  // ping period
    std::chrono::milliseconds idle_timeout{45000};        // nothing received for this long: close
    size_t max_message = 4 << 20;
  };

  WsClient(Options options, std::function<void(std::string_view)> on_message,
           std::function<void(Status)> on_close);
  ~WsClient();  // Close()s
  WsClient(const WsClient&) = delete;
  WsClient& operator=(const WsClient&) = delete;

  // Blocking TCP connect + handshake. A refused handshake maps the HTTP status to
  // Unauthenticated (401) / PermissionDenied (403) / NotFound (404) / ... with the message from
  // the JSON error body; an unreachable server is Unavailable; a server whose certificate the
  // trust refuses is FailedPrecondition "server certificate not trusted: ...". Call once.
  Status Connect();
  // Thread-safe; queued and written in order. Dropped when not connected.
  void Send(std::string text);
  // Idempotent: closes the connection (normal close, forced after a short grace) and joins the
  // io thread (unless called from a callback on that thread). After a successful Connect,
  // on_close is called exactly once: Status::Ok() for a local Close, Unavailable otherwise.
  void Close();
  bool connected() const;

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace sluice
