#include "agent/checkpoint_sync.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/crypto.h"
#include "common/json.h"
#include "gtest/gtest.h"
#include "net/http_server.h"

namespace sluice::checkpoint {
namespace {

namespace fs = std::filesystem;

// The server's blob store in memory. Counts what crosses the "wire" and can damage what it holds,
// to test that restores verify.
class FakeTransport : public BlobTransport {
 public:
  Result<std::vector<std::string>> Missing(const std::vector<std::string>& digests) override {
    missing_calls.push_back(digests.size());
    std::vector<std::string> out;
    for (const std::string& d : digests) {
      if (!blobs.count(d)) out.push_back(d);
    }
    return out;
  }
  Status Put(const std::string& digest, std::string bytes) override {
    if (fail_puts_after >= 0 && puts >= fail_puts_after) {
      return Status::Unavailable("connection reset (injected)");
    }
    // Like the server's PutVerified.
    if (Sha256Hex(bytes) != digest) return Status::InvalidArgument("digest mismatch");
    ++puts;
    put_bytes += bytes.size();
    blobs[digest] = std::move(bytes);
    return Status::Ok();
  }
  Result<std::string> Get(const std::string& digest) override {
    ++gets;
    auto it = blobs.find(digest);
    if (it == blobs.end()) return Status::NotFound("no blob " + digest);
    return it->second;
  }

  // Stores bytes as the manifest would be (under their true digest) and returns the digest.
  std::string PutRaw(const std::string& bytes) {
    std::string d = Sha256Hex(bytes);
    blobs[d] = bytes;
    return d;
  }

  std::map<std::string, std::string> blobs;
  int puts = 0;
  uint64_t put_bytes = 0;
  int gets = 0;
  int fail_puts_after = -1;  // >= 0: Put fails once this many have succeeded
  std::vector<size_t> missing_calls;
};

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "sluice_ckpt_XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

void WriteFile(const std::string& p, const std::string& content, fs::perms mode = fs::perms(0644)) {
  fs::create_directories(fs::path(p).parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << content;
  fs::permissions(p, mode);
}

std::string ReadFile(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xFF);
  return s;
}

struct Entry {
  unsigned mode;
  std::string content;
  bool operator==(const Entry&) const = default;
};

// Every entry under dir: regular files with mode and content, anything else flagged.
std::map<std::string, Entry> Snapshot(const std::string& dir) {
  std::map<std::string, Entry> out;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator();
       ++it) {
    std::string rel = fs::relative(it->path(), dir).string();
    auto st = it->symlink_status();
    if (fs::is_directory(st)) continue;
    if (!fs::is_regular_file(st)) {
      out[rel] = Entry{0, "<not a regular file>"};
      continue;
    }
    out[rel] = Entry{static_cast<unsigned>(st.permissions()) & 0777u, ReadFile(it->path())};
  }
  return out;
}

// Names directly in dir (to see leftovers such as ".restore-*" or files written outside).
std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

const size_t kBigSize = 2 * kChunkBytes + 12345;  // three chunks, the last short

// A tree with nesting, an empty file, binary data, modes, and a multi-chunk file.
void MakeTree(const std::string& dir) {
  WriteFile(dir + "/a.txt", "hello\n");
  WriteFile(dir + "/empty", "");
  std::string binary;
  for (int i = 0; i < 4096; ++i) binary.push_back(static_cast<char>(i % 256));
  WriteFile(dir + "/sub/deeper/bin.dat", binary);
  WriteFile(dir + "/sub/run.sh", "#!/bin/sh\necho hi\n", fs::perms(0755));
  WriteFile(dir + "/sub/readonly.txt", "do not touch", fs::perms(0444));
  WriteFile(dir + "/big.bin", RandomBytes(kBigSize, 1));
}

std::string ManifestOf(FakeTransport& t, const std::string& digest) { return t.blobs.at(digest); }

TEST(CheckpointSyncTest, RoundTripPreservesContentsAndModes) {
  TempDir tmp;
  const std::string src = tmp / "src";
  MakeTree(src);
  FakeTransport t;
  auto up = UploadCheckpoint(src, t);
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  EXPECT_EQ(up->files, 6u);
  EXPECT_EQ(up->total_bytes, 6 + 0 + 4096 + 18 + 12 + kBigSize);
  EXPECT_EQ(up->chunks, 4u + 3u);  // one per small non-empty file, three for big.bin
  EXPECT_EQ(up->uploaded_chunks, 7u);
  EXPECT_EQ(up->uploaded_bytes, up->total_bytes);
  EXPECT_TRUE(up->skipped.empty());
  EXPECT_EQ(t.puts, 8);  // seven chunks, then the manifest
  EXPECT_EQ(Sha256Hex(ManifestOf(t, up->manifest_digest)), up->manifest_digest);

  // The manifest is what the header documents.
  auto m = ParseJson(ManifestOf(t, up->manifest_digest));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)["version"], 1);
  EXPECT_EQ((*m)["total_bytes"], up->total_bytes);
  std::vector<std::string> paths;
  for (const auto& f : (*m)["files"]) paths.push_back(f["path"].get<std::string>());
  EXPECT_EQ(paths, (std::vector<std::string>{"a.txt", "big.bin", "empty", "sub/deeper/bin.dat",
                                             "sub/readonly.txt", "sub/run.sh"}));
  EXPECT_EQ((*m)["files"][1]["chunks"].size(), 3u);
  EXPECT_EQ((*m)["files"][2]["chunks"].size(), 0u);
  EXPECT_EQ((*m)["files"][5]["mode"], 0755);

  // Into a directory that does not exist yet (nor does its parent).
  const std::string dst = tmp / "restored/ckpt";
  Status s = RestoreCheckpoint(up->manifest_digest, dst, t);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Snapshot(dst), Snapshot(src));
  EXPECT_EQ(Names(tmp / "restored"), std::vector<std::string>{"ckpt"});  // no temp leftovers

  // Over an existing directory: its old contents are replaced, not merged.
  const std::string existing = tmp / "existing";
  WriteFile(existing + "/stale.txt", "from an older attempt");
  s = RestoreCheckpoint(up->manifest_digest, existing + "/", t);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Snapshot(existing), Snapshot(src));
  EXPECT_EQ(Names(tmp.path()), (std::vector<std::string>{"existing", "restored", "src"}));
}

