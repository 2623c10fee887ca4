// OpenSSL plumbing shared by signing_key.cc, cms.cc and tls_identity.cc (internal to src/audit):
// owning handles, error text, PEM parsing and writing, certificate skeletons, and the careful
// file I/O that key and certificate files get.
#pragma once

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

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

// The bytes written to a memory BIO.
Result<std::string> BioContents(BIO* bio);
// PEM encodings (PKCS#8 for keys).
Result<std::string> KeyPem(EVP_PKEY* key);
Result<std::string> CertPem(X509* cert);
// A v3 certificate for `key` with a random 127-bit serial, subject CN=`common_name`, valid from
// an hour ago (clock skew) for `validity_seconds`. Issuer name, extensions and the signature are
// the caller's to add.
Result<Cert> NewCertificate(EVP_PKEY* key, std::string_view common_name, long validity_seconds);
// Adds an extension given in OpenSSL's config syntax ("critical,CA:TRUE"); `issuer` resolves
// authorityKeyIdentifier (the certificate itself when self-signed).
Status AddExtension(X509* cert, X509* issuer, int nid, const char* value);

// File I/O for keys and certificates.
// NotFound / PermissionDenied / AlreadyExists / ResourceExhausted / Internal for an errno.
Status ErrnoStatus(const std::string& what, int err);
// A file of at most kMaxPemBytes, not through a symlink; NotFound when it does not exist.
Result<std::string> ReadSmallFile(const std::string& path);
// Writes `content` with exactly `mode` to a temporary file in `dir`, syncs it and links it to
// `path` without replacing anything: AlreadyExists when `path` exists (someone else won a race;
// load theirs), and readers never see a partial file.
Status WriteNewFile(const std::string& dir, const std::string& path, std::string_view content,
                    mode_t mode);
// The same, but atomically replacing an existing `path` (rename).
Status ReplaceFile(const std::string& dir, const std::string& path, std::string_view content,
                   mode_t mode);

}  // namespace sluice::ossl
