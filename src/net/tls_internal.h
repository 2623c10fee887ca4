// TLS plumbing shared by the transport's .cc files (docs/design-notes.md, "TLS"); not part of the
// public interface, and the only header here that pulls in Boost.Asio's SSL (and so OpenSSL).
#pragma once

#include <boost/asio/ssl/context.hpp>
#include <boost/system/error_code.hpp>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "net/http_types.h"

namespace sluice::net_internal {

namespace ssl = boost::asio::ssl;

// A server context for a PEM certificate chain (leaf first) and its PEM private key. TLS 1.2 is
// the floor (TLS 1.3 is what OpenSSL 3 peers negotiate); renegotiation is off, since a client
// could otherwise make the server redo the expensive half of a handshake at will.
// Errors: InvalidArgument naming what does not parse or match.
Result<std::shared_ptr<ssl::context>> MakeServerTlsContext(std::string_view chain_pem,
                                                           std::string_view key_pem);

// The client side: one context per client object, configured from a TlsTrust. Not thread-safe
// (the verify callback records why it refused in the object); clients are single-caller anyway.
class TlsClientContext {
 public:
  // InvalidArgument when ca_pem holds no certificate or ca_sha256 is not 64 hex digits (colons,
  // as `openssl x509 -fingerprint` prints them, and upper case are accepted).
  static Result<std::unique_ptr<TlsClientContext>> Create(const TlsTrust& trust);
  ~TlsClientContext();

  ssl::context& context() { return ctx_; }
  // Per connection, before the handshake: SNI for host names, and with the system store the
  // check that the certificate is for `host` (a name or an IP address).
  Status Prepare(SSL* ssl, const std::string& host);
  // The Status for a failed TLS handshake with `where`: FailedPrecondition "server certificate
  // not trusted: ..." when verification refused the server, Unavailable otherwise.
  Status HandshakeError(SSL* ssl, const boost::system::error_code& ec, const std::string& where);

 private:
  explicit TlsClientContext(const TlsTrust& trust);
  static int VerifyChain(X509_STORE_CTX* store_ctx, void* arg);

  ssl::context ctx_;
  TlsTrust trust_;
  std::string refusal_;  // set by VerifyChain when it refuses the chain
};

// Lowercase hex SHA-256 of a certificate's DER encoding.

}  // namespace sluice::net_internal
