#include "common/token_file.h"

#include "common/text.h"

namespace sluice {

std::string FormatTokenFile(const TokenFile& f) {
  std::string out = f.secret + "\n";
  if (!f.ca_sha256.empty()) out += "ca-sha256: " + f.ca_sha256 + "\n";
  if (!f.server.empty()) out += "server: " + f.server + "\n";
  return out;
}

Result<TokenFile> ParseTokenFile(std::string_view text) {
  TokenFile f;
  bool have_secret = false, have_pin = false, have_server = false;
  int line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view raw =
        text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    ++line_no;
    std::string line = Trim(raw);
    if (line.empty()) continue;
    const std::string where = "token file line " + std::to_string(line_no);
    if (!have_secret) {
      // The secret is opaque, but it is sent in an HTTP header: no spaces or separators.
      if (line.find_first_of(" \t:") != std::string::npos) {
        return Status::InvalidArgument(where + ": expected the token, got `" + line.substr(0, 40) +
                                       "`");
      }
      f.secret = line;
      have_secret = true;
      continue;
    }
    size_t colon = line.find(':');
    if (colon == std::string::npos) {
      return Status::InvalidArgument(where + ": expected `key: value`, got `" + line.substr(0, 40) +
                                     "`");
    }
    std::string key = ToLower(Trim(std::string_view(line).substr(0, colon)));
    std::string value = Trim(std::string_view(line).substr(colon + 1));
    if (key == "ca-sha256") {
      if (have_pin) return Status::InvalidArgument(where + ": ca-sha256 given twice");
      std::string hex;
      for (char c : value) {
        if (c != ':') hex.push_back(c);
      }
      hex = ToLower(hex);
      if (hex.size() != 64 || hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
        return Status::InvalidArgument(where + ": ca-sha256 is not a SHA-256 (64 hex digits)");
      }
      f.ca_sha256 = hex;
      have_pin = true;
    } else if (key == "server") {
      if (have_server) return Status::InvalidArgument(where + ": server given twice");
      if (value.empty()) return Status::InvalidArgument(where + ": server is empty");
      f.server = value;
      have_server = true;
    } else {
      return Status::InvalidArgument(where + ": unknown key `" + key.substr(0, 40) +
                                     "` (known: ca-sha256, server)");
    }
  }
  if (!have_secret) return Status::InvalidArgument("token file is empty");
  return f;
}

}  // namespace sluice