TEST(CheckpointSyncTest, SameTreeGivesSameDigestAndSendsOnlyTheManifest) {
  TempDir tmp;
  MakeTree(tmp / "src");
  FakeTransport t;
  auto first = UploadCheckpoint(tmp / "src", t);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const int puts = t.puts;
  const uint64_t bytes = t.put_bytes;

  auto second = UploadCheckpoint(tmp / "src", t);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->manifest_digest, first->manifest_digest);
  EXPECT_EQ(second->uploaded_chunks, 0u);
  EXPECT_EQ(second->uploaded_bytes, 0u);
  EXPECT_EQ(second->chunks, first->chunks);
  EXPECT_EQ(t.puts, puts + 1);  // the manifest only
  EXPECT_EQ(t.put_bytes - bytes, ManifestOf(t, first->manifest_digest).size());
}

TEST(CheckpointSyncTest, ChangingOneChunkUploadsOnlyThatChunk) {
  TempDir tmp;
  const std::string src = tmp / "src";
  MakeTree(src);
  FakeTransport t;
  auto first = UploadCheckpoint(src, t);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const int puts = t.puts;

  // Rewrite bytes inside the middle chunk of big.bin; size unchanged.
  std::string big = ReadFile(src + "/big.bin");
  for (size_t i = kChunkBytes + 100; i < kChunkBytes + 200; ++i)
    big[i] = static_cast<char>(~big[i]);
  WriteFile(src + "/big.bin", big);

  auto second = UploadCheckpoint(src, t);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_NE(second->manifest_digest, first->manifest_digest);
  EXPECT_EQ(second->uploaded_chunks, 1u);
  EXPECT_EQ(second->uploaded_bytes, kChunkBytes);
  EXPECT_EQ(t.puts, puts + 2);  // that chunk and the new manifest

  // Both checkpoints stay restorable.
  Status s = RestoreCheckpoint(second->manifest_digest, tmp / "new", t);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(ReadFile(tmp / "new/big.bin"), big);
  s = RestoreCheckpoint(first->manifest_digest, tmp / "old", t);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_NE(ReadFile(tmp / "old/big.bin"), big);
  EXPECT_EQ(ReadFile(tmp / "old/big.bin"), RandomBytes(kBigSize, 1));
}

