// The server's TLS identity (docs/design-notes.md, "TLS"): by default a private CA and a server
// certificate it signs, both created in DATA_DIR/tls on first start; or the operator's own
// certificate chain and key (`--tls-cert/--tls-key`). Clients verify the server by pinning the
// CA's SHA-256 (token files carry it as `ca-sha256:`), by a CA file, or with the system store.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace sluice {

struct TlsIdentity {
  std::string cert_chain_pem;  // what the server presents: its certificate, then its issuers
  std::string key_pem;         // the server certificate's private key
  // The certificate clients trust, and its SHA-256 (DER, lowercase hex) for pinning. Both empty
  // for an operator chain that does not include its root: clients use the system store then.
  std::string ca_cert_pem;
  std::string ca_sha256;
};

// Inside the data dir: tls/ca.crt, ca.key (0600), server.crt, server.key (0600).
inline constexpr std::string_view kTlsDir = "tls";
inline constexpr std::string_view kTlsCaCertFile = "ca.crt";
inline constexpr std::string_view kTlsCaKeyFile = "ca.key";
inline constexpr std::string_view kTlsServerCertFile = "server.crt";
inline constexpr std::string_view kTlsServerKeyFile = "server.key";

// The names a generated server certificate covers: localhost, 127.0.0.1, ::1, `listen_host`
// (or, for a wildcard address such as 0.0.0.0, this machine's hostname), then `extra`, without
// duplicates.
std::vector<std::string> TlsServerNames(const std::string& listen_host,
                                        const std::vector<std::string>& extra = {});

// Loads DATA_DIR/tls, creating what is missing. The CA (EC P-256, 10 years, CA:TRUE pathlen:0)
// is created once and never replaced, like the audit signing key (signing_key.h): a corrupt or
// orphaned CA file is an error naming it. The server certificate (EC P-256, 825 days, signed by
// the CA, serverAuth) is reissued whenever it does not cover every name in `names` (IP addresses
// or DNS names, `*.` wildcards allowed), expires within 30 days, does not match its key or was
// not signed by this CA; the pin stays the same, so clients keep working.
// Errors: InvalidArgument (a name that is neither), FailedPrecondition (bad CA files),
// PermissionDenied / Internal (I/O, OpenSSL).
Result<TlsIdentity> LoadOrCreateTlsIdentity(const std::string& data_dir,
                                            const std::vector<std::string>& names);

// The operator's certificate chain (PEM, leaf first, as in a `fullchain.pem`) and its private
// key. The pin is the last certificate of the chain when that one is self-signed (a private
// root included on purpose); otherwise none, and clients use the system trust store, which
// keeps working when a public CA rotates its intermediates. Symlinks are followed (certbot's
// live/ directory is made of them). Errors: NotFound / InvalidArgument naming the file.
Result<TlsIdentity> LoadTlsIdentityFiles(const std::string& cert_file, const std::string& key_file);

// The pin of the CA created in DATA_DIR/tls (the SHA-256 of DATA_DIR/tls/ca.crt), for writers
// of token files. NotFound before the first LoadOrCreateTlsIdentity.
Result<std::string> TlsCaSha256(const std::string& data_dir);

}  // namespace sluice
