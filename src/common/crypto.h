// Randomness and hashing (OpenSSL): token generation, token hashes, content addresses.
#pragma once

#include <openssl/types.h>

#include <string>
#include <string_view>

namespace sluice {

// `nbytes` bytes from a CSPRNG as lowercase hex.
std::string RandomHex(size_t nbytes);
// SHA-256 of data as lowercase hex.
std::string Sha256Hex(std::string_view data);
// Compares without an early exit, so a token check leaks no timing about where it differs.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// Lowercase hex SHA-256 of a certificate's DER encoding (what `openssl x509 -fingerprint
// -sha256` prints, without colons): the CA pin in token files, the audit signer's fingerprint.
// "" when the certificate cannot be encoded.
std::string CertificateSha256(X509* cert);

}  // namespace sluice