TEST(CheckpointSyncTest, RepeatedChunksAreSentOnce) {
  TempDir tmp;
  const std::string zeros(3 * kChunkBytes, '\0');
  WriteFile(tmp / "src/zeros1", zeros);
  WriteFile(tmp / "src/zeros2", zeros);
  FakeTransport t;
  auto up = UploadCheckpoint(tmp / "src", t);
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  EXPECT_EQ(up->chunks, 6u);
  EXPECT_EQ(up->uploaded_chunks, 1u);
  EXPECT_EQ(up->uploaded_bytes, kChunkBytes);
  Status s = RestoreCheckpoint(up->manifest_digest, tmp / "dst", t);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Snapshot(tmp / "dst"), Snapshot(tmp / "src"));
}

// Sets up: an uploaded tree, and a target directory holding older contents a failed restore
// must leave alone.
class RestoreFailureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MakeTree(tmp_ / "src");
    auto up = UploadCheckpoint(tmp_ / "src", t_);
    ASSERT_TRUE(up.ok()) << up.status().ToString();
    digest_ = up->manifest_digest;
    target_ = tmp_ / "target";
    WriteFile(target_ + "/model.pt", "previous checkpoint");
    WriteFile(target_ + "/nested/opt.pt", "previous optimizer state");
    before_ = Snapshot(target_);
  }

  // The digest of chunk `i` of the file at `path` in the uploaded manifest.
  std::string ChunkOf(const std::string& path, size_t i) {
    auto m = ParseJson(t_.blobs.at(digest_));
    for (const auto& f : (*m)["files"]) {
      if (f["path"] == path) return f["chunks"][i].get<std::string>();
    }
    ADD_FAILURE() << "no " << path;
    return "";
  }

  void ExpectTargetUntouched() {
    EXPECT_EQ(Snapshot(target_), before_);
    EXPECT_EQ(Names(tmp_.path()), (std::vector<std::string>{"src", "target"}));
  }

  TempDir tmp_;
  FakeTransport t_;
  std::string digest_, target_;
  std::map<std::string, Entry> before_;
};

TEST_F(RestoreFailureTest, CorruptedChunkFailsAndLeavesTargetIntact) {
  std::string& blob = t_.blobs.at(ChunkOf("big.bin", 2));
  blob[blob.size() / 2] ^= 0x01;
  Status s = RestoreCheckpoint(digest_, target_, t_);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("corrupt"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("chunk 2 of big.bin"), std::string::npos) << s.message();
  ExpectTargetUntouched();
}

TEST_F(RestoreFailureTest, TruncatedChunkFailsAndLeavesTargetIntact) {
  std::string& blob = t_.blobs.at(ChunkOf("sub/deeper/bin.dat", 0));
  blob.resize(blob.size() - 1);
  Status s = RestoreCheckpoint(digest_, target_, t_);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("sub/deeper/bin.dat"), std::string::npos) << s.message();
  ExpectTargetUntouched();
}

TEST_F(RestoreFailureTest, MissingChunkFailsCleanly) {
  t_.blobs.erase(ChunkOf("big.bin", 0));
  Status s = RestoreCheckpoint(digest_, target_, t_);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("chunk 0 of big.bin"), std::string::npos) << s.message();
  ExpectTargetUntouched();
}

TEST_F(RestoreFailureTest, ManifestNotMatchingItsDigestFails) {
  std::string& m = t_.blobs.at(digest_);
  m.replace(m.find("a.txt"), 5, "b.txt");  // still valid JSON, different bytes
  Status s = RestoreCheckpoint(digest_, target_, t_);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("manifest"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("corrupt"), std::string::npos) << s.message();
  ExpectTargetUntouched();
}

