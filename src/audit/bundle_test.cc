#include "audit/bundle.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "audit/cms.h"
#include "common/crypto.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using Files = std::vector<std::pair<std::string, std::string>>;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "sluice_bundle_XXXXXX").string();
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

void WriteFile(const std::string& p, std::string_view content) {
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(content.data(), content.size());
}

std::string ReadFile(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together, for failure messages
};

// Runs argv[0] (looked up in PATH) in `cwd` without a shell, so no path needs quoting.
RunResult RunTool(const std::vector<std::string>& argv, const std::string& cwd) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int fds[2];
  if (pipe(fds) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    if (chdir(cwd.c_str()) != 0) _exit(126);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  RunResult r;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) r.output.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
  }
  return r;
}

SigningIdentity NewIdentity() {
  Result<SigningIdentity> id = CreateSigningIdentity("sluice audit test");
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  return id.ok() ? *id : SigningIdentity{};
}

const Files kFiles = {
    {"job.json", R"({"id":"j-1","exit_code":0})"},
    {"agent-facts.json", R"({"gpus":[{"uuid":"GPU-1"}]})"},
    {"stdout.log", std::string("line\r\nbinary \0\xff tail\n", 21)},
    {"empty.txt", ""},
};

std::string MustWrite(const Files& files, const SigningIdentity& id) {
  Result<std::string> zip = WriteBundle(files, id);
  EXPECT_TRUE(zip.ok()) << zip.status().ToString();
  return zip.ok() ? *zip : std::string();
}

ZipEntries MustRead(std::string_view zip) {
  Result<ZipEntries> e = ReadZip(zip);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? *e : ZipEntries{};
}

std::string MustZip(const ZipEntries& entries) {
  Result<std::string> zip = WriteZip(entries);
  EXPECT_TRUE(zip.ok()) << zip.status().ToString();
  return zip.ok() ? *zip : std::string();
}

BundleReport MustVerify(std::string_view zip, std::string_view cert) {
  Result<BundleReport> r = VerifyBundle(zip, cert);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : BundleReport{};
}

BundleFileStatus StatusOf(const BundleReport& r, std::string_view name) {
  for (const auto& f : r.files) {
    if (f.name == name) return f.status;
  }
  ADD_FAILURE() << "no report for " << name;
  return BundleFileStatus::kOk;
}

// --- writing and verifying ----------------------------------------------------------------------

TEST(BundleTest, RoundTrip) {
  SigningIdentity id = NewIdentity();
  std::string zip = MustWrite(kFiles, id);

  ZipEntries entries = MustRead(zip);
  std::vector<std::string> names;
  for (const auto& e : entries) names.push_back(e.first);
  EXPECT_EQ(names, (std::vector<std::string>{"agent-facts.json", "empty.txt", "job.json",
                                             "stdout.log", "manifest.sha256", "signature.p7s"}));

  // The manifest is exactly sha256sum's format, sorted by name.
  std::string expected_manifest;
  for (const auto& n : {"agent-facts.json", "empty.txt", "job.json", "stdout.log"}) {
    auto it = std::find_if(kFiles.begin(), kFiles.end(), [&](auto& f) { return f.first == n; });
    expected_manifest += Sha256Hex(it->second) + "  " + n + "\n";
  }
  EXPECT_EQ(entries[4].second, expected_manifest);
  EXPECT_TRUE(VerifyDetached(id.cert_pem, entries[4].second, entries[5].second).ok());

  BundleReport report = MustVerify(zip, id.cert_pem);
  EXPECT_TRUE(report.ok) << report.failure;
  EXPECT_TRUE(report.signature_ok);
  EXPECT_EQ(report.failure, "");
  ASSERT_EQ(report.files.size(), 4u);
  for (const auto& f : report.files) EXPECT_EQ(f.status, BundleFileStatus::kOk) << f.name;
  EXPECT_EQ(report.files[0].name, "agent-facts.json");

  Result<std::map<std::string, std::string>> files = ReadBundleFiles(zip);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(files->size(), 6u);
  for (const auto& [name, content] : kFiles) EXPECT_EQ(files->at(name), content) << name;
  EXPECT_EQ(files->at("manifest.sha256"), expected_manifest);
}

