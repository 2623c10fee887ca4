#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl/error.hpp>
#include <memory>

#include "common/crypto.h"
#include "common/text.h"
#include "net/tls_internal.h"

namespace sluice::net_internal {
namespace {

struct StoreFree {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct StoreCtxFree {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};

void SetTls12Floor(SSL_CTX* ctx) {
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
}

// "AB:CD:..." or "abcd..." -> "abcd...", or "" when it is not a SHA-256.
std::string NormalizePin(std::string_view pin) {
  std::string out;
  for (char c : pin) {
    if (c == ':' || c == ' ') continue;
    out.push_back(c);
  }
  out = ToLower(out);
  if (out.size() != 64 || out.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return "";
  }
  return out;
}

bool IsIpAddress(const std::string& host) {
  boost::system::error_code ec;
  boost::asio::ip::make_address(host, ec);
  return !ec;
}

}  // namespace

Result<std::shared_ptr<ssl::context>> MakeServerTlsContext(std::string_view chain_pem,
                                                           std::string_view key_pem) {
  if (chain_pem.empty() || key_pem.empty()) {
    return Status::InvalidArgument("TLS needs both a certificate chain and a private key");
  }
  std::shared_ptr<ssl::context> ctx;
  try {
    ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  } catch (const std::exception& e) {
    return Status::Internal(std::string("creating the TLS context: ") + e.what());
  }
  SetTls12Floor(ctx->native_handle());
  boost::system::error_code ec;
  ctx->use_certificate_chain(boost::asio::buffer(chain_pem.data(), chain_pem.size()), ec);
  if (ec) {
    ERR_clear_error();
    return Status::InvalidArgument("TLS certificate chain is not usable PEM: " + ec.message());
  }
  {
    // Told apart here because OpenSSL reports a key for another certificate as a load error.
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(
        BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())), &BIO_free);
    EVP_PKEY* key = bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr;
    ERR_clear_error();
    if (!key) return Status::InvalidArgument("TLS private key is not a PEM private key");
    EVP_PKEY_free(key);
  }
  ctx->use_private_key(boost::asio::buffer(key_pem.data(), key_pem.size()), ssl::context::pem, ec);
  if (ec) {
    ERR_clear_error();
    return Status::InvalidArgument("TLS private key does not match the certificate (" +
                                   ec.message() + ")");
  }
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    ERR_clear_error();
    return Status::InvalidArgument("TLS private key does not match the certificate");
  }
  return ctx;
}

TlsClientContext::TlsClientContext(const TlsTrust& trust)
    : ctx_(ssl::context::tls_client), trust_(trust) {}
TlsClientContext::~TlsClientContext() = default;

Result<std::unique_ptr<TlsClientContext>> TlsClientContext::Create(const TlsTrust& trust) {
  TlsTrust t = trust;
  if (!t.ca_sha256.empty()) {
    t.ca_sha256 = NormalizePin(trust.ca_sha256);
    if (t.ca_sha256.empty()) {
      return Status::InvalidArgument("CA pin '" + trust.ca_sha256.substr(0, 100) +
                                     "' is not a SHA-256 (64 hex digits)");
    }
  }
  std::unique_ptr<TlsClientContext> c;
  try {
    c.reset(new TlsClientContext(t));
  } catch (const std::exception& e) {
    return Status::Internal(std::string("creating the TLS context: ") + e.what());
  }
  SSL_CTX* ctx = c->ctx_.native_handle();
  SetTls12Floor(ctx);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  boost::system::error_code ec;
  if (!t.ca_pem.empty()) {
    c->ctx_.add_certificate_authority(boost::asio::buffer(t.ca_pem), ec);
    if (ec) {
      ERR_clear_error();
      return Status::InvalidArgument("CA file holds no usable PEM certificate: " + ec.message());
    }
    // An intermediate CA given as the anchor is enough; the root need not be at hand.
    X509_VERIFY_PARAM_set_flags(SSL_CTX_get0_param(ctx), X509_V_FLAG_PARTIAL_CHAIN);
  }
  if (!t.ca_sha256.empty()) {
    SSL_CTX_set_cert_verify_callback(ctx, &TlsClientContext::VerifyChain, c.get());
  }
  if (t.system_store()) {
    c->ctx_.set_default_verify_paths(ec);
    if (ec) {
      ERR_clear_error();
      return Status::Internal("loading the system trust store: " + ec.message());
    }
  }
  return c;
}