TEST_F(RestoreFailureTest, MissingManifestFails) {
  t_.blobs.erase(digest_);
  Status s = RestoreCheckpoint(digest_, target_, t_);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  ExpectTargetUntouched();
}

TEST_F(RestoreFailureTest, InvalidDigestIsRejectedBeforeAnyFetch) {
  for (std::string bad :
       {std::string(""), std::string("../etc/passwd"), std::string(64, 'A'), digest_.substr(1)}) {
    Status s = RestoreCheckpoint(bad, target_, t_);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(t_.gets, 0);
  ExpectTargetUntouched();
}

TEST_F(RestoreFailureTest, TargetWithoutANameIsRefused) {
  for (std::string bad : {std::string(""), std::string("/"), std::string("."), target_ + "/..",
                          target_ + "/.", std::string("//")}) {
    Status s = RestoreCheckpoint(digest_, bad, t_);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad << ": " << s.ToString();
  }
  EXPECT_EQ(t_.gets, 0);
  ExpectTargetUntouched();
}

TEST_F(RestoreFailureTest, TargetThatIsAFileIsRefused) {
  WriteFile(tmp_ / "afile", "x");
  Status s = RestoreCheckpoint(digest_, tmp_ / "afile", t_);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_EQ(ReadFile(tmp_ / "afile"), "x");
}

// A manifest with one file entry (content "x") at `path`.
std::string OneFileManifest(FakeTransport& t, const std::string& path) {
  std::string chunk = t.PutRaw("x");
  Json m{{"version", 1},
         {"total_bytes", 1},
         {"files",
          Json::array({Json{
              {"path", path}, {"mode", 0644}, {"size", 1}, {"chunks", Json::array({chunk})}}})}};
  return t.PutRaw(DumpJson(m));
}

TEST_F(RestoreFailureTest, HostilePathsAreRejectedAndNothingIsWrittenOutside) {
  const std::string outside = tmp_ / "escaped";
  for (const std::string& path :
       {std::string("../escaped"), std::string("a/../../escaped"), outside, std::string("/etc/x"),
        std::string("./x"), std::string("a//b"), std::string("a/"), std::string(""),
        std::string("a/\0b", 4)}) {
    std::string d = OneFileManifest(t_, path);
    Status s = RestoreCheckpoint(d, target_, t_);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << path << ": " << s.ToString();
    EXPECT_NE(s.message().find("files[0].path"), std::string::npos) << s.message();
    EXPECT_FALSE(fs::exists(outside));
    EXPECT_FALSE(fs::exists("/etc/x"));
    ExpectTargetUntouched();
  }
}

TEST_F(RestoreFailureTest, MalformedManifestsNameTheField) {
  const std::string chunk = t_.PutRaw("x");
  auto file = [&](Json overrides) {
    Json f{{"path", "a"}, {"mode", 0644}, {"size", 1}, {"chunks", Json::array({chunk})}};
    for (auto& [k, v] : overrides.items()) {
      if (v.is_null())
        f.erase(k);
      else
        f[k] = v;
    }
    return f;
  };
  auto manifest = [&](Json files, int64_t total = 1) {
    return Json{{"version", 1}, {"total_bytes", total}, {"files", files}};
  };
  struct Case {
    Json manifest;
    std::string field;
  };
  std::vector<Case> cases = {
      {Json{{"version", 2}, {"total_bytes", 0}, {"files", Json::array()}}, "version"},
      {Json{{"total_bytes", 0}, {"files", Json::array()}}, "version"},
      {Json{{"version", 1}, {"total_bytes", 0}}, "files"},
      {Json{{"version", 1}, {"total_bytes", 0}, {"files", Json::object()}}, "files"},
      {Json{{"version", 1}, {"total_bytes", 0}, {"files", Json::array()}, {"extra", 1}}, "extra"},
      {manifest(Json::array({file({{"mode", "0644"}})})), "files[0].mode"},
      {manifest(Json::array({file({{"mode", 04755}})})), "files[0].mode"},
      {manifest(Json::array({file({{"size", -1}})})), "files[0].size"},
      {manifest(Json::array({file({{"size", 2}})})), "total_bytes"},
      {manifest(Json::array({file({{"chunks", nullptr}})})), "files[0].chunks"},
      {manifest(Json::array({file({{"chunks", Json::array({chunk, chunk})}})})), "files[0].chunks"},
      {manifest(Json::array({file({{"chunks", Json::array({"nothex"})}})})), "files[0].chunks[0]"},
      {manifest(Json::array({file({{"owner", "root"}})})), "files[0].owner"},
      {manifest(Json::array({file({}), file({})}), 2), "files[1].path"},               // duplicate
      {manifest(Json::array({file({{"path", "b"}}), file({})}), 2), "files[1].path"},  // unsorted
      {manifest(Json::array({file({}), file({{"path", "a/b"}})}), 2), "both a file"},
      {manifest(Json::array({file({})}), 5), "total_bytes"},
      {Json::array(), "object"},
  };
  for (const Case& c : cases) {
    std::string d = t_.PutRaw(DumpJson(c.manifest));
    Status s = RestoreCheckpoint(d, target_, t_);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.manifest.dump() << ": " << s.ToString();
    EXPECT_NE(s.message().find(c.field), std::string::npos)
        << c.manifest.dump() << ": " << s.message();
    ExpectTargetUntouched();
  }
  // Not JSON at all.
  Status s = RestoreCheckpoint(t_.PutRaw("{\"version\": 1,"), target_, t_);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  ExpectTargetUntouched();
}

TEST_F(RestoreFailureTest, ManifestOverTheLimitsIsRefused) {
  Json m{{"version", 1},
         {"total_bytes", kMaxTotalBytes + 1},
         {"files", Json::array({Json{{"path", "a"},
                                     {"mode", 0644},
                                     {"size", kMaxTotalBytes + 1},
                                     {"chunks", Json::array()}}})}};
  Status s = RestoreCheckpoint(t_.PutRaw(DumpJson(m)), target_, t_);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  ExpectTargetUntouched();
}

TEST(CheckpointSyncTest, HalfUploadedCheckpointHasNoManifest) {
  TempDir tmp;
  MakeTree(tmp / "src");
  FakeTransport clean;
  auto full = UploadCheckpoint(tmp / "src", clean);
  ASSERT_TRUE(full.ok()) << full.status().ToString();

  FakeTransport flaky;
  flaky.fail_puts_after = 3;
  auto up = UploadCheckpoint(tmp / "src", flaky);
  EXPECT_EQ(up.status().code(), StatusCode::kUnavailable) << up.status().ToString();
  EXPECT_EQ(flaky.blobs.size(), 3u);
  EXPECT_FALSE(flaky.blobs.count(full->manifest_digest));

  // The retry sends only what the failed attempt did not.
  flaky.fail_puts_after = -1;
  auto retry = UploadCheckpoint(tmp / "src", flaky);
  ASSERT_TRUE(retry.ok()) << retry.status().ToString();
  EXPECT_EQ(retry->manifest_digest, full->manifest_digest);
  EXPECT_EQ(retry->uploaded_chunks, full->uploaded_chunks - 3);
}

TEST(CheckpointSyncTest, MissingIsAskedInBatchesOfAtMostAThousand) {
  TempDir tmp;
  const int kFiles = 2345;
  for (int i = 0; i < kFiles; ++i) {
    WriteFile(tmp / ("src/d" + std::to_string(i % 7) + "/f" + std::to_string(i)),
              "file " + std::to_string(i));
  }
  FakeTransport t;
  auto up = UploadCheckpoint(tmp / "src", t);
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  EXPECT_EQ(up->files, static_cast<size_t>(kFiles));
  EXPECT_EQ(up->uploaded_chunks, static_cast<size_t>(kFiles));
  ASSERT_GE(t.missing_calls.size(), 3u);
  size_t asked = 0;
  for (size_t n : t.missing_calls) {
    EXPECT_LE(n, kMissingBatch);
    asked += n;
  }
  EXPECT_EQ(asked, static_cast<size_t>(kFiles));

  Status s = RestoreCheckpoint(up->manifest_digest, tmp / "dst", t);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Snapshot(tmp / "dst"), Snapshot(tmp / "src"));
}