TEST(BundleTest, SameInputsGiveSameBytesExceptTheSignature) {
  SigningIdentity id = NewIdentity();
  Files reversed(kFiles.rbegin(), kFiles.rend());
  ZipEntries a = MustRead(MustWrite(kFiles, id));
  ZipEntries b = MustRead(MustWrite(reversed, id));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i + 1 < a.size(); ++i) EXPECT_EQ(a[i], b[i]);
  // The zip writer itself is deterministic, so the bytes differ only through the signature.
  std::string zip = MustWrite(kFiles, id);
  EXPECT_EQ(MustZip(MustRead(zip)), zip);
}

TEST(BundleTest, FlippingOneByteOfAnyFileIsDetected) {
  SigningIdentity id = NewIdentity();
  ZipEntries entries = MustRead(MustWrite(kFiles, id));
  // Rebuilt untouched, it still verifies: the rebuild itself changes nothing that matters.
  ASSERT_TRUE(MustVerify(MustZip(entries), id.cert_pem).ok);

  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string& name = entries[i].first;
    std::string content = entries[i].second;
    if (content.empty()) content = "x";  // an empty file "changes" by gaining a byte
    std::vector<size_t> positions = {0, content.size() / 2, content.size() - 1};
    for (size_t pos : positions) {
      ZipEntries changed = entries;
      changed[i].second = content;
      if (!entries[i].second.empty()) changed[i].second[pos] ^= 0x20;
      BundleReport r = MustVerify(MustZip(changed), id.cert_pem);
      EXPECT_FALSE(r.ok) << name << " byte " << pos;
      EXPECT_FALSE(r.failure.empty()) << name;
      if (name == kBundleManifestName || name == kBundleSignatureName) {
        EXPECT_FALSE(r.signature_ok) << name << " byte " << pos;
      } else {
        EXPECT_TRUE(r.signature_ok) << name;
        EXPECT_EQ(StatusOf(r, name), BundleFileStatus::kModified) << name;
        EXPECT_NE(r.failure.find(name), std::string::npos) << r.failure;
      }
    }
  }
}

TEST(BundleTest, WrongCertificateFailsTheSignature) {
  SigningIdentity id = NewIdentity(), other = NewIdentity();
  BundleReport r = MustVerify(MustWrite(kFiles, id), other.cert_pem);
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(r.signature_ok);
  EXPECT_NE(r.failure.find("signature.p7s"), std::string::npos) << r.failure;
}

TEST(BundleTest, ReSignedWithAnotherKeyFails) {
  // An attacker who changes a file and writes a fresh, self-consistent bundle with their own key.
  SigningIdentity id = NewIdentity(), attacker = NewIdentity();
  Files forged = kFiles;
  forged[0].second = R"({"id":"j-1","exit_code":1})";
  BundleReport r = MustVerify(MustWrite(forged, attacker), id.cert_pem);
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(r.signature_ok);
}

