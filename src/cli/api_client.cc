#include "cli/api_client.h"

namespace sluice::cli {

Result<std::unique_ptr<ApiClient>> ApiClient::Create(const ClientConfig& config) {
  SLUICE_ASSIGN_OR_RETURN(Url url, ParseUrl(config.server));
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
