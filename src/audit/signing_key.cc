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

using ossl::Bio;
using ossl::Cert;
using ossl::kMaxPemBytes;
using ossl::MemBio;
using ossl::OpenSslError;
using ossl::ParseCert;
using ossl::ParseKey;
using ossl::Pkey;

struct BnFree {
  void operator()(BIGNUM* b) const { BN_free(b); }
};
struct ExtFree {
  void operator()(X509_EXTENSION* e) const { X509_EXTENSION_free(e); }
};

constexpr long kValiditySeconds = 10L * 365 * 24 * 3600;

Result<std::string> BioContents(BIO* bio) {
  char* p = nullptr;
  long n = BIO_get_mem_data(bio, &p);
  if (n < 0 || p == nullptr) return Status::Internal("reading PEM output: " + OpenSslError());
  return std::string(p, static_cast<size_t>(n));
}

Status AddExtension(X509* cert, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  std::unique_ptr<X509_EXTENSION, ExtFree> ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) {
    return Status::Internal(std::string("adding certificate extension ") + OBJ_nid2sn(nid) + ": " +
                            OpenSslError());
  }
  return Status::Ok();
}

// A self-signed certificate for `key`; see CreateSigningIdentity for why it looks as it does.
Result<std::string> IssueCertificate(EVP_PKEY* key, std::string_view common_name) {
  Cert cert(X509_new());
  std::unique_ptr<BIGNUM, BnFree> serial(BN_new());
  if (!cert || !serial) return Status::Internal("allocating certificate: " + OpenSslError());
  // 127 random bits: unique without coordination, and positive as RFC 5280 requires.
  if (X509_set_version(cert.get(), X509_VERSION_3) != 1 ||
      BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) == nullptr ||
      X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), kValiditySeconds) == nullptr) {
    return Status::Internal("filling certificate: " + OpenSslError());
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  std::string cn(common_name);
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                                 0) != 1 ||
      X509_set_issuer_name(cert.get(), name) != 1 || X509_set_pubkey(cert.get(), key) != 1) {
    return Status::Internal("setting certificate name: " + OpenSslError());
  }
  // The key identifiers let chain building match this certificate to itself by key, not only
  // by name; pathlen:0 means even our own key cannot mint intermediate CAs under it.
  SLUICE_RETURN_IF_ERROR(
      AddExtension(cert.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
  SLUICE_RETURN_IF_ERROR(
      AddExtension(cert.get(), NID_key_usage, "critical,digitalSignature,keyCertSign"));
  SLUICE_RETURN_IF_ERROR(AddExtension(cert.get(), NID_subject_key_identifier, "hash"));
  SLUICE_RETURN_IF_ERROR(AddExtension(cert.get(), NID_authority_key_identifier, "keyid:always"));
  if (X509_sign(cert.get(), key, EVP_sha256()) <= 0) {
    return Status::Internal("signing certificate: " + OpenSslError());
  }
  Bio out(BIO_new(BIO_s_mem()));
  if (!out || PEM_write_bio_X509(out.get(), cert.get()) != 1) {
    return Status::Internal("encoding certificate: " + OpenSslError());
  }
  return BioContents(out.get());
}

Status CheckCommonName(std::string_view common_name) {
  // 64 is X.520's upper bound for a common name; longer ones make invalid certificates.
  if (common_name.empty() || common_name.size() > 64) {
    return Status::InvalidArgument("signing certificate common name must be 1 to 64 bytes");
  }
  return Status::Ok();
}

Status ErrnoStatus(const std::string& what, int err) {
  std::string msg = what + ": " + std::error_code(err, std::generic_category()).message();
  if (err == ENOENT) return Status::NotFound(msg);
  if (err == EACCES || err == EPERM) return Status::PermissionDenied(msg);
  if (err == EEXIST) return Status::AlreadyExists(msg);
  if (err == ENOSPC || err == EDQUOT) return Status::ResourceExhausted(msg);
  return Status::Internal(msg);
}

// NotFound when the file does not exist; the caller decides whether that is an error.
Result<std::string> ReadSmallFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return ErrnoStatus("open " + path, errno);
  std::string out;
  char buf[8192];
  Status st;
  while (true) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      st = ErrnoStatus("read " + path, errno);
      break;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > kMaxPemBytes) {
      st = Status::FailedPrecondition(path + " is too large to be a PEM key or certificate");
      break;
    }
  }
  close(fd);
  SLUICE_RETURN_IF_ERROR(st);
  return out;
}