TEST(BundleTest, MissingUnlistedAndDuplicateFiles) {
  SigningIdentity id = NewIdentity();
  ZipEntries entries = MustRead(MustWrite(kFiles, id));
  auto without = [&](std::string_view name) {
    ZipEntries e;
    for (const auto& x : entries) {
      if (x.first != name) e.push_back(x);
    }
    return e;
  };

  BundleReport missing = MustVerify(MustZip(without("job.json")), id.cert_pem);
  EXPECT_FALSE(missing.ok);
  EXPECT_TRUE(missing.signature_ok);
  EXPECT_EQ(StatusOf(missing, "job.json"), BundleFileStatus::kMissing);
  EXPECT_EQ(StatusOf(missing, "stdout.log"), BundleFileStatus::kOk);
  EXPECT_EQ(BundleFileStatusName(StatusOf(missing, "job.json")), "MISSING");

  ZipEntries extra = entries;
  extra.insert(extra.begin(), {"extra.txt", "sneaked in"});
  BundleReport unlisted = MustVerify(MustZip(extra), id.cert_pem);
  EXPECT_FALSE(unlisted.ok);
  EXPECT_EQ(StatusOf(unlisted, "extra.txt"), BundleFileStatus::kUnlisted);

  ZipEntries dup = entries;
  dup.push_back({"job.json", "second copy"});
  BundleReport duplicate = MustVerify(MustZip(dup), id.cert_pem);
  EXPECT_FALSE(duplicate.ok);
  EXPECT_EQ(StatusOf(duplicate, "job.json"), BundleFileStatus::kDuplicate);
  // Even an identical second copy is refused: a bundle we wrote never has one.
  dup.back().second = kFiles[0].second;
  EXPECT_FALSE(MustVerify(MustZip(dup), id.cert_pem).ok);

  ZipEntries dup_manifest = entries;
  dup_manifest.push_back(entries[4]);
  EXPECT_FALSE(MustVerify(MustZip(dup_manifest), id.cert_pem).ok);

  BundleReport no_manifest = MustVerify(MustZip(without("manifest.sha256")), id.cert_pem);
  EXPECT_FALSE(no_manifest.ok);
  EXPECT_NE(no_manifest.failure.find("manifest.sha256"), std::string::npos);
  EXPECT_EQ(StatusOf(no_manifest, "job.json"), BundleFileStatus::kUnlisted);

  BundleReport no_signature = MustVerify(MustZip(without("signature.p7s")), id.cert_pem);
  EXPECT_FALSE(no_signature.ok);
  EXPECT_FALSE(no_signature.signature_ok);
  EXPECT_NE(no_signature.failure.find("signature.p7s"), std::string::npos);
}

TEST(BundleTest, HostileNamesAreShownEscaped) {
  SigningIdentity id = NewIdentity();
  ZipEntries entries = MustRead(MustWrite(kFiles, id));
  entries.push_back({"\x1b[2Jevil", "x"});
  BundleReport r = MustVerify(MustZip(entries), id.cert_pem);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(StatusOf(r, "\\x1b[2Jevil"), BundleFileStatus::kUnlisted);
}

TEST(BundleTest, SignedButMalformedManifestFails) {
  // Even a manifest the key really signed must be in the exact format.
  SigningIdentity id = NewIdentity();
  std::string hash = Sha256Hex("a");
  for (const std::string& manifest :
       {hash + "  a", hash + " a\n", hash + "  ../a\n", hash.substr(1) + "  a\n",
        hash + "  b\n" + hash + "  a\n", hash + "  a\n" + hash + "  a\n", std::string(),
        std::string(64, 'A') + "  a\n"}) {
    ZipEntries e = {{"a", "a"}, {"b", "a"}, {"manifest.sha256", manifest}};
    e.push_back({"signature.p7s", *SignDetached(id, manifest)});
    BundleReport r = MustVerify(MustZip(e), id.cert_pem);
    EXPECT_TRUE(r.signature_ok);
    EXPECT_FALSE(r.ok) << manifest;
    EXPECT_NE(r.failure.find("manifest.sha256"), std::string::npos) << r.failure;
  }
}

TEST(BundleTest, BadInputsToWriteBundle) {
  SigningIdentity id = NewIdentity();
  for (const std::string& name :
       {std::string(), std::string("a/b"), std::string(".."), std::string(".hidden"),
        std::string("a b"), std::string("a\\b"), std::string("a\nb"), std::string("caf\xc3\xa9"),
        std::string("manifest.sha256"), std::string("signature.p7s"), std::string(256, 'a')}) {
    Result<std::string> r = WriteBundle({{"ok.txt", "x"}, {name, "x"}}, id);
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << name;
    if (name.size() > 2 && name.size() < 20 && name.find('\n') == std::string::npos &&
        name.find('\\') == std::string::npos && name.find('\xc3') == std::string::npos) {
      EXPECT_NE(r.status().message().find(name), std::string::npos) << r.status().message();
    }
  }
  EXPECT_TRUE(WriteBundle({{"a-b_c.d+e=1@2,3:4~5", "x"}}, id).ok());
  EXPECT_FALSE(WriteBundle({{"a", "x"}, {"a", "y"}}, id).ok());
  EXPECT_FALSE(WriteBundle({}, id).ok());
  EXPECT_FALSE(WriteBundle({{"a", "x"}}, SigningIdentity{}).ok());
}

