#include "common/crypto.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/x509.h>

#include <stdexcept>
#include <vector>

namespace sluice {
namespace {
std::string ToHex(const unsigned char* p, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}
}  // namespace

std::string RandomHex(size_t nbytes) {
  std::vector<unsigned char> buf(nbytes);
  if (RAND_bytes(buf.data(), static_cast<int>(nbytes)) != 1) {
    // No entropy is a broken environment, not an expected failure.
    std::abort();
  }
  return ToHex(buf.data(), nbytes);
}

std::string Sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  return ToHex(md, len);
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string CertificateSha256(X509* cert) {
  unsigned char* der = nullptr;
  int n = i2d_X509(cert, &der);
  if (n <= 0) return "";
  std::string hex = Sha256Hex(std::string_view(reinterpret_cast<char*>(der), n));
  OPENSSL_free(der);
  return hex;
}

}  // namespace sluice