Status WriteAll(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("write " + path, errno);
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

// Writes `content` to a temporary file, syncs it, then hard-links it to `path`. link() fails
// with EEXIST instead of replacing, so a file someone else put there first is never clobbered
// (AlreadyExists tells the caller to load theirs), and readers never see a partial file.
Status WriteNewFile(const std::string& dir, const std::string& path, std::string_view content,
                    mode_t mode) {
  std::string tmp = path + ".tmp-" + RandomHex(8);
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) return ErrnoStatus("create " + tmp, errno);
  Status st = WriteAll(fd, content, tmp);
  // Exact mode regardless of the umask (0644 for a certificate is meant to be shareable).
  if (st.ok() && fchmod(fd, mode) != 0) st = ErrnoStatus("chmod " + tmp, errno);
  if (st.ok() && fsync(fd) != 0) st = ErrnoStatus("fsync " + tmp, errno);
  close(fd);
  if (st.ok() && link(tmp.c_str(), path.c_str()) != 0) st = ErrnoStatus("link " + path, errno);
  unlink(tmp.c_str());
  SLUICE_RETURN_IF_ERROR(st);
  // The new directory entry must survive a power cut too, or a restart would mint a new key.
  int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return Status::Ok();
}

// Checks a loaded pair, naming the file at fault.
Status CheckLoaded(const SigningIdentity& id, const std::string& key_path,
                   const std::string& cert_path) {
  Pkey key = ParseKey(id.key_pem);
  if (!key) {
    return Status::FailedPrecondition("audit signing key " + key_path +
                                      " is not a readable PEM private key (restore it from a "
                                      "backup; it is never regenerated over an existing file)");
  }
  Cert cert = ParseCert(id.cert_pem);
  if (!cert) {
    return Status::FailedPrecondition("audit signing certificate " + cert_path +
                                      " is not a readable PEM certificate");
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return Status::FailedPrecondition("audit signing key " + key_path +
                                      " does not match the certificate " + cert_path);
  }
  // Signatures by an expired certificate do not verify; better to refuse at startup.
  if (X509_cmp_current_time(X509_get0_notAfter(cert.get())) <= 0) {
    return Status::FailedPrecondition("audit signing certificate " + cert_path +
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
  Bio out(BIO_new(BIO_s_mem()));
  if (!out ||
      PEM_write_bio_PrivateKey(out.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return Status::Internal("encoding key: " + OpenSslError());
  }
  SigningIdentity id;
  SLUICE_ASSIGN_OR_RETURN(id.key_pem, BioContents(out.get()));
  SLUICE_ASSIGN_OR_RETURN(id.cert_pem, IssueCertificate(key.get(), common_name));
  return id;
}

Result<SigningIdentity> LoadOrCreateSigningIdentity(const std::string& dir,
                                                    std::string_view common_name) {
  SLUICE_RETURN_IF_ERROR(CheckCommonName(common_name));
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::FailedPrecondition("signing key directory " + dir + " is not a directory");
  }
  const std::string key_path = dir + "/" + std::string(kSigningKeyFile);
  const std::string cert_path = dir + "/" + std::string(kSigningCertFile);

  // A few rounds: when a concurrent first start wins a race, load what it wrote.
  for (int attempt = 0; attempt < 3; ++attempt) {
    Result<std::string> key = ReadSmallFile(key_path);
    Result<std::string> cert = ReadSmallFile(cert_path);
    if (!key.ok() && key.status().code() != StatusCode::kNotFound) return key.status();
    if (!cert.ok() && cert.status().code() != StatusCode::kNotFound) return cert.status();

    if (key.ok() && cert.ok()) {
      SigningIdentity id{std::move(*key), std::move(*cert)};
      SLUICE_RETURN_IF_ERROR(CheckLoaded(id, key_path, cert_path));
      return id;
    }
    if (!key.ok() && cert.ok()) {
      // Users may already pin this certificate; a new key could never match it.
      return Status::FailedPrecondition(
          "audit signing certificate " + cert_path + " exists but its key " + key_path +
          " is missing; restore the key, or move the certificate away to create a new identity");
    }
    Status written;
    if (key.ok()) {
      // Key without certificate: a first start that stopped between its two writes. Nobody
      // can have pinned a certificate that was never written, so issue one for this key.
      Pkey pkey = ParseKey(*key);
      if (!pkey) {
        return Status::FailedPrecondition("audit signing key " + key_path +
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
  return Status::Internal("audit signing files in " + dir + " keep changing while being loaded");
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
  unsigned char* der = nullptr;
  int n = i2d_X509(cert.get(), &der);
  if (n <= 0) return Status::Internal("encoding certificate: " + OpenSslError());
  std::string hex = Sha256Hex(std::string_view(reinterpret_cast<char*>(der), n));
  OPENSSL_free(der);
  return hex;
}

}  // namespace sluice