TEST(BundleTest, ReadBundleFilesRefusesUnsafeNamesAndDuplicates) {
  for (const ZipEntries& e : {ZipEntries{{"../evil", "x"}}, ZipEntries{{"dir/file", "x"}},
                              ZipEntries{{".profile", "x"}}, ZipEntries{{"a", "x"}, {"a", "y"}}}) {
    Result<std::map<std::string, std::string>> r = ReadBundleFiles(MustZip(e));
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << e[0].first;
  }
}

// --- untrusted zips ---------------------------------------------------------------------------

TEST(BundleTest, GarbageIsAnErrorNotACrash) {
  SigningIdentity id = NewIdentity();
  for (const std::string& junk : {std::string(), std::string("garbage"), std::string(4096, '\0'),
                                  std::string("PK\x03\x04") + std::string(100, 'x'),
                                  std::string("PK\x05\x06") + std::string(18, '\xff')}) {
    Result<BundleReport> r = VerifyBundle(junk, id.cert_pem);
    EXPECT_FALSE(r.ok() && r->ok) << junk.size();
    EXPECT_FALSE(ReadBundleFiles(junk).ok());
  }
  EXPECT_EQ(VerifyBundle("", id.cert_pem).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(VerifyBundle("garbage", id.cert_pem).status().code(), StatusCode::kInvalidArgument);

  std::string random;
  for (int i = 0; i < 64; ++i) random += RandomHex(32);
  EXPECT_FALSE(VerifyBundle(random, id.cert_pem).ok());

  // Every truncation of a real bundle fails cleanly.
  std::string zip = MustWrite(kFiles, id);
  for (size_t len = 0; len < zip.size(); len += 7) {
    Result<BundleReport> r = VerifyBundle(zip.substr(0, len), id.cert_pem);
    EXPECT_FALSE(r.ok() && r->ok) << len;
  }
}

TEST(BundleTest, EverySingleByteFlipFailsOrChangesNothing) {
  SigningIdentity id = NewIdentity();
  std::string zip = MustWrite(kFiles, id);
  std::map<std::string, std::string> original = *ReadBundleFiles(zip);
  int passed = 0;
  for (size_t i = 0; i < zip.size(); ++i) {
    std::string bad = zip;
    bad[i] ^= 0x01;
    Result<BundleReport> r = VerifyBundle(bad, id.cert_pem);
    if (r.ok() && r->ok) {
      // Only bytes that carry no content (timestamps, owner ids, ...) may change unnoticed.
      ++passed;
      Result<std::map<std::string, std::string>> files = ReadBundleFiles(bad);
      ASSERT_TRUE(files.ok()) << i;
      EXPECT_EQ(*files, original) << "byte " << i;
    }
  }
  // Most bytes do matter (names, sizes, checksums, compressed data, the central directory).
  EXPECT_LT(passed, static_cast<int>(zip.size()) / 2);
}

TEST(BundleTest, LimitsStopHugeAndManyEntries) {
  SigningIdentity id = NewIdentity();
  // 64 MiB of zeros deflates to about 64 KiB: a small zip that would inflate hugely.
  std::string bomb = MustZip({{"zeros.bin", std::string(64u << 20, '\0')}});
  EXPECT_LT(bomb.size(), 1u << 20);
  ZipLimits small;
  small.max_total_bytes = 1u << 20;
  EXPECT_EQ(VerifyBundle(bomb, id.cert_pem, small).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ReadBundleFiles(bomb, small).status().code(), StatusCode::kResourceExhausted);

  ZipEntries many;
  for (int i = 0; i < 20; ++i) many.push_back({"f" + std::to_string(i), "x"});
  ZipLimits few;
  few.max_entries = 10;
  EXPECT_EQ(VerifyBundle(MustZip(many), id.cert_pem, few).status().code(),
            StatusCode::kResourceExhausted);
  few.max_entries = 20;
  EXPECT_TRUE(VerifyBundle(MustZip(many), id.cert_pem, few).ok());
}

// --- by hand, with openssl and sha256sum ------------------------------------------------------

class ByHandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RunResult r = RunTool({"openssl", "version"}, tmp_.path());
    ASSERT_EQ(r.exit_code, 0) << "the openssl command-line tool is needed (./dev.sh installs it)";
    id_ = NewIdentity();
    WriteFile(tmp_ / "cert.pem", id_.cert_pem);
  }

  // Extracts `zip` into a new directory under the temporary one and returns its path.
  std::string Extract(std::string_view zip) {
    std::string dir = tmp_ / ("x" + std::to_string(n_++));
    fs::create_directory(dir);
    Result<std::map<std::string, std::string>> files = ReadBundleFiles(zip);
    EXPECT_TRUE(files.ok()) << files.status().ToString();
    if (files.ok()) {
      for (const auto& [name, content] : *files) WriteFile(dir + "/" + name, content);
    }
    return dir;
  }

  RunResult OpensslVerify(const std::string& dir) {
    return RunTool(
        {"openssl", "cms", "-verify", "-binary", "-inform", "DER", "-in", "signature.p7s",
         "-content", "manifest.sha256", "-CAfile", tmp_ / "cert.pem", "-out", "/dev/null"},
        dir);
  }
  RunResult Sha256sumCheck(const std::string& dir) {
    return RunTool({"sha256sum", "--strict", "-c", "manifest.sha256"}, dir);
  }

  TempDir tmp_;
  SigningIdentity id_;
  int n_ = 0;
};

