#include "cli/api_client.h"

#include <thread>

namespace sluice::cli {

Result<std::unique_ptr<ApiClient>> ApiClient::Create(const ClientConfig& config) {
  SLUICE_ASSIGN_OR_RETURN(Url url, ParseUrl(config.server));
  url.tls = config.tls;  // how an https:// server is verified
  auto http = std::make_unique<HttpClient>(url, config.token, std::chrono::seconds(30));
  return std::unique_ptr<ApiClient>(new ApiClient(config.server, std::move(http)));
}

Result<Json> ApiClient::Decode(const HttpResponse& resp) {
  auto body = ParseJson(resp.body);
  if (resp.status >= 200 && resp.status < 300) {
    if (!body.ok())
      return Status::Internal("server sent malformed JSON: " + body.status().message());
    return *body;
  }
  return Status(StatusCodeForHttp(resp.status), ErrorMessageFromBody(resp.body));
}

Result<Json> ApiClient::Get(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(HttpResponse resp, http_->Request("GET", path));
  return Decode(resp);
}

Result<Json> ApiClient::Post(const std::string& path, const Json& body) {
  SLUICE_ASSIGN_OR_RETURN(HttpResponse resp, http_->Request("POST", path, DumpJson(body)));
  return Decode(resp);
}

Result<Json> ApiClient::PostIdempotent(const std::string& path, const Json& body,
                                       const std::string& key, std::chrono::milliseconds retry_for,
                                       const std::function<void(const Status&)>& on_retry) {
  const std::string text = DumpJson(body);  // the same bytes every time: the key's body hash
  const auto deadline = std::chrono::steady_clock::now() + retry_for;
  auto backoff = std::chrono::milliseconds(200);
  for (;;) {
    auto resp = http_->Request("POST", path, text, "application/json", {{"Idempotency-Key", key}});
    Status failure;
    if (resp.ok()) {
      if (resp->status != 502 && resp->status != 503 && resp->status != 504) return Decode(*resp);
      failure = Status(StatusCodeForHttp(resp->status), ErrorMessageFromBody(resp->body));
    } else if (resp.status().code() == StatusCode::kUnavailable ||
               resp.status().code() == StatusCode::kDeadlineExceeded) {
      failure = resp.status();
    } else {
      return resp.status();
    }
    if (std::chrono::steady_clock::now() + backoff > deadline) return failure;
    if (on_retry) on_retry(failure);
    std::this_thread::sleep_for(backoff);  // a client-side retry delay, not a test wait
    backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
  }
}

Result<std::string> ApiClient::GetBytes(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(HttpResponse resp, http_->Request("GET", path));
  if (resp.status >= 200 && resp.status < 300) return std::move(resp.body);
  return Status(StatusCodeForHttp(resp.status), ErrorMessageFromBody(resp.body));
}

Result<Json> ApiClient::Delete(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(HttpResponse resp, http_->Request("DELETE", path));
  return Decode(resp);
}

Result<Json> ApiClient::PostText(const std::string& path, std::string body,
                                 const std::string& type) {
  SLUICE_ASSIGN_OR_RETURN(HttpResponse resp, http_->Request("POST", path, std::move(body), type));
  return Decode(resp);
}

Status ApiClient::PutBlob(const std::string& digest, std::string data) {
  SLUICE_ASSIGN_OR_RETURN(
      HttpResponse resp,
      http_->Request("PUT", "/v1/blobs/" + digest, std::move(data), "application/octet-stream"));
  return Decode(resp).status();
}

Status ApiClient::Stream(const std::string& path, const std::function<bool(const Json&)>& on_item) {
  int http_status = 0;
  Status parse_error;
  Status s = http_->StreamLines(
      "GET", path,
      [&](std::string_view line) {
        if (line.empty()) return true;
        auto item = ParseJson(line);
        if (!item.ok()) {
          parse_error = Status::Internal("malformed stream item: " + item.status().message());
          return false;
        }
        return on_item(*item);
      },
      &http_status);
  if (!parse_error.ok()) return parse_error;
  return s;
}

}  // namespace sluice::cli
