#include "net/http_types.h"

#include <charconv>

#include "common/json.h"
#include "common/text.h"

namespace sluice {

std::string HttpRequest::Header(std::string_view name) const {
  auto it = headers.find(ToLower(name));
  return it == headers.end() ? std::string() : it->second;
}

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsHostChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_';
}

}  // namespace

std::string PercentDecode(std::string_view s, bool plus_as_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%' && i + 2 < s.size()) {
      int hi = HexValue(s[i + 1]);
      int lo = HexValue(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(plus_as_space && c == '+' ? ' ' : c);
  }
  return out;
}

std::map<std::string, std::string> ParseQuery(std::string_view query) {
  std::map<std::string, std::string> out;
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view part = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (part.empty()) continue;
    size_t eq = part.find('=');
    std::string key = PercentDecode(part.substr(0, eq), true);
    std::string value =
        eq == std::string_view::npos ? std::string() : PercentDecode(part.substr(eq + 1), true);
    out[std::move(key)] = std::move(value);
  }
  return out;
}

std::string ErrorBody(const Status& status) {
  Json j = {
      {"error",
       {{"code", std::string(StatusCodeName(status.code()))}, {"message", status.message()}}}};
  return DumpJson(j);
}

int HttpStatusFor(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
      return 409;
    case StatusCode::kFailedPrecondition:
      return 409;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kResourceExhausted:
      return 429;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kDeadlineExceeded:
      return 504;
    case StatusCode::kCancelled:
      return 499;
    case StatusCode::kUnimplemented:
      return 501;
    case StatusCode::kInternal:
      return 500;
  }
  return 500;
}

StatusCode StatusCodeForHttp(int http_status) {
  switch (http_status) {
    case 400:
      return StatusCode::kInvalidArgument;
    case 401:
      return StatusCode::kUnauthenticated;
    case 403:
      return StatusCode::kPermissionDenied;
    case 404:
      return StatusCode::kNotFound;
    case 409:
      return StatusCode::kFailedPrecondition;
    case 413:
    case 429:
      return StatusCode::kResourceExhausted;
    case 499:
      return StatusCode::kCancelled;
    case 501:
      return StatusCode::kUnimplemented;
    case 502:
    case 503:
      return StatusCode::kUnavailable;
    case 504:
      return StatusCode::kDeadlineExceeded;
    default:
      break;
  }
  if (http_status >= 200 && http_status < 300) return StatusCode::kOk;
  if (http_status >= 400 && http_status < 500) return StatusCode::kInvalidArgument;
  return StatusCode::kInternal;
}

std::string ErrorMessageFromBody(std::string_view body) {
  Result<Json> j = ParseJson(body);
  if (j.ok() && j->is_object()) {
    auto err = j->find("error");
    if (err != j->end() && err->is_object()) {
      auto msg = err->find("message");
      if (msg != err->end() && msg->is_string()) return msg->get<std::string>();
    }
  }
  constexpr size_t kMax = 512;
  std::string raw = Trim(body.substr(0, kMax));
  return raw;
}

std::string Url::ToString() const {
  std::string out = scheme + "://";
  if (host.find(':') != std::string::npos) {
    out += "[" + host + "]";
  } else {
    out += host;
  }
  out += ":" + std::to_string(port) + base_path;
  return out;
}

Result<Url> ParseUrl(std::string_view text) {
  size_t sep = text.find("://");
  if (sep == std::string_view::npos) {
    return Status::InvalidArgument("URL '" + std::string(text) + "' has no scheme (http://...)");
  }
  Url url;
  url.scheme = ToLower(text.substr(0, sep));
  if (url.scheme != "http" && url.scheme != "ws" && !url.secure()) {
    return Status::InvalidArgument("URL scheme '" + url.scheme + "' is not http, https, ws or wss");
  }
  std::string_view rest = text.substr(sep + 3);
  size_t slash = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  if (authority.find('@') != std::string_view::npos) {
    return Status::InvalidArgument("URL must not contain user info");
  }
  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      return Status::InvalidArgument("URL has an unterminated IPv6 address");
    }
    url.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return Status::InvalidArgument("URL has junk after ']'");
      port_text = after.substr(1);
      if (port_text.empty()) return Status::InvalidArgument("URL has an empty port");
    }
    for (char c : url.host) {
      if (HexValue(c) < 0 && c != ':' && c != '.') {
        return Status::InvalidArgument("URL has an invalid IPv6 address");
      }
    }
  } else {
    size_t colon = authority.find(':');
    url.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) return Status::InvalidArgument("URL has an empty port");
    }
    for (char c : url.host) {
      if (!IsHostChar(c)) return Status::InvalidArgument("URL host has an invalid character");
    }
  }
  if (url.host.empty()) return Status::InvalidArgument("URL has no host");
  url.port = url.secure() ? 443 : 80;
  if (!port_text.empty()) {
    unsigned value = 0;
    auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), value);
    if (ec != std::errc() || ptr != port_text.data() + port_text.size() || value == 0 ||
        value > 65535) {
      return Status::InvalidArgument("URL port '" + std::string(port_text) + "' is not valid");
    }
    url.port = static_cast<uint16_t>(value);
  }
  size_t path_end = path.find_first_of("?#");
  url.base_path = std::string(path.substr(0, path_end));
  while (!url.base_path.empty() && url.base_path.back() == '/') url.base_path.pop_back();
  return url;
}

}  // namespace sluice
