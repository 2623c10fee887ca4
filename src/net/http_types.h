// Plain value types shared by the HTTP server, HTTP client and WebSocket client. No Beast here so
// that modules coding against the transport compile quickly.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace sluice {

struct HttpRequest {
  std::string method;
  std::string target;  // raw request target as sent ("/v1/jobs?state=running")
  std::string path;    // percent-decoded, without the query
  std::map<std::string, std::string> query;    // decoded; a repeated key keeps the last value
  std::map<std::string, std::string> headers;  // lowercase names; repeated headers joined by ", "
  std::string body;
  std::string remote_addr;  // "127.0.0.1:5555" or "[::1]:5555"

  // The header's value, "" if absent. `name` is matched case-insensitively.
  std::string Header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers, sent as given
};

struct Url {
  std::string scheme;  // "http" or "ws"
  std::string host;    // name or address; IPv6 without brackets
  uint16_t port = 0;
  std::string base_path;  // "" or "/prefix" (no trailing slash)

  // "http://host:port/base", with brackets around IPv6 hosts.
  std::string ToString() const;
};

// Accepts http:// and ws:// URLs (default port 80) with IPv4, [IPv6] or host names. https and
// wss return Unimplemented until TLS lands; anything else is InvalidArgument.
Result<Url> ParseUrl(std::string_view text);

// Helpers shared by the server and the clients (and handy for handlers).

// Decodes %XX escapes; with plus_as_space, '+' becomes ' ' (query strings). Malformed escapes
// are kept literally rather than rejected, as browsers do.
std::string PercentDecode(std::string_view s, bool plus_as_space);
// Splits "a=1&b=x%20y" into decoded pairs.
std::map<std::string, std::string> ParseQuery(std::string_view query);
// `{"error":{"code":"NOT_FOUND","message":"..."}}` for a non-OK status.
std::string ErrorBody(const Status& status);
// The HTTP status a Status maps to (NotFound → 404, Unauthenticated → 401, ...).
int HttpStatusFor(StatusCode code);
// The Status code an HTTP error status maps to (the inverse, for clients).
StatusCode StatusCodeForHttp(int http_status);
// Reads the message out of an error body produced by ErrorBody (or any JSON with
// error.message); falls back to the raw body, truncated.
std::string ErrorMessageFromBody(std::string_view body);

}  // namespace sluice
