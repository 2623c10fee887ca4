#include "audit/signing_key.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "audit/cms.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

// A fresh temporary directory, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "sluice_signing_XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(std::string_view rel) const { return path_ + "/" + std::string(rel); }

 private:
  std::string path_;
};

void WriteFile(const std::string& p, const std::string& content) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << content;
}

std::string ReadFile(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

mode_t Mode(const std::string& p) {
  struct stat st {};
  EXPECT_EQ(stat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

SigningIdentity NewIdentity(std::string_view cn = "test signer") {
  Result<SigningIdentity> id = CreateSigningIdentity(cn);
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  return id.ok() ? *id : SigningIdentity{};
}

// --- keys -------------------------------------------------------------------------------------

TEST(SigningKeyTest, CreatedOnceThenReloadedIdentically) {
  TempDir dir;
  Result<SigningIdentity> first = LoadOrCreateSigningIdentity(dir.path(), "sluice audit");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_NE(first->key_pem.find("BEGIN PRIVATE KEY"), std::string::npos);
  EXPECT_NE(first->cert_pem.find("BEGIN CERTIFICATE"), std::string::npos);
  EXPECT_EQ(ReadFile(dir / kSigningKeyFile), first->key_pem);
  EXPECT_EQ(ReadFile(dir / kSigningCertFile), first->cert_pem);
  EXPECT_EQ(Mode(dir / kSigningKeyFile), 0600u);
  EXPECT_EQ(Mode(dir / kSigningCertFile), 0644u);
  EXPECT_TRUE(CheckSigningIdentity(*first).ok());

  Result<SigningIdentity> second = LoadOrCreateSigningIdentity(dir.path(), "another name");
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->key_pem, first->key_pem);
  EXPECT_EQ(second->cert_pem, first->cert_pem);

  // No temporary files left behind: exactly the two files.
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    (void)e;
    ++n;
  }
  EXPECT_EQ(n, 2u);
}

TEST(SigningKeyTest, DifferentDirectoriesGetDifferentKeys) {
  TempDir a, b;
  Result<SigningIdentity> ia = LoadOrCreateSigningIdentity(a.path(), "x");
  Result<SigningIdentity> ib = LoadOrCreateSigningIdentity(b.path(), "x");
  ASSERT_TRUE(ia.ok() && ib.ok());
  EXPECT_NE(ia->key_pem, ib->key_pem);
  EXPECT_NE(ia->cert_pem, ib->cert_pem);
}

TEST(SigningKeyTest, CorruptKeyIsAnErrorNamingItAndIsNotReplaced) {
  TempDir dir;
  ASSERT_TRUE(LoadOrCreateSigningIdentity(dir.path(), "x").ok());
  const std::string corrupt = "-----BEGIN PRIVATE KEY-----\nnot base64 at all\n";
  WriteFile(dir / kSigningKeyFile, corrupt);
  Result<SigningIdentity> r = LoadOrCreateSigningIdentity(dir.path(), "x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find(dir / kSigningKeyFile), std::string::npos)
      << r.status().message();
  EXPECT_EQ(ReadFile(dir / kSigningKeyFile), corrupt);
}

TEST(SigningKeyTest, CorruptCertificateIsAnErrorNamingIt) {
  TempDir dir;
  ASSERT_TRUE(LoadOrCreateSigningIdentity(dir.path(), "x").ok());
  WriteFile(dir / kSigningCertFile, "garbage");
  Result<SigningIdentity> r = LoadOrCreateSigningIdentity(dir.path(), "x");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(dir / kSigningCertFile), std::string::npos)
      << r.status().message();
  EXPECT_EQ(ReadFile(dir / kSigningCertFile), "garbage");
}

TEST(SigningKeyTest, MismatchedPairIsAnError) {
  TempDir dir;
  Result<SigningIdentity> orig = LoadOrCreateSigningIdentity(dir.path(), "x");
  ASSERT_TRUE(orig.ok());
  WriteFile(dir / kSigningCertFile, NewIdentity().cert_pem);
  Result<SigningIdentity> r = LoadOrCreateSigningIdentity(dir.path(), "x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("does not match"), std::string::npos) << r.status().message();
  EXPECT_EQ(ReadFile(dir / kSigningKeyFile), orig->key_pem);
}

TEST(SigningKeyTest, CertificateWithoutKeyIsAnErrorAndNothingIsCreated) {
  TempDir dir;
  std::string cert = NewIdentity().cert_pem;
  WriteFile(dir / kSigningCertFile, cert);
  Result<SigningIdentity> r = LoadOrCreateSigningIdentity(dir.path(), "x");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(dir / kSigningKeyFile), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / kSigningKeyFile));
  EXPECT_EQ(ReadFile(dir / kSigningCertFile), cert);
}

TEST(SigningKeyTest, KeyWithoutCertificateGetsOneIssued) {
  TempDir dir;
  SigningIdentity orig = NewIdentity();
  WriteFile(dir / kSigningKeyFile, orig.key_pem);
  Result<SigningIdentity> r = LoadOrCreateSigningIdentity(dir.path(), "x");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->key_pem, orig.key_pem);
  EXPECT_EQ(ReadFile(dir / kSigningCertFile), r->cert_pem);
  EXPECT_TRUE(CheckSigningIdentity(*r).ok());
  Result<SigningIdentity> again = LoadOrCreateSigningIdentity(dir.path(), "x");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->cert_pem, r->cert_pem);
}