TEST(CheckpointSyncTest, SymlinksAndSpecialFilesAreSkippedAndReported) {
  TempDir tmp;
  const std::string src = tmp / "src";
  WriteFile(src + "/real.txt", "data");
  WriteFile(tmp / "secret", "outside the checkpoint");
  fs::create_directories(src + "/sub");
  fs::create_symlink("real.txt", src + "/link");
  fs::create_symlink(tmp / "secret", src + "/sub/escape");
  fs::create_directory_symlink(tmp.path(), src + "/dirlink");
  ASSERT_EQ(mkfifo((src + "/fifo").c_str(), 0644), 0);
  FakeTransport t;
  auto up = UploadCheckpoint(src, t);
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  EXPECT_EQ(up->files, 1u);
  EXPECT_EQ(up->skipped, (std::vector<std::string>{"dirlink", "fifo", "link", "sub/escape"}));
  for (const auto& [digest, bytes] : t.blobs) EXPECT_NE(bytes, "outside the checkpoint");

  Status s = RestoreCheckpoint(up->manifest_digest, tmp / "dst", t);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Snapshot(tmp / "dst"), (std::map<std::string, Entry>{{"real.txt", {0644, "data"}}}));
}

TEST(CheckpointSyncTest, EmptyDirectoryRoundTrips) {
  TempDir tmp;
  fs::create_directories(tmp / "src");
  FakeTransport t;
  auto up = UploadCheckpoint(tmp / "src", t);
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  EXPECT_EQ(up->files, 0u);
  EXPECT_EQ(up->chunks, 0u);
  WriteFile(tmp / "dst/old", "old");
  Status s = RestoreCheckpoint(up->manifest_digest, tmp / "dst", t);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(fs::is_directory(tmp / "dst"));
  EXPECT_TRUE(Names(tmp / "dst").empty());
}