TEST_F(ByHandTest, UntouchedBundleChecksOutAndAnyChangedFileDoesNot) {
  ZipEntries entries = MustRead(MustWrite(kFiles, id_));
  std::string dir = Extract(MustZip(entries));
  RunResult ossl = OpensslVerify(dir);
  EXPECT_EQ(ossl.exit_code, 0) << ossl.output;
  RunResult sums = Sha256sumCheck(dir);
  EXPECT_EQ(sums.exit_code, 0) << sums.output;

  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string& name = entries[i].first;
    ZipEntries changed = entries;
    if (changed[i].second.empty()) {
      changed[i].second = "x";
    } else {
      changed[i].second[changed[i].second.size() / 2] ^= 0x20;
    }
    std::string d = Extract(MustZip(changed));
    int o = OpensslVerify(d).exit_code, s = Sha256sumCheck(d).exit_code;
    if (name == kBundleManifestName || name == kBundleSignatureName) {
      EXPECT_NE(o, 0) << name;
    } else {
      EXPECT_EQ(o, 0) << name;
      EXPECT_NE(s, 0) << name;
    }
  }
}

TEST_F(ByHandTest, OtherKeysBundleFailsOpenssl) {
  SigningIdentity other = NewIdentity();
  std::string dir = Extract(MustWrite(kFiles, other));
  EXPECT_NE(OpensslVerify(dir).exit_code, 0);
  EXPECT_EQ(Sha256sumCheck(dir).exit_code, 0);  // sums alone prove nothing
}

