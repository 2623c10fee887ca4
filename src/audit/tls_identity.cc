#include "audit/tls_identity.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <ctime>
#include <fstream>
#include <sstream>

#include "audit/openssl_util.h"
#include "audit/signing_key.h"
#include "common/crypto.h"

namespace sluice {
namespace {

using ossl::AddExtension;
using ossl::Cert;
using ossl::OpenSslError;
using ossl::ParseCert;
using ossl::ParseKey;
using ossl::Pkey;

constexpr long kServerCertValiditySeconds = 825L * 24 * 3600;
constexpr long kRenewBeforeSeconds = 30L * 24 * 3600;

bool IsIpAddress(const std::string& s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

// A DNS name as it may appear in a subjectAltName (the characters also keep OpenSSL's
// comma-separated config syntax intact).
bool IsDnsName(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '*') {
      return false;
    }
  }
  return true;
}

bool Covers(X509* cert, const std::string& name) {
  int r = IsIpAddress(name) ? X509_check_ip_asc(cert, name.c_str(), 0)
                            : X509_check_host(cert, name.c_str(), name.size(), 0, nullptr);
  ERR_clear_error();
  return r == 1;
}

// Every certificate in a PEM bundle, in order.
std::vector<Cert> ParseCertChain(std::string_view pem) {
  std::vector<Cert> out;
  if (pem.size() > ossl::kMaxPemBytes) return out;
  ossl::Bio bio = ossl::MemBio(pem);
  while (X509* c = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) out.emplace_back(c);
  ERR_clear_error();  // the read past the last certificate "fails"
  return out;
}

// Why an existing server certificate cannot be kept, or "" when it can.
std::string ServerCertProblem(const std::string& key_pem, const std::string& cert_pem,
                              X509* ca_cert, const std::vector<std::string>& names) {
  Pkey key = ParseKey(key_pem);
  Cert cert = ParseCert(cert_pem);
  if (!key || !cert) return "unreadable";
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return "does not match its key";
  }
  EVP_PKEY* ca_key = X509_get0_pubkey(ca_cert);
  if (!ca_key || X509_verify(cert.get(), ca_key) != 1) {
    ERR_clear_error();
    return "not signed by this CA";
  }
  time_t soon = time(nullptr) + kRenewBeforeSeconds;
  if (X509_cmp_time(X509_get0_notAfter(cert.get()), &soon) <= 0) return "expires within 30 days";
  for (const auto& n : names) {
    if (!Covers(cert.get(), n)) return "does not cover " + n;
  }
  return "";
}

Result<SigningIdentity> IssueServerCertificate(const SigningIdentity& ca,
                                               const std::vector<std::string>& names) {
  Pkey ca_key = ParseKey(ca.key_pem);
  Cert ca_cert = ParseCert(ca.cert_pem);
  if (!ca_key || !ca_cert) return Status::Internal("TLS CA does not parse");
  Pkey key(EVP_EC_gen("P-256"));
  if (!key) return Status::Internal("generating EC key: " + OpenSslError());
  std::string cn = names.empty() ? "sluice server" : names.front();
  if (cn.size() > 64) cn = "sluice server";  // X.520's limit; the SANs are what clients check
  SLUICE_ASSIGN_OR_RETURN(Cert cert,
                          ossl::NewCertificate(key.get(), cn, kServerCertValiditySeconds));
  std::string san;
  for (const auto& n : names) {
    san += (san.empty() ? "" : ",") + std::string(IsIpAddress(n) ? "IP:" : "DNS:") + n;
  }
  X509* c = cert.get();
  X509* issuer = ca_cert.get();
  if (X509_set_issuer_name(c, X509_get_subject_name(issuer)) != 1) {
    return Status::Internal("setting certificate issuer: " + OpenSslError());
  }
  SLUICE_RETURN_IF_ERROR(AddExtension(c, issuer, NID_basic_constraints, "critical,CA:FALSE"));
  SLUICE_RETURN_IF_ERROR(AddExtension(c, issuer, NID_key_usage, "critical,digitalSignature"));
  SLUICE_RETURN_IF_ERROR(AddExtension(c, issuer, NID_ext_key_usage, "serverAuth"));
  SLUICE_RETURN_IF_ERROR(AddExtension(c, issuer, NID_subject_key_identifier, "hash"));
  SLUICE_RETURN_IF_ERROR(AddExtension(c, issuer, NID_authority_key_identifier, "keyid:always"));
  if (!san.empty()) {
    SLUICE_RETURN_IF_ERROR(AddExtension(c, issuer, NID_subject_alt_name, san.c_str()));
  }
  if (X509_sign(c, ca_key.get(), EVP_sha256()) <= 0) {
    return Status::Internal("signing the server certificate: " + OpenSslError());
  }
  SigningIdentity out;
  SLUICE_ASSIGN_OR_RETURN(out.key_pem, ossl::KeyPem(key.get()));
  SLUICE_ASSIGN_OR_RETURN(out.cert_pem, ossl::CertPem(c));
  return out;
}

