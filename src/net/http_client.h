// HttpClient: a synchronous HTTP/1.1 client for the CLI and the agent, one keep-alive connection
// reused across requests. Not thread-safe: one caller at a time (make one per thread).
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

class HttpClient {
 public:
  // `base` comes from ParseUrl; its base_path prefixes every path. For https, base.tls says how
  // the server is verified (docs/design-notes.md, "TLS"). `timeout` bounds connecting (TLS
  // handshake included) and each Request as a whole. `connect_address` (a numeric IPv4 or IPv6
  // address), when given, is connected to instead of looking `base.host` up; the Host header,
  // TLS server name and certificate check still use base.host. For a caller that checked where
  // a name points and must not be sent elsewhere by a second lookup (webhooks: DNS rebinding).
  HttpClient(Url base, std::string bearer_token,
             std::chrono::milliseconds timeout = std::chrono::seconds(30),
             std::string connect_address = "");
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Sends one request; sets Authorization: Bearer when the token is non-empty. Any HTTP status
  // is a successful Result. Connection failures are Unavailable naming the address; running
  // past the timeout is DeadlineExceeded; a server certificate the trust refuses is
  // FailedPrecondition "server certificate not trusted: ...". A stale keep-alive connection is
  // retried once.
  // `headers` are sent as given (e.g. Idempotency-Key).
  Result<HttpResponse> Request(
      std::string_view method, std::string_view path_and_query, std::string body = "",
      std::string content_type = "application/json",
      const std::vector<std::pair<std::string, std::string>>& headers = {});

  // For chunked NDJSON streams: calls on_line for each '\n'-terminated line (without the '\n')
  // as soon as it arrives; on_line returning false stops reading (and drops the connection).
  // `http_status` (may be null) receives the status. A non-2xx status reads the whole body and
  // returns a non-OK Status carrying the JSON error message. No overall timeout: a stream ends
  // when the server ends it or the connection dies (connecting still honours the timeout).
  Status StreamLines(std::string_view method, std::string_view path_and_query,
                     const std::function<bool(std::string_view line)>& on_line, int* http_status);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
