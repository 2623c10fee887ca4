// The CLI's view of the server's REST API: JSON in, JSON out, errors as Status carrying the
// server's own message.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "cli/client_config.h"
#include "common/json.h"
#include "common/status.h"
#include "net/http_client.h"

namespace sluice::cli {

class ApiClient {
 public:
  static Result<std::unique_ptr<ApiClient>> Create(const ClientConfig& config);

  Result<Json> Get(const std::string& path);
  Result<Json> Post(const std::string& path, const Json& body);
  // POST with an `Idempotency-Key` (issue 10 item 3): retried with the same key and body on a
  // connection error or 502/503/504, for up to `retry_for`, so a server that dies mid-submit
  // yields exactly one job. `on_retry` (may be null) hears about each retry.
  Result<Json> PostIdempotent(const std::string& path, const Json& body, const std::string& key,
                              std::chrono::milliseconds retry_for,
                              const std::function<void(const Status&)>& on_retry = nullptr);
  Result<Json> Delete(const std::string& path);
  // GET of a non-JSON body (a zip, a CSV, a PEM): the bytes on 2xx, the server's error otherwise.
  Result<std::string> GetBytes(const std::string& path);
  Status PutBlob(const std::string& digest, std::string data);
  // POST with a non-JSON body (e.g. a CSV catalog); the answer is JSON.
  Result<Json> PostText(const std::string& path, std::string body, const std::string& type);
  // Reads an NDJSON stream; `on_item` returns false to stop.
  Status Stream(const std::string& path, const std::function<bool(const Json&)>& on_item);
  const std::string& server() const { return server_; }

 private:
  ApiClient(std::string server, std::unique_ptr<HttpClient> http)
      : server_(std::move(server)), http_(std::move(http)) {}
  Result<Json> Decode(const HttpResponse& resp);

  std::string server_;
  std::unique_ptr<HttpClient> http_;
};

}  // namespace sluice::cli
