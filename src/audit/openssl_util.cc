#include "audit/openssl_util.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <system_error>

#include "common/crypto.h"

namespace sluice::ossl {

std::string OpenSslError() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (out.empty()) out = buf;  // the first is the root cause
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

Bio MemBio(std::string_view s) {
  // BIO_new_mem_buf rejects a null pointer even for zero bytes.
  return Bio(BIO_new_mem_buf(s.empty() ? "" : s.data(), static_cast<int>(s.size())));
}

Pkey ParseKey(std::string_view pem) {
  if (pem.size() > kMaxPemBytes) return nullptr;
  Bio bio = MemBio(pem);
  Pkey key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  return key;
}

Cert ParseCert(std::string_view pem) {
  if (pem.size() > kMaxPemBytes) return nullptr;
  Bio bio = MemBio(pem);
  Cert cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  return cert;
}

Result<std::string> BioContents(BIO* bio) {
  char* p = nullptr;
  long n = BIO_get_mem_data(bio, &p);
  if (n < 0 || p == nullptr) return Status::Internal("reading PEM output: " + OpenSslError());
  return std::string(p, static_cast<size_t>(n));
}

Result<std::string> KeyPem(EVP_PKEY* key) {
  Bio out(BIO_new(BIO_s_mem()));
  if (!out ||
      PEM_write_bio_PrivateKey(out.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return Status::Internal("encoding key: " + OpenSslError());
  }
  return BioContents(out.get());
}

Result<std::string> CertPem(X509* cert) {
  Bio out(BIO_new(BIO_s_mem()));
  if (!out || PEM_write_bio_X509(out.get(), cert) != 1) {
    return Status::Internal("encoding certificate: " + OpenSslError());
  }
  return BioContents(out.get());
}

Result<Cert> NewCertificate(EVP_PKEY* key, std::string_view common_name, long validity_seconds) {
  Cert cert(X509_new());
  std::unique_ptr<BIGNUM, decltype(&BN_free)> serial(BN_new(), &BN_free);
  if (!cert || !serial) return Status::Internal("allocating certificate: " + OpenSslError());
  // 127 random bits: unique without coordination, and positive as RFC 5280 requires.
  if (X509_set_version(cert.get(), X509_VERSION_3) != 1 ||
      BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) == nullptr ||
      X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), validity_seconds) == nullptr) {
    return Status::Internal("filling certificate: " + OpenSslError());
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  std::string cn(common_name);
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                                 0) != 1 ||
      X509_set_pubkey(cert.get(), key) != 1) {
    return Status::Internal("setting certificate name: " + OpenSslError());
  }
  return cert;
}

Status AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  std::unique_ptr<X509_EXTENSION, decltype(&X509_EXTENSION_free)> ext(
      X509V3_EXT_conf_nid(nullptr, &ctx, nid, value), &X509_EXTENSION_free);
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) {
    return Status::Internal(std::string("adding certificate extension ") + OBJ_nid2sn(nid) + ": " +
                            OpenSslError());
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

namespace {

Status WriteAll(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("write " + path, errno);
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

// Writes `content` to a fresh temporary file next to `path`, with exactly `mode` (regardless of
// the umask: 0644 for a certificate is meant to be shareable) and synced; returns its name.
Result<std::string> WriteTemp(const std::string& path, std::string_view content, mode_t mode) {
  std::string tmp = path + ".tmp-" + RandomHex(8);
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) return ErrnoStatus("create " + tmp, errno);
  Status st = WriteAll(fd, content, tmp);
  if (st.ok() && fchmod(fd, mode) != 0) st = ErrnoStatus("chmod " + tmp, errno);
  if (st.ok() && fsync(fd) != 0) st = ErrnoStatus("fsync " + tmp, errno);
  close(fd);
  if (!st.ok()) {
    unlink(tmp.c_str());
    return st;
  }
  return tmp;
}

// The new directory entry must survive a power cut too, or a restart would mint a new key.
void SyncDir(const std::string& dir) {
  int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
}

}  // namespace

// link() fails with EEXIST instead of replacing, so a file someone else put there first is
// never clobbered.
Status WriteNewFile(const std::string& dir, const std::string& path, std::string_view content,
                    mode_t mode) {
  SLUICE_ASSIGN_OR_RETURN(std::string tmp, WriteTemp(path, content, mode));
  Status st;
  if (link(tmp.c_str(), path.c_str()) != 0) st = ErrnoStatus("link " + path, errno);
  unlink(tmp.c_str());
  SLUICE_RETURN_IF_ERROR(st);
  SyncDir(dir);
  return Status::Ok();
}

Status ReplaceFile(const std::string& dir, const std::string& path, std::string_view content,
                   mode_t mode) {
  SLUICE_ASSIGN_OR_RETURN(std::string tmp, WriteTemp(path, content, mode));
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    Status st = ErrnoStatus("rename " + tmp + " to " + path, errno);
    unlink(tmp.c_str());
    return st;
  }
  SyncDir(dir);
  return Status::Ok();
}

}  // namespace sluice::ossl