TEST_F(ByHandTest, SignatureMadeByOpensslVerifies) {
  WriteFile(tmp_ / "key.pem", id_.key_pem);
  WriteFile(tmp_ / "data", "some data\n");
  RunResult r =
      RunTool({"openssl", "cms", "-sign", "-binary", "-nosmimecap", "-md", "sha256", "-outform",
               "DER", "-signer", "cert.pem", "-inkey", "key.pem", "-in", "data", "-out", "sig.der"},
              tmp_.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string sig = ReadFile(tmp_ / "sig.der");
  Status st = VerifyDetached(id_.cert_pem, "some data\n", sig);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_FALSE(VerifyDetached(id_.cert_pem, "some data", sig).ok());
}

TEST_F(ByHandTest, CertificateIssuedByThePinnedOneIsNotThePinnedOne) {
  // OpenSSL's chain check alone would accept a signer certified by the pinned certificate;
  // VerifyDetached demands the pinned certificate itself.
  WriteFile(tmp_ / "key.pem", id_.key_pem);
  WriteFile(tmp_ / "data", "data");
  for (const std::vector<std::string>& cmd :
       {std::vector<std::string>{"openssl", "req", "-new", "-newkey", "ec", "-pkeyopt",
                                 "ec_paramgen_curve:P-256", "-nodes", "-keyout", "leaf.key",
                                 "-subj", "/CN=leaf", "-out", "leaf.csr"},
        std::vector<std::string>{"openssl", "x509", "-req", "-in", "leaf.csr", "-CA", "cert.pem",
                                 "-CAkey", "key.pem", "-days", "30", "-out", "leaf.pem"},
        std::vector<std::string>{"openssl", "cms", "-sign", "-binary", "-md", "sha256", "-outform",
                                 "DER", "-signer", "leaf.pem", "-inkey", "leaf.key", "-in", "data",
                                 "-out", "leaf.sig"}}) {
    RunResult r = RunTool(cmd, tmp_.path());
    ASSERT_EQ(r.exit_code, 0) << cmd[1] << ": " << r.output;
  }
  Status st = VerifyDetached(id_.cert_pem, "data", ReadFile(tmp_ / "leaf.sig"));
  EXPECT_EQ(st.code(), StatusCode::kUnauthenticated) << st.ToString();
}

TEST_F(ByHandTest, OperatorsOwnRsaKeyIsLoadedAndSigns) {
  std::string dir = tmp_ / "operator";
  fs::create_directory(dir);
  RunResult r = RunTool({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                         std::string(kSigningKeyFile), "-out", std::string(kSigningCertFile),
                         "-subj", "/CN=operator", "-days", "30"},
                        dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Result<SigningIdentity> id = LoadOrCreateSigningIdentity(dir, "unused");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->cert_pem, ReadFile(dir + "/" + std::string(kSigningCertFile)));
  std::string zip = MustWrite(kFiles, *id);
  BundleReport report = MustVerify(zip, id->cert_pem);
  EXPECT_TRUE(report.ok) << report.failure;
  EXPECT_FALSE(MustVerify(zip, id_.cert_pem).ok);
}

TEST_F(ByHandTest, FingerprintMatchesOpenssl) {
  RunResult r = RunTool({"openssl", "x509", "-in", "cert.pem", "-noout", "-fingerprint", "-sha256"},
                        tmp_.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string hex;
  for (char c : r.output.substr(r.output.find('=') + 1)) {
    if (isxdigit(static_cast<unsigned char>(c))) hex += static_cast<char>(tolower(c));
  }
  EXPECT_EQ(hex, *CertificateSha256(id_.cert_pem));
}

TEST_F(ByHandTest, CertificateLooksAsDocumented) {
  RunResult r = RunTool({"openssl", "x509", "-in", "cert.pem", "-noout", "-text"}, tmp_.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("CN = sluice audit test"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("CA:TRUE"), std::string::npos);
  EXPECT_NE(r.output.find("Digital Signature, Certificate Sign"), std::string::npos);
  EXPECT_NE(r.output.find("Subject Key Identifier"), std::string::npos);
  EXPECT_NE(r.output.find("prime256v1"), std::string::npos);
  // Valid for ten years from (about) now.
  RunResult end = RunTool({"openssl", "x509", "-in", "cert.pem", "-noout", "-checkend",
                           std::to_string(9L * 365 * 24 * 3600)},
                          tmp_.path());
  EXPECT_EQ(end.exit_code, 0) << end.output;
  end = RunTool({"openssl", "x509", "-in", "cert.pem", "-noout", "-checkend",
                 std::to_string(11L * 365 * 24 * 3600)},
                tmp_.path());
  EXPECT_NE(end.exit_code, 0) << end.output;
}

}  // namespace
}  // namespace sluice
