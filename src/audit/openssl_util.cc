#include "audit/openssl_util.h"

#include <openssl/err.h>
#include <openssl/pem.h>

namespace sluice::ossl {

std::string OpenSslError() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (out.empty()) out = buf;  // the first is the root cause
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

Bio MemBio(std::string_view s) {
  // BIO_new_mem_buf rejects a null pointer even for zero bytes.
  return Bio(BIO_new_mem_buf(s.empty() ? "" : s.data(), static_cast<int>(s.size())));
}

Pkey ParseKey(std::string_view pem) {
  if (pem.size() > kMaxPemBytes) return nullptr;
  Bio bio = MemBio(pem);
  Pkey key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  return key;
}

Cert ParseCert(std::string_view pem) {
  if (pem.size() > kMaxPemBytes) return nullptr;
  Bio bio = MemBio(pem);
  Cert cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  return cert;
}

}  // namespace sluice::ossl
