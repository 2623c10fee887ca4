// OpenSSL plumbing shared by signing_key.cc and cms.cc (internal to src/audit): owning handles,
// error text, and PEM parsing of keys and certificates.
#pragma once

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/x509.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace sluice::ossl {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using Cert = std::unique_ptr<X509, X509Free>;

// Larger PEM input is refused before OpenSSL sees it.
inline constexpr size_t kMaxPemBytes = 1 << 20;

// Drains OpenSSL's thread-local error queue so a stale error cannot be blamed on a later call.
std::string OpenSslError();
// A read-only memory BIO over `s` (which must outlive it).
Bio MemBio(std::string_view s);
// PEM private key / certificate, or null (over kMaxPemBytes or unparsable); clears the error
// queue either way.
Pkey ParseKey(std::string_view pem);
Cert ParseCert(std::string_view pem);

}  // namespace sluice::ossl