TEST(SigningKeyTest, MissingDirectoryAndBadNamesAreErrors) {
  TempDir dir;
  EXPECT_EQ(LoadOrCreateSigningIdentity(dir / "nope", "x").status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(LoadOrCreateSigningIdentity(dir.path(), "").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateSigningIdentity(std::string(65, 'a')).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(dir / kSigningKeyFile));
}

TEST(SigningKeyTest, CheckSigningIdentityRejectsMixedPairs) {
  SigningIdentity a = NewIdentity(), b = NewIdentity();
  EXPECT_TRUE(CheckSigningIdentity(a).ok());
  EXPECT_FALSE(CheckSigningIdentity({a.key_pem, b.cert_pem}).ok());
  EXPECT_FALSE(CheckSigningIdentity({"", a.cert_pem}).ok());
  EXPECT_FALSE(CheckSigningIdentity({a.key_pem, ""}).ok());
}

TEST(SigningKeyTest, CertificateSha256) {
  SigningIdentity a = NewIdentity(), b = NewIdentity();
  Result<std::string> fa = CertificateSha256(a.cert_pem);
  ASSERT_TRUE(fa.ok());
  EXPECT_EQ(fa->size(), 64u);
  EXPECT_NE(*fa, *CertificateSha256(b.cert_pem));
  EXPECT_FALSE(CertificateSha256("nope").ok());
}

// --- CMS signatures ---------------------------------------------------------------------------

// Binary on purpose: CRLF, NUL and high bytes must be signed as they are.
const std::string kData = std::string("line one\r\nline two\n\0\xff\x80 end", 25);

TEST(CmsTest, SignVerifyRoundTrip) {
  SigningIdentity id = NewIdentity();
  Result<std::string> sig = SignDetached(id, kData);
  ASSERT_TRUE(sig.ok()) << sig.status().ToString();
  EXPECT_EQ(static_cast<unsigned char>((*sig)[0]), 0x30);  // DER SEQUENCE
  Status st = VerifyDetached(id.cert_pem, kData, *sig);
  EXPECT_TRUE(st.ok()) << st.ToString();

  // ECDSA is randomised; both signatures verify.
  Result<std::string> sig2 = SignDetached(id, kData);
  ASSERT_TRUE(sig2.ok());
  EXPECT_NE(*sig, *sig2);
  EXPECT_TRUE(VerifyDetached(id.cert_pem, kData, *sig2).ok());

  Result<std::string> empty = SignDetached(id, "");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(VerifyDetached(id.cert_pem, "", *empty).ok());
  EXPECT_FALSE(VerifyDetached(id.cert_pem, "x", *empty).ok());
}

TEST(CmsTest, WrongDataFails) {
  SigningIdentity id = NewIdentity();
  std::string sig = *SignDetached(id, kData);
  for (size_t i = 0; i < kData.size(); ++i) {
    std::string changed = kData;
    changed[i] ^= 0x01;
    EXPECT_EQ(VerifyDetached(id.cert_pem, changed, sig).code(), StatusCode::kUnauthenticated)
        << "byte " << i;
  }
  EXPECT_FALSE(VerifyDetached(id.cert_pem, kData + "x", sig).ok());
  EXPECT_FALSE(VerifyDetached(id.cert_pem, kData.substr(1), sig).ok());
  // Binary mode: a signature over CRLF text does not cover the LF version.
  std::string lf = kData;
  lf.erase(lf.find('\r'), 1);
  EXPECT_FALSE(VerifyDetached(id.cert_pem, lf, sig).ok());
}

TEST(CmsTest, OtherIdentityFailsEvenThoughItEmbedsItsOwnCertificate) {
  SigningIdentity mine = NewIdentity("sluice audit"), other = NewIdentity("sluice audit");
  std::string sig = *SignDetached(other, kData);
  ASSERT_TRUE(VerifyDetached(other.cert_pem, kData, sig).ok());
  Status st = VerifyDetached(mine.cert_pem, kData, sig);
  EXPECT_EQ(st.code(), StatusCode::kUnauthenticated) << st.ToString();
}

TEST(CmsTest, TruncatedOrCorruptSignatureFails) {
  SigningIdentity id = NewIdentity();
  std::string sig = *SignDetached(id, kData);
  for (size_t len : {size_t{0}, size_t{1}, size_t{2}, sig.size() / 2, sig.size() - 1}) {
    EXPECT_FALSE(VerifyDetached(id.cert_pem, kData, sig.substr(0, len)).ok()) << len;
  }
  EXPECT_FALSE(VerifyDetached(id.cert_pem, kData, sig + std::string(1, '\0')).ok());
  EXPECT_EQ(VerifyDetached(id.cert_pem, kData, "garbage").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(VerifyDetached("not a cert", kData, sig).code(), StatusCode::kInvalidArgument);
  // Every single-byte change anywhere in the signature is caught (the embedded certificate,
  // the signed attributes, the signature value, the structure).
  for (size_t i = 0; i < sig.size(); ++i) {
    std::string bad = sig;
    bad[i] ^= 0x01;
    EXPECT_FALSE(VerifyDetached(id.cert_pem, kData, bad).ok()) << "byte " << i;
  }
}

TEST(CmsTest, SigningNeedsAMatchingPair) {
  SigningIdentity a = NewIdentity(), b = NewIdentity();
  EXPECT_EQ(SignDetached({a.key_pem, b.cert_pem}, kData).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SignDetached({"", a.cert_pem}, kData).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice
