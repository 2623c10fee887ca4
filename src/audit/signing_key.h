// The server's audit signing identity: one private key and the self-signed certificate that
// users pin to check signed audit bundles (bundle.h) offline, with plain `openssl cms -verify`.
// The key never leaves the data directory; the certificate is meant to be handed out.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace sluice {

// PEM text of a private key (PKCS#8) and of the X.509 certificate for its public key.
struct SigningIdentity {
  std::string key_pem;
  std::string cert_pem;
};

// File names inside the directory given to LoadOrCreateSigningIdentity.
inline constexpr std::string_view kSigningKeyFile = "audit-signing.key";
inline constexpr std::string_view kSigningCertFile = "audit-signing.crt";

// A fresh EC P-256 key and a self-signed certificate for it, valid for 10 years (backdated an
// hour for clock skew), with subject CN=`common_name`. The certificate is a CA (basicConstraints
// CA:TRUE, pathlen:0; keyUsage digitalSignature, keyCertSign) because OpenSSL only accepts a
// self-signed certificate as its own trust anchor when it may sign certificates, which is what
// lets `openssl cms -verify -CAfile cert.pem` check a signature with no other setup.
// Errors: InvalidArgument (common_name empty or longer than 64 bytes), Internal (OpenSSL).
Result<SigningIdentity> CreateSigningIdentity(std::string_view common_name);

// Loads DIR/audit-signing.key and DIR/audit-signing.crt, creating both on the first call (key
// mode 0600, certificate 0644, each written to a temporary file and linked into place without
// replacing anything, so concurrent first starts agree on one pair). An existing key or
// certificate is never replaced: a corrupt file, a key that does not match the certificate,
// an expired certificate, or a certificate whose key is gone is an error naming the file. The
// one repair made is issuing a certificate for an existing key when the certificate is missing
// (what a crash between the two writes of a first start leaves behind). `common_name` is only
// used for a new certificate; a loaded one keeps its own. Operators may put their own key and
// certificate (any key type OpenSSL signs CMS with) in place before the first start.
// Errors: FailedPrecondition (dir missing; bad, mismatched, expired or orphaned files),
// InvalidArgument (common_name), PermissionDenied / Internal (I/O).
// `files` names the two files and what errors call them (the TLS CA, tls_identity.h, is kept
// the same way as ca.key / ca.crt).
struct IdentityFiles {
  std::string_view key_file = kSigningKeyFile;
  std::string_view cert_file = kSigningCertFile;
  std::string_view label = "audit signing";
};
Result<SigningIdentity> LoadOrCreateSigningIdentity(const std::string& dir,
                                                    std::string_view common_name,
                                                    const IdentityFiles& files = {});

// Checks that both PEMs parse and that the key belongs to the certificate.
// Errors: InvalidArgument, saying which of the two is at fault.
Status CheckSigningIdentity(const SigningIdentity& identity);

// SHA-256 of the certificate's DER encoding as lowercase hex: what a user compares with
// `openssl x509 -in cert.pem -noout -fingerprint -sha256` (which prints it uppercase, with
// colons) before pinning the certificate. Errors: InvalidArgument (not a PEM certificate).
Result<std::string> CertificateSha256(std::string_view cert_pem);

}  // namespace sluice