TEST(CheckpointSyncTest, UploadOfMissingOrNonDirectoryFails) {
  TempDir tmp;
  FakeTransport t;
  EXPECT_EQ(UploadCheckpoint(tmp / "nope", t).status().code(), StatusCode::kNotFound);
  WriteFile(tmp / "file", "x");
  EXPECT_EQ(UploadCheckpoint(tmp / "file", t).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.puts, 0);
}

TEST(CheckpointSyncTest, RestoreThroughASymlinkReplacesTheDirectoryItPointsTo) {
  TempDir tmp;
  WriteFile(tmp / "src/a", "new");
  FakeTransport t;
  auto up = UploadCheckpoint(tmp / "src", t);
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  WriteFile(tmp / "real/a", "old");
  fs::create_directory_symlink(tmp / "real", tmp / "link");
  Status s = RestoreCheckpoint(up->manifest_digest, tmp / "link", t);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(fs::is_symlink(tmp / "link"));
  EXPECT_EQ(ReadFile(tmp / "real/a"), "new");
}

// A stand-in for the server's blob endpoints (the real ones are tested end to end elsewhere):
// enough to check what HttpBlobTransport sends and how it reads the answers.
class FakeBlobServer {
 public:
  explicit FakeBlobServer(bool has_missing_endpoint) : has_missing_(has_missing_endpoint) {
    server_ = std::make_unique<HttpServer>(
        HttpServerOptions{.body_limit = [](const HttpRequest&) { return size_t{16} << 20; }},
        [this](HttpRequest req, std::shared_ptr<ResponseWriter> w) { w->Send(Handle(req)); },
        nullptr);
    Status s = server_->Start();
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_->port()); }

  std::mutex mu;
  std::map<std::string, std::string> blobs;
  std::vector<std::string> requests;  // "METHOD path"

 private:
  HttpResponse Handle(const HttpRequest& req) {
    std::lock_guard<std::mutex> lock(mu);
    requests.push_back(req.method + " " + req.path);
    auto answer = [](int status, Json body) {
      HttpResponse r;
      r.status = status;
      r.body = DumpJson(body);
      return r;
    };
    if (req.Header("authorization") != "Bearer sekrit") {
      return answer(401, {{"error", {{"code", "UNAUTHENTICATED"}, {"message", "bad token"}}}});
    }
    const std::string prefix = "/v1/blobs/";
    if (req.path == "/v1/blobs/missing" && req.method == "POST" && has_missing_) {
      auto body = ParseJson(req.body);
      Json missing = Json::array();
      for (const auto& d : (*body)["digests"]) {
        if (!blobs.count(d.get<std::string>())) missing.push_back(d);
      }
      return answer(200, {{"missing", missing}});
    }
    if (req.path.rfind(prefix, 0) != 0 || req.path.size() != prefix.size() + 64) {
      return answer(404, {{"error", {{"code", "NOT_FOUND"}, {"message", "no such endpoint"}}}});
    }
    std::string digest = req.path.substr(prefix.size());
    if (req.method == "PUT") {
      if (Sha256Hex(req.body) != digest) {
        return answer(400, {{"error", {{"code", "INVALID_ARGUMENT"}, {"message", "mismatch"}}}});
      }
      blobs[digest] = req.body;
      return answer(201, {{"digest", digest}});
    }
    auto it = blobs.find(digest);
    if (it == blobs.end()) {
      return answer(404, {{"error", {{"code", "NOT_FOUND"}, {"message", "blob not found"}}}});
    }
    HttpResponse r;
    r.content_type = "application/octet-stream";
    r.body = it->second;
    return r;
  }

  const bool has_missing_;
  std::unique_ptr<HttpServer> server_;
};