Result<std::string> ReadOperatorFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(std::string(what) + " " + path + " cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().size() > ossl::kMaxPemBytes) {
    return Status::InvalidArgument(std::string(what) + " " + path + " is too large");
  }
  return ss.str();
}

}  // namespace

std::vector<std::string> TlsServerNames(const std::string& listen_host,
                                        const std::vector<std::string>& extra) {
  std::vector<std::string> names = {"localhost", "127.0.0.1", "::1"};
  std::string host = listen_host;
  if (host == "0.0.0.0" || host == "::" || host.empty()) {
    char buf[256] = {};
    host = gethostname(buf, sizeof buf - 1) == 0 ? std::string(buf) : std::string();
  }
  auto add = [&](const std::string& n) {
    if (!n.empty() && std::find(names.begin(), names.end(), n) == names.end()) {
      names.push_back(n);
    }
  };
  add(host);
  for (const auto& e : extra) add(e);
  return names;
}

Result<TlsIdentity> LoadOrCreateTlsIdentity(const std::string& data_dir,
                                            const std::vector<std::string>& names) {
  for (const auto& n : names) {
    if (!IsIpAddress(n) && !IsDnsName(n)) {
      return Status::InvalidArgument("'" + n + "' is neither an IP address nor a DNS name");
    }
  }
  const std::string dir = data_dir + "/" + std::string(kTlsDir);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return ossl::ErrnoStatus("create " + dir, errno);
  }
  SLUICE_ASSIGN_OR_RETURN(
      SigningIdentity ca,
      LoadOrCreateSigningIdentity(dir, "Sluice server CA",
                                  IdentityFiles{kTlsCaKeyFile, kTlsCaCertFile, "TLS CA"}));
  Cert ca_cert = ParseCert(ca.cert_pem);
  if (!ca_cert) return Status::Internal("TLS CA certificate does not parse");

  const std::string key_path = dir + "/" + std::string(kTlsServerKeyFile);
  const std::string cert_path = dir + "/" + std::string(kTlsServerCertFile);
  Result<std::string> key = ossl::ReadSmallFile(key_path);
  Result<std::string> cert = ossl::ReadSmallFile(cert_path);
  if (!key.ok() && key.status().code() != StatusCode::kNotFound) return key.status();
  if (!cert.ok() && cert.status().code() != StatusCode::kNotFound) return cert.status();
  SigningIdentity server;
  if (key.ok() && cert.ok() && ServerCertProblem(*key, *cert, ca_cert.get(), names).empty()) {
    server = {std::move(*key), std::move(*cert)};
  } else {
    // Reissuing is harmless (clients pin the CA, not this certificate), so any doubt about the
    // old one is resolved by replacing it. Key first: a crash in between leaves a mismatch,
    // which the next start repairs the same way.
    SLUICE_ASSIGN_OR_RETURN(server, IssueServerCertificate(ca, names));
    SLUICE_RETURN_IF_ERROR(ossl::ReplaceFile(dir, key_path, server.key_pem, 0600));
    SLUICE_RETURN_IF_ERROR(ossl::ReplaceFile(dir, cert_path, server.cert_pem, 0644));
  }
  TlsIdentity id;
  id.cert_chain_pem = server.cert_pem + ca.cert_pem;
  id.key_pem = std::move(server.key_pem);
  id.ca_sha256 = CertificateSha256(ca_cert.get());
  id.ca_cert_pem = std::move(ca.cert_pem);
  return id;
}

Result<TlsIdentity> LoadTlsIdentityFiles(const std::string& cert_file,
                                         const std::string& key_file) {
  SLUICE_ASSIGN_OR_RETURN(std::string chain_pem, ReadOperatorFile(cert_file, "--tls-cert"));
  SLUICE_ASSIGN_OR_RETURN(std::string key_pem, ReadOperatorFile(key_file, "--tls-key"));
  std::vector<Cert> chain = ParseCertChain(chain_pem);
  if (chain.empty()) {
    return Status::InvalidArgument("--tls-cert " + cert_file + " holds no PEM certificate");
  }
  Pkey key = ParseKey(key_pem);
  if (!key) return Status::InvalidArgument("--tls-key " + key_file + " is not a PEM private key");
  if (X509_check_private_key(chain.front().get(), key.get()) != 1) {
    ERR_clear_error();
    return Status::InvalidArgument("--tls-key " + key_file +
                                   " does not match the first certificate in " + cert_file);
  }
  TlsIdentity id;
  id.cert_chain_pem = std::move(chain_pem);
  id.key_pem = std::move(key_pem);
  X509* top = chain.back().get();
  if (X509_check_issued(top, top) == X509_V_OK) {
    SLUICE_ASSIGN_OR_RETURN(id.ca_cert_pem, ossl::CertPem(top));
    id.ca_sha256 = CertificateSha256(top);
  }
  ERR_clear_error();
  return id;
}

Result<std::string> TlsCaSha256(const std::string& data_dir) {
  const std::string path =
      data_dir + "/" + std::string(kTlsDir) + "/" + std::string(kTlsCaCertFile);
  SLUICE_ASSIGN_OR_RETURN(std::string pem, ossl::ReadSmallFile(path));
  return CertificateSha256(pem);
}

}  // namespace sluice
