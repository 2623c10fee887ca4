// Token files (admin.token, join.token): the secret on the first line, then optional
// `key: value` lines that tell a client how to reach and trust the server (docs/design-notes.md,
// "TLS"). A file holding only the secret, as servers before TLS wrote, is still valid.
//
//   3f9c...e1
//   ca-sha256: 5b1e...07
//   server: https://gpu.example.com:7070
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace sluice {

struct TokenFile {
  std::string secret;
  std::string ca_sha256;  // lowercase hex SHA-256 of the server's CA certificate (DER); optional
  std::string server;     // the server's URL; optional
};

// "secret\nca-sha256: ...\nserver: ...\n"; empty fields are left out.
std::string FormatTokenFile(const TokenFile& f);

// Blank lines and surrounding whitespace (CRLF included) are ignored. InvalidArgument, naming the
// line, for an empty secret, a line without "key:", an unknown or repeated key, or a ca-sha256
// that is not 64 hex digits (colons and upper case, as `openssl x509 -fingerprint -sha256`
// prints it, are accepted and normalised).
Result<TokenFile> ParseTokenFile(std::string_view text);

}  // namespace sluice
