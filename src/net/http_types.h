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

// How a client decides that an https:// or wss:// server is the right one (docs/design-notes.md,
// "TLS"). At most one of the two is normally set; with both, the chain must satisfy both.
struct TlsTrust {
  // PEM trust anchors (one or more certificates, e.g. a server's DATA_DIR/tls/ca.crt): the
  // server's chain must verify up to one of them. No hostname check: a private CA issues only
  // for the server it belongs to, and agents often dial it by an address its SANs do not list.
  std::string ca_pem;
  // Lowercase hex SHA-256 of the DER of one certificate in the server's chain (normally the
  // CA's; what token files carry as `ca-sha256:`). The chain is verified with that certificate
  // as its trust anchor (signatures, validity), without a hostname check, as for ca_pem.
  std::string ca_sha256;
  // Neither set: the system trust store, with the URL's host checked against the certificate.
  bool system_store() const { return ca_pem.empty() && ca_sha256.empty(); }
};

struct Url {
  std::string scheme;  // "http", "ws", "https" or "wss"
  std::string host;    // name or address; IPv6 without brackets
  uint16_t port = 0;
  std::string base_path;  // "" or "/prefix" (no trailing slash)
  // Used only for https/wss. It travels with the URL so that every client made from one (the
  // agent's WebSocket, blob and probe clients; the CLI's) verifies the server the same way.
  // ParseUrl leaves it empty (the system store); callers fill it from a token or CA file.
  TlsTrust tls;

  bool secure() const { return scheme == "https" || scheme == "wss"; }
  // "http://host:port/base", with brackets around IPv6 hosts.
  std::string ToString() const;
};

// Accepts http:// and ws:// (default port 80) and https:// and wss:// (default port 443) URLs
// with IPv4, [IPv6] or host names; anything else is InvalidArgument.
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