// Replaces OpenSSL's chain verification when a pin is set: the certificate with the pinned
// fingerprint, wherever it sits in what the server sent, becomes the only trust anchor, and the
// chain is then verified normally (signatures, validity periods, CA constraints, TLS server
// purpose). With ca_pem as well, the chain must verify against it and contain the pin.
int TlsClientContext::VerifyChain(X509_STORE_CTX* sctx, void* arg) {
  auto* self = static_cast<TlsClientContext*>(arg);
  const std::string& pin = self->trust_.ca_sha256;
  if (!self->trust_.ca_pem.empty()) {
    if (X509_verify_cert(sctx) != 1) return 0;
    STACK_OF(X509)* chain = X509_STORE_CTX_get0_chain(sctx);
    for (int i = 0; chain && i < sk_X509_num(chain); ++i) {
      if (CertificateSha256(sk_X509_value(chain, i)) == pin) return 1;
    }
    self->refusal_ = "its chain does not contain the pinned CA " + pin;
    X509_STORE_CTX_set_error(sctx, X509_V_ERR_CERT_UNTRUSTED);
    return 0;
  }
  X509* leaf = X509_STORE_CTX_get0_cert(sctx);
  STACK_OF(X509)* untrusted = X509_STORE_CTX_get0_untrusted(sctx);
  X509* anchor = nullptr;
  if (leaf && CertificateSha256(leaf) == pin) anchor = leaf;
  for (int i = 0; !anchor && untrusted && i < sk_X509_num(untrusted); ++i) {
    X509* c = sk_X509_value(untrusted, i);
    if (CertificateSha256(c) == pin) anchor = c;
  }
  if (!anchor) {
    self->refusal_ = "no certificate the server presented has the pinned SHA-256 " + pin +
                     " (a different CA: check the token file's ca-sha256 or --ca-file)";
    X509_STORE_CTX_set_error(sctx, X509_V_ERR_CERT_UNTRUSTED);
    return 0;
  }
  std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
  std::unique_ptr<X509_STORE_CTX, StoreCtxFree> v(X509_STORE_CTX_new());
  if (!store || !v || X509_STORE_add_cert(store.get(), anchor) != 1 ||
      X509_STORE_CTX_init(v.get(), store.get(), leaf, untrusted) != 1) {
    ERR_clear_error();
    self->refusal_ = "out of memory verifying the chain";
    X509_STORE_CTX_set_error(sctx, X509_V_ERR_OUT_OF_MEM);
    return 0;
  }
  X509_STORE_CTX_set_default(v.get(), "ssl_server");
  // The pinned certificate need not be self-signed (an intermediate, or the leaf itself).
  X509_VERIFY_PARAM_set_flags(X509_STORE_CTX_get0_param(v.get()), X509_V_FLAG_PARTIAL_CHAIN);
  if (X509_verify_cert(v.get()) == 1) return 1;
  int err = X509_STORE_CTX_get_error(v.get());
  ERR_clear_error();
  self->refusal_ =
      std::string(X509_verify_cert_error_string(err)) + " (verifying up to the pinned CA)";
  X509_STORE_CTX_set_error(sctx, err == X509_V_OK ? X509_V_ERR_CERT_UNTRUSTED : err);
  return 0;
}

Status TlsClientContext::Prepare(SSL* ssl, const std::string& host) {
  refusal_.clear();
  const bool ip = IsIpAddress(host);
  // SNI carries names only (RFC 6066); servers with several names pick their certificate by it.
  if (!ip && SSL_set_tlsext_host_name(ssl, host.c_str()) != 1) {
    ERR_clear_error();
    return Status::InvalidArgument("cannot use '" + host + "' as a TLS server name");
  }
  if (trust_.system_store()) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    int ok = ip ? X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str())
                : X509_VERIFY_PARAM_set1_host(param, host.c_str(), 0);
    if (ok != 1) {
      ERR_clear_error();
      return Status::InvalidArgument("cannot check certificates for host '" + host + "'");
    }
  }
  return Status::Ok();
}

Status TlsClientContext::HandshakeError(SSL* ssl, const boost::system::error_code& ec,
                                        const std::string& where) {
  long verify = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
  ERR_clear_error();
  if (verify != X509_V_OK || !refusal_.empty()) {
    std::string why = !refusal_.empty() ? refusal_ : X509_verify_cert_error_string(verify);
    if (trust_.system_store()) {
      why +=
          " (checked against the system trust store; a server with a generated CA needs its "
          "ca.crt as a CA file, or its ca-sha256 pin)";
    }
    return Status::FailedPrecondition("server certificate not trusted: " + where + ": " + why);
  }
  std::string msg = "TLS handshake with " + where + " failed: " + ec.message();
  // What OpenSSL says when the peer answers a ClientHello with plain HTTP.
  if (ec.message().find("wrong version number") != std::string::npos ||
      ec.message().find("packet length too long") != std::string::npos) {
    msg += " (does the server speak plain HTTP? then use http:// or ws://)";
  }
  return Status::Unavailable(msg);
}

}  // namespace sluice::net_internal
