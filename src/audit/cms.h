// Detached CMS (PKCS#7) signatures: the standard format, so anyone can check a signature made by
// the server with `openssl cms -verify` and nothing of ours.
#pragma once

#include <string>
#include <string_view>

#include "audit/signing_key.h"
#include "common/status.h"

namespace sluice {

// A DER CMS SignedData over `data`, detached (the data is not embedded) and in binary mode (the
// bytes are signed as they are, no MIME canonicalisation of line endings), with one SHA-256
// signer whose certificate is embedded. Signing is randomised (ECDSA), so two signatures of the
// same data differ. Errors: InvalidArgument (unusable identity), Internal (OpenSSL).
Result<std::string> SignDetached(const SigningIdentity& identity, std::string_view data);

// OK only if `signature_der` is a detached CMS SignedData with exactly one SHA-256 signer, that
// signer's certificate is exactly `cert_pem` (the only trust anchor; a signature by any other
// key fails even when it embeds its own certificate) and the only certificate embedded, and the
// signature covers exactly `data`. The unsigned fields around the signature (versions, algorithm
// identifiers, content type) must be what RFC 5652 and the key imply, so that changing any byte
// of a signature makes it fail.
// The certificate must be valid now. A certificate that is not self-signed (an operator's own,
// issued by some CA) is accepted as the anchor too: it is pinned, so its issuer does not matter.
// Errors: InvalidArgument (cert or signature malformed), Unauthenticated (well-formed but does
// not verify: wrong data, wrong key, expired certificate).
Status VerifyDetached(std::string_view cert_pem, std::string_view data,
                      std::string_view signature_der);

}  // namespace sluice
