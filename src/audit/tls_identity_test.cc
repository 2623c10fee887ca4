#include "audit/tls_identity.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "audit/signing_key.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

class TlsDir {
 public:
  TlsDir() {
    std::string tmpl = (fs::temp_directory_path() / "sluice_tls_XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TlsDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string tls(std::string_view f) const { return path_ + "/tls/" + std::string(f); }

 private:
  std::string path_;
};

std::string Slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int Mode(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 0777) : -1;
}

// `openssl x509 -text` of a PEM file, to check the extensions as other tools see them.
std::string OpensslText(const std::string& path) {
  std::string cmd = "openssl x509 -noout -text -in '" + path + "' 2>&1";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    pclose(p);
  }
  return out;
}

TEST(TlsIdentityTest, NamesCoverLoopbackAndTheListenHost) {
  auto names = TlsServerNames("10.1.2.3", {"gpu.example.com", "localhost"});
  EXPECT_EQ(names, (std::vector<std::string>{"localhost", "127.0.0.1", "::1", "10.1.2.3",
                                             "gpu.example.com"}));
  auto wildcard = TlsServerNames("0.0.0.0");
  EXPECT_EQ(wildcard.size(), 4u);  // plus this machine's hostname
}

TEST(TlsIdentityTest, CreatesOnceAndReusesWithTheSamePin) {
  TlsDir d;
  auto a = LoadOrCreateTlsIdentity(d.path(), TlsServerNames("127.0.0.1"));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(Mode(d.tls("ca.key")), 0600);
  EXPECT_EQ(Mode(d.tls("server.key")), 0600);
  EXPECT_EQ(Mode(d.tls("ca.crt")), 0644);
  EXPECT_EQ(a->ca_sha256.size(), 64u);
  EXPECT_EQ(*CertificateSha256(Slurp(d.tls("ca.crt"))), a->ca_sha256);
  EXPECT_EQ(*TlsCaSha256(d.path()), a->ca_sha256);
  // The chain is the server certificate, then the CA (pinning clients look for it there).
  EXPECT_EQ(a->cert_chain_pem, Slurp(d.tls("server.crt")) + Slurp(d.tls("ca.crt")));

  std::string text = OpensslText(d.tls("server.crt"));
  EXPECT_NE(text.find("DNS:localhost"), std::string::npos) << text;
  EXPECT_NE(text.find("IP Address:127.0.0.1"), std::string::npos) << text;
  EXPECT_NE(text.find("TLS Web Server Authentication"), std::string::npos) << text;
  EXPECT_NE(text.find("CA:FALSE"), std::string::npos) << text;

  // `openssl verify` agrees that the CA signed the server certificate.
  std::string cmd = "openssl verify -CAfile '" + d.tls("ca.crt") + "' '" + d.tls("server.crt") +
                    "' >/dev/null 2>&1";
  EXPECT_EQ(system(cmd.c_str()), 0);

  std::string cert_before = Slurp(d.tls("server.crt"));
  auto b = LoadOrCreateTlsIdentity(d.path(), TlsServerNames("127.0.0.1"));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->ca_sha256, a->ca_sha256);
  EXPECT_EQ(Slurp(d.tls("server.crt")), cert_before);  // reused, not reissued
}

TEST(TlsIdentityTest, ReissuesTheServerCertificateForANewListenHost) {
  TlsDir d;
  auto a = LoadOrCreateTlsIdentity(d.path(), TlsServerNames("127.0.0.1"));
  ASSERT_TRUE(a.ok());
  std::string before = Slurp(d.tls("server.crt"));
  auto b = LoadOrCreateTlsIdentity(d.path(), TlsServerNames("192.0.2.7", {"gpu.example.com"}));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->ca_sha256, a->ca_sha256);  // same CA: pinned clients keep working
  EXPECT_NE(Slurp(d.tls("server.crt")), before);
  std::string text = OpensslText(d.tls("server.crt"));
  EXPECT_NE(text.find("IP Address:192.0.2.7"), std::string::npos) << text;
  EXPECT_NE(text.find("DNS:gpu.example.com"), std::string::npos) << text;

  // A server certificate that does not match its key is replaced as well.
  std::ofstream(d.tls("server.key"), std::ios::trunc) << CreateSigningIdentity("x")->key_pem;
  auto c = LoadOrCreateTlsIdentity(d.path(), TlsServerNames("192.0.2.7", {"gpu.example.com"}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_NE(Slurp(d.tls("server.crt")), Slurp(d.tls("ca.crt")));
}

TEST(TlsIdentityTest, RefusesBadNamesAndACorruptCa) {
  TlsDir d;
  EXPECT_EQ(LoadOrCreateTlsIdentity(d.path(), {"bad,name"}).status().code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(LoadOrCreateTlsIdentity(d.path(), TlsServerNames("127.0.0.1")).ok());
  std::ofstream(d.tls("ca.key"), std::ios::trunc) << "garbage";
  auto r = LoadOrCreateTlsIdentity(d.path(), TlsServerNames("127.0.0.1"));
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("TLS CA key"), std::string::npos) << r.status().message();
}

TEST(TlsIdentityTest, OperatorFilesPinOnlyAnIncludedRoot) {
  TlsDir d;
  auto gen = LoadOrCreateTlsIdentity(d.path(), TlsServerNames("127.0.0.1"));
  ASSERT_TRUE(gen.ok());
  // The generated chain ends with its (self-signed) CA: pinned.
  auto with_root = LoadTlsIdentityFiles(d.path() + "/tls/../tls/server.crt", d.tls("server.key"));
  ASSERT_TRUE(with_root.ok()) << with_root.status().ToString();
  EXPECT_EQ(with_root->ca_sha256, "");  // server.crt alone: the leaf is not self-signed

  std::string full = d.path() + "/fullchain.pem";
  std::ofstream(full) << gen->cert_chain_pem;
  fs::create_symlink(full, d.path() + "/link.pem");
  auto full_id = LoadTlsIdentityFiles(d.path() + "/link.pem", d.tls("server.key"));
  ASSERT_TRUE(full_id.ok()) << full_id.status().ToString();
  EXPECT_EQ(full_id->ca_sha256, gen->ca_sha256);

  EXPECT_EQ(LoadTlsIdentityFiles(d.path() + "/missing.pem", d.tls("server.key")).status().code(),
            StatusCode::kNotFound);
  auto mismatch = LoadTlsIdentityFiles(full, d.tls("ca.key"));
  EXPECT_EQ(mismatch.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.status().message().find("does not match"), std::string::npos);
}

}  // namespace
}  // namespace sluice
