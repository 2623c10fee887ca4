#include "audit/cms.h"

#include <limits.h>
#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/cms.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <memory>

#include "audit/openssl_util.h"

namespace sluice {
namespace {

using ossl::Bio;
using ossl::Cert;
using ossl::kMaxPemBytes;
using ossl::MemBio;
using ossl::OpenSslError;
using ossl::ParseCert;
using ossl::ParseKey;
using ossl::Pkey;

struct CmsFree {
  void operator()(CMS_ContentInfo* c) const { CMS_ContentInfo_free(c); }
};
struct StoreFree {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
// Frees the stack only: the certificates in it are owned elsewhere.
struct StackFree {
  void operator()(STACK_OF(X509) * s) const { sk_X509_free(s); }
};
// Frees the stack and the certificates in it (CMS_get1_* hands out references).
struct CertStackPopFree {
  void operator()(STACK_OF(X509) * s) const { sk_X509_pop_free(s, X509_free); }
};
struct CrlStackPopFree {
  void operator()(STACK_OF(X509_CRL) * s) const { sk_X509_CRL_pop_free(s, X509_CRL_free); }
};
using Cms = std::unique_ptr<CMS_ContentInfo, CmsFree>;
using CertStack = std::unique_ptr<STACK_OF(X509), StackFree>;

// A signature is a few hundred bytes plus a certificate; anything huge is not ours.
constexpr size_t kMaxSignatureBytes = 1 << 20;

// Reads one DER element at `p`, moving `p` past it; false on a bad or indefinite length.
struct DerElement {
  int tag = 0;
  int cls = 0;
  const unsigned char* content = nullptr;
  long length = 0;
};
bool NextElement(const unsigned char*& p, const unsigned char* end, DerElement* e) {
  const unsigned char* q = p;
  int r = ASN1_get_object(&q, &e->length, &e->tag, &e->cls, end - p);
  if ((r & 0x80) != 0 || r == (V_ASN1_CONSTRUCTED | 1)) return false;
  e->content = q;
  p = q + e->length;
  return true;
}

// The version numbers of SignedData and of its first SignerInfo, which the CMS API does not
// expose. Walks ContentInfo { oid, [0] SignedData { version, digestAlgorithms, encapContentInfo,
// [0] certificates OPTIONAL, [1] crls OPTIONAL, signerInfos { SignerInfo { version, ... }}}}.
bool ReadVersions(std::string_view der, int* signed_data_version, int* signer_info_version) {
  auto small_int = [](const DerElement& e, int* out) {
    if (e.cls != V_ASN1_UNIVERSAL || e.tag != V_ASN1_INTEGER || e.length != 1) return false;
    *out = e.content[0];
    return true;
  };
  const auto* p = reinterpret_cast<const unsigned char*>(der.data());
  const unsigned char* end = p + der.size();
  DerElement e;
  if (!NextElement(p, end, &e)) return false;  // ContentInfo
  p = e.content;
  end = e.content + e.length;
  if (!NextElement(p, end, &e)) return false;  // contentType
  if (!NextElement(p, end, &e) || e.cls != V_ASN1_CONTEXT_SPECIFIC || e.tag != 0) return false;
  p = e.content;
  end = e.content + e.length;
  if (!NextElement(p, end, &e)) return false;  // SignedData
  p = e.content;
  end = e.content + e.length;
  if (!NextElement(p, end, &e) || !small_int(e, signed_data_version)) return false;
  if (!NextElement(p, end, &e) || !NextElement(p, end, &e)) return false;  // digestAlgs, encap
  do {  // certificates and crls, then the signerInfos SET
    if (!NextElement(p, end, &e)) return false;
  } while (e.cls == V_ASN1_CONTEXT_SPECIFIC);
  if (e.tag != V_ASN1_SET) return false;
  p = e.content;
  end = e.content + e.length;
  if (!NextElement(p, end, &e)) return false;  // SignerInfo
  p = e.content;
  end = e.content + e.length;
  return NextElement(p, end, &e) && small_int(e, signer_info_version);
}

}  // namespace

Result<std::string> SignDetached(const SigningIdentity& identity, std::string_view data) {
  if (data.size() > INT_MAX) return Status::InvalidArgument("data to sign is too large");
  if (identity.key_pem.size() > kMaxPemBytes) return Status::InvalidArgument("key is too large");
  Pkey key = ParseKey(identity.key_pem);
  Cert cert = ParseCert(identity.cert_pem);
  if (!key || !cert) {
    return Status::InvalidArgument("signing identity does not hold a PEM key and certificate");
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return Status::InvalidArgument("signing key does not match the signing certificate");
  }
  // No S/MIME capabilities attribute: it only advertises ciphers for mail replies.
  const unsigned int flags = CMS_DETACHED | CMS_BINARY | CMS_NOSMIMECAP;
  // PARTIAL, so the signer can be added with an explicit digest instead of the key's default.
  Cms cms(CMS_sign(nullptr, nullptr, nullptr, nullptr, flags | CMS_PARTIAL));
  if (!cms || CMS_add1_signer(cms.get(), cert.get(), key.get(), EVP_sha256(), flags) == nullptr) {
    return Status::Internal("setting up CMS signature: " + OpenSslError());
  }
  Bio in = MemBio(data);
  if (!in || CMS_final(cms.get(), in.get(), nullptr, flags) != 1) {
    return Status::Internal("signing: " + OpenSslError());
  }
  unsigned char* der = nullptr;
  int n = i2d_CMS_ContentInfo(cms.get(), &der);
  if (n <= 0) return Status::Internal("encoding signature: " + OpenSslError());
  std::string out(reinterpret_cast<char*>(der), static_cast<size_t>(n));
  OPENSSL_free(der);
  return out;
}

Status VerifyDetached(std::string_view cert_pem, std::string_view data,
                      std::string_view signature_der) {
  if (data.size() > INT_MAX) return Status::InvalidArgument("signed data is too large");
  Cert cert = ParseCert(cert_pem);
  if (!cert) return Status::InvalidArgument("not a readable PEM certificate");
  if (signature_der.empty() || signature_der.size() > kMaxSignatureBytes) {
    return Status::InvalidArgument("signature is empty or too large");
  }

  const auto* p = reinterpret_cast<const unsigned char*>(signature_der.data());
  Cms cms(d2i_CMS_ContentInfo(nullptr, &p, static_cast<long>(signature_der.size())));
  // Trailing bytes would be ignored by the parser; refuse them so one signature has one encoding.
  if (!cms ||
      p != reinterpret_cast<const unsigned char*>(signature_der.data()) + signature_der.size()) {
    ERR_clear_error();
    return Status::InvalidArgument("signature is not a DER CMS structure");
  }
  if (OBJ_obj2nid(CMS_get0_type(cms.get())) != NID_pkcs7_signed) {
    return Status::InvalidArgument("signature is not CMS SignedData");
  }
  // Embedded content would be what the signature covers, not `data`.
  if (CMS_is_detached(cms.get()) != 1) {
    return Status::InvalidArgument("signature embeds its content instead of being detached");
  }
  STACK_OF(CMS_SignerInfo)* infos = CMS_get0_SignerInfos(cms.get());
  if (infos == nullptr || sk_CMS_SignerInfo_num(infos) != 1) {
    return Status::InvalidArgument("signature must have exactly one signer");
  }
  // The certificate bag is not signed. It must hold exactly the pinned certificate, so the file
  // is tamper-evident as a whole and `openssl cms -verify -CAfile`, which trusts the bag to find
  // the signer, sees the same certificate we do.
  std::unique_ptr<STACK_OF(X509), CertStackPopFree> embedded(CMS_get1_certs(cms.get()));
  if (!embedded || sk_X509_num(embedded.get()) != 1 ||
      X509_cmp(sk_X509_value(embedded.get(), 0), cert.get()) != 0) {
    return Status::Unauthenticated("signature does not embed exactly the pinned certificate");
  }
  CMS_SignerInfo* si = sk_CMS_SignerInfo_value(infos, 0);
  X509_ALGOR* digest = nullptr;
  X509_ALGOR* sig_alg = nullptr;
  CMS_SignerInfo_get0_algs(si, nullptr, nullptr, &digest, &sig_alg);
  if (digest == nullptr || OBJ_obj2nid(digest->algorithm) != NID_sha256) {
    return Status::InvalidArgument("signature digest is not SHA-256");
  }
  // OpenSSL hashes with the digest algorithm and verifies with the certificate's key, without
  // looking at the signature algorithm field; check it here so it cannot say something else.
  int md_nid = NID_undef, pk_nid = NID_undef;
  int sig_nid = sig_alg ? OBJ_obj2nid(sig_alg->algorithm) : NID_undef;
  if (!OBJ_find_sigid_algs(sig_nid, &md_nid, &pk_nid)) pk_nid = sig_nid;  // e.g. rsaEncryption
  EVP_PKEY* cert_key = X509_get0_pubkey(cert.get());
  if (cert_key == nullptr || pk_nid == NID_undef || pk_nid != EVP_PKEY_get_base_id(cert_key) ||
      (md_nid != NID_undef && md_nid != NID_sha256)) {
    return Status::InvalidArgument("signature algorithm does not match the certificate's key");
  }
  // RFC 5652 fixes both version numbers for what we accept; OpenSSL does not check them.
  ASN1_OCTET_STRING* keyid = nullptr;
  X509_NAME* issuer = nullptr;
  ASN1_INTEGER* serial = nullptr;
  CMS_SignerInfo_get0_signer_id(si, &keyid, &issuer, &serial);
  int signed_data_version = -1, signer_info_version = -1;
  const int expected_version = keyid != nullptr ? 3 : 1;
  if (!ReadVersions(signature_der, &signed_data_version, &signer_info_version) ||
      signed_data_version != expected_version || signer_info_version != expected_version) {
    return Status::InvalidArgument("signature has unexpected CMS version numbers");
  }

  std::unique_ptr<STACK_OF(X509_CRL), CrlStackPopFree> crls(CMS_get1_crls(cms.get()));
  if (crls && sk_X509_CRL_num(crls.get()) != 0) {
    return Status::InvalidArgument("signature carries certificate revocation lists");
  }
  // Unsigned label of what was signed; WriteBundle and `openssl cms -sign` always say "data".
  if (OBJ_obj2nid(CMS_get0_eContentType(cms.get())) != NID_pkcs7_data) {
    return Status::InvalidArgument("signature is not over plain data");
  }

  std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
  if (!store || X509_STORE_add_cert(store.get(), cert.get()) != 1) {
    return Status::Internal("setting up verification: " + OpenSslError());
  }
  // The pinned certificate is the trust anchor even when it is not self-signed. Safe because the
  // store holds nothing else and the signer is compared with it below.
  X509_STORE_set_flags(store.get(), X509_V_FLAG_PARTIAL_CHAIN);
  // The content goes in behind a pass-through filter: handed a memory BIO itself, CMS_verify
  // copies it into a BIO of its own and (OpenSSL 3.0.19) leaks that copy when a damaged
  // signature fails early, which LeakSanitizer reports on every corrupt bundle checked.
  Bio content(BIO_new(BIO_f_null()));
  Bio data_bio = MemBio(data);
  if (!content || !data_bio) return Status::Internal("setting up verification: " + OpenSslError());
  BIO_push(content.get(), data_bio.get());
  int verified = CMS_verify(cms.get(), nullptr, store.get(), content.get(), nullptr, CMS_BINARY);
  BIO_pop(content.get());  // each BIO is freed by its own owner
  if (verified != 1) {
    return Status::Unauthenticated("signature does not verify: " + OpenSslError());
  }
  // Belt and braces: the chain check alone would also accept a signer certified by the pinned
  // certificate, had the bag held one.
  CertStack signers(CMS_get0_signers(cms.get()));
  if (!signers || sk_X509_num(signers.get()) != 1 ||
      X509_cmp(sk_X509_value(signers.get(), 0), cert.get()) != 0) {
    ERR_clear_error();
    return Status::Unauthenticated("signature is not by the pinned certificate");
  }
  return Status::Ok();
}

}  // namespace sluice
