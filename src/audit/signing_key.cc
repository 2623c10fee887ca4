#include "audit/signing_key.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <system_error>

#include "audit/openssl_util.h"
#include "common/crypto.h"

namespace sluice {
namespace {

using ossl::AddExtension;
using ossl::Bio;
using ossl::Cert;
using ossl::OpenSslError;
using ossl::ParseCert;
using ossl::ParseKey;
using ossl::Pkey;
using ossl::ReadSmallFile;
using ossl::WriteNewFile;

constexpr long kValiditySeconds = 10L * 365 * 24 * 3600;

// A self-signed certificate for `key`; see CreateSigningIdentity for why it looks as it does.
Result<std::string> IssueCertificate(EVP_PKEY* key, std::string_view common_name) {
  SLUICE_ASSIGN_OR_RETURN(Cert cert, ossl::NewCertificate(key, common_name, kValiditySeconds));
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get())) != 1) {
    return Status::Internal("setting certificate issuer: " + OpenSslError());
  }
  // The key identifiers let chain building match this certificate to itself by key, not only
  // by name; pathlen:0 means even our own key cannot mint intermediate CAs under it.
  X509* c = cert.get();
  SLUICE_RETURN_IF_ERROR(AddExtension(c, c, NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
  SLUICE_RETURN_IF_ERROR(
      AddExtension(c, c, NID_key_usage, "critical,digitalSignature,keyCertSign"));
  SLUICE_RETURN_IF_ERROR(AddExtension(c, c, NID_subject_key_identifier, "hash"));
  SLUICE_RETURN_IF_ERROR(AddExtension(c, c, NID_authority_key_identifier, "keyid:always"));
  if (X509_sign(c, key, EVP_sha256()) <= 0) {
    return Status::Internal("signing certificate: " + OpenSslError());
  }
  return ossl::CertPem(c);
}

Status CheckCommonName(std::string_view common_name) {
  // 64 is X.520's upper bound for a common name; longer ones make invalid certificates.
  if (common_name.empty() || common_name.size() > 64) {
    return Status::InvalidArgument("signing certificate common name must be 1 to 64 bytes");
  }
  return Status::Ok();
}

// Checks a loaded pair, naming the file at fault.
Status CheckLoaded(const SigningIdentity& id, const std::string& key_path,
                   const std::string& cert_path, const std::string& label) {
  Pkey key = ParseKey(id.key_pem);
  if (!key) {
    return Status::FailedPrecondition(label + " key " + key_path +
                                      " is not a readable PEM private key (restore it from a "
                                      "backup; it is never regenerated over an existing file)");
  }
  Cert cert = ParseCert(id.cert_pem);
  if (!cert) {
    return Status::FailedPrecondition(label + " certificate " + cert_path +
                                      " is not a readable PEM certificate");
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return Status::FailedPrecondition(label + " key " + key_path +
                                      " does not match the certificate " + cert_path);
  }
  // Signatures by an expired certificate do not verify; better to refuse at startup.
  if (X509_cmp_current_time(X509_get0_notAfter(cert.get())) <= 0) {
    return Status::FailedPrecondition(label + " certificate " + cert_path +
                                      " has expired; move both files away to create a new "
                                      "identity (and hand out the new certificate)");
  }
  return Status::Ok();
}

}  // namespace

Result<SigningIdentity> CreateSigningIdentity(std::string_view common_name) {
  SLUICE_RETURN_IF_ERROR(CheckCommonName(common_name));
  Pkey key(EVP_EC_gen("P-256"));
  if (!key) return Status::Internal("generating EC key: " + OpenSslError());
  SigningIdentity id;
  SLUICE_ASSIGN_OR_RETURN(id.key_pem, ossl::KeyPem(key.get()));
  SLUICE_ASSIGN_OR_RETURN(id.cert_pem, IssueCertificate(key.get(), common_name));
  return id;
}

Result<SigningIdentity> LoadOrCreateSigningIdentity(const std::string& dir,
                                                    std::string_view common_name,
                                                    const IdentityFiles& files) {
  const std::string label(files.label);
  SLUICE_RETURN_IF_ERROR(CheckCommonName(common_name));
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::FailedPrecondition(label + " directory " + dir + " is not a directory");
  }
  const std::string key_path = dir + "/" + std::string(files.key_file);
  const std::string cert_path = dir + "/" + std::string(files.cert_file);

  // A few rounds: when a concurrent first start wins a race, load what it wrote.
  for (int attempt = 0; attempt < 3; ++attempt) {
    Result<std::string> key = ReadSmallFile(key_path);
    Result<std::string> cert = ReadSmallFile(cert_path);
    if (!key.ok() && key.status().code() != StatusCode::kNotFound) return key.status();
    if (!cert.ok() && cert.status().code() != StatusCode::kNotFound) return cert.status();

    if (key.ok() && cert.ok()) {
      SigningIdentity id{std::move(*key), std::move(*cert)};
      SLUICE_RETURN_IF_ERROR(CheckLoaded(id, key_path, cert_path, label));
      return id;
    }
    if (!key.ok() && cert.ok()) {
      // Users may already pin this certificate; a new key could never match it.
      return Status::FailedPrecondition(
          label + " certificate " + cert_path + " exists but its key " + key_path +
          " is missing; restore the key, or move the certificate away to create a new identity");
    }
    Status written;
    if (key.ok()) {
      // Key without certificate: a first start that stopped between its two writes. Nobody
      // can have pinned a certificate that was never written, so issue one for this key.
      Pkey pkey = ParseKey(*key);
      if (!pkey) {
        return Status::FailedPrecondition(label + " key " + key_path +
                                          " is not a readable PEM private key");
      }
      SLUICE_ASSIGN_OR_RETURN(std::string cert_pem, IssueCertificate(pkey.get(), common_name));
      written = WriteNewFile(dir, cert_path, cert_pem, 0644);
      if (written.ok()) return SigningIdentity{std::move(*key), std::move(cert_pem)};
    } else {
      SLUICE_ASSIGN_OR_RETURN(SigningIdentity id, CreateSigningIdentity(common_name));
      // Key first: the state a crash can leave (key, no certificate) is the repairable one.
      written = WriteNewFile(dir, key_path, id.key_pem, 0600);
      if (written.ok()) written = WriteNewFile(dir, cert_path, id.cert_pem, 0644);
      if (written.ok()) return id;
    }
    if (written.code() != StatusCode::kAlreadyExists) return written;
  }
  return Status::Internal(label + " files in " + dir + " keep changing while being loaded");
}

Status CheckSigningIdentity(const SigningIdentity& identity) {
  Pkey key = ParseKey(identity.key_pem);
  if (!key) return Status::InvalidArgument("signing key is not a readable PEM private key");
  Cert cert = ParseCert(identity.cert_pem);
  if (!cert)
    return Status::InvalidArgument("signing certificate is not a readable PEM certificate");
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return Status::InvalidArgument("signing key does not match the signing certificate");
  }
  return Status::Ok();
}

Result<std::string> CertificateSha256(std::string_view cert_pem) {
  Cert cert = ParseCert(cert_pem);
  if (!cert) return Status::InvalidArgument("not a readable PEM certificate");
  std::string hex = CertificateSha256(cert.get());
  if (hex.empty()) return Status::Internal("encoding certificate: " + OpenSslError());
  return hex;
}

}  // namespace sluice