TEST(HttpBlobTransportTest, UploadsOnlyMissingChunksAndRestoresOverHttp) {
  TempDir tmp;
  MakeTree(tmp / "src");
  FakeBlobServer server(/*has_missing_endpoint=*/true);
  auto t = HttpBlobTransport::Create(server.url(), "sekrit", std::chrono::seconds(10));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto first = UploadCheckpoint(tmp / "src", **t);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->uploaded_chunks, 7u);
  auto second = UploadCheckpoint(tmp / "src", **t);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->uploaded_chunks, 0u);
  Status s = RestoreCheckpoint(first->manifest_digest, tmp / "dst", **t);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Snapshot(tmp / "dst"), Snapshot(tmp / "src"));

  // Errors carry the HTTP status and map to Status codes.
  auto absent = (*t)->Get(std::string(64, '0'));
  EXPECT_EQ(absent.status().code(), StatusCode::kNotFound);
  EXPECT_NE(absent.status().message().find("HTTP 404"), std::string::npos)
      << absent.status().message();
  Status bad = (*t)->Put(std::string(64, '0'), "not those bytes");
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument) << bad.ToString();
  EXPECT_EQ((*t)->Put("../../etc", "x").code(), StatusCode::kInvalidArgument);

  auto wrong_token = HttpBlobTransport::Create(server.url(), "nope", std::chrono::seconds(10));
  ASSERT_TRUE(wrong_token.ok());
  auto denied = UploadCheckpoint(tmp / "src", **wrong_token);
  EXPECT_EQ(denied.status().code(), StatusCode::kUnauthenticated) << denied.status().ToString();
}

TEST(HttpBlobTransportTest, ServerWithoutMissingEndpointGetsEverything) {
  TempDir tmp;
  WriteFile(tmp / "src/a", "aaa");
  WriteFile(tmp / "src/b", "bbb");
  FakeBlobServer server(/*has_missing_endpoint=*/false);
  auto t = HttpBlobTransport::Create(server.url(), "sekrit", std::chrono::seconds(10));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  for (int i = 0; i < 2; ++i) {
    auto up = UploadCheckpoint(tmp / "src", **t);
    ASSERT_TRUE(up.ok()) << up.status().ToString();
    EXPECT_EQ(up->uploaded_chunks, 2u);  // nothing known to be there: sent again
  }
  std::lock_guard<std::mutex> lock(server.mu);
  EXPECT_EQ(server.blobs.size(), 3u);
  EXPECT_EQ(std::count(server.requests.begin(), server.requests.end(), "POST /v1/blobs/missing"),
            2);
}

TEST(HttpBlobTransportTest, BadUrlIsRejected) {
  EXPECT_FALSE(HttpBlobTransport::Create("ftp://x", "t").ok());
}

}  // namespace
}  // namespace sluice::checkpoint
