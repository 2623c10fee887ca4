#include "common/archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMiB = 1024 * 1024;

// A fresh temporary directory, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "sluice_archive_XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  fs::path operator/(const std::string& rel) const { return fs::path(path_) / rel; }

 private:
  std::string path_;
};

void WriteFile(const fs::path& p, const std::string& content) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << content;
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct RawEntry {
  std::string name;
  std::string content;
  mode_t type = AE_IFREG;
  std::string link{};  // symlink target for AE_IFLNK
};

// Builds a tar.gz by hand so tests can hold entries PackDirectory would never produce.
std::string BuildArchive(const std::vector<RawEntry>& entries) {
  std::string out;
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  archive_write_add_filter_gzip(a);
  archive_write_open(
      a, &out, nullptr,
      [](archive*, void* client, const void* buf, size_t len) -> la_ssize_t {
        static_cast<std::string*>(client)->append(static_cast<const char*>(buf), len);
        return static_cast<la_ssize_t>(len);
      },
      nullptr);
  for (const auto& e : entries) {
    archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, e.name.c_str());
    archive_entry_set_filetype(entry, e.type);
    archive_entry_set_perm(entry, 0644);
    if (e.type == AE_IFLNK) archive_entry_set_symlink(entry, e.link.c_str());
    if (e.type == AE_IFREG) archive_entry_set_size(entry, e.content.size());
    archive_write_header(a, entry);
    if (!e.content.empty()) archive_write_data(a, e.content.data(), e.content.size());
    archive_entry_free(entry);
  }
  archive_write_close(a);
  archive_write_free(a);
  return out;
}

std::vector<std::string> ListTree(const std::string& root) {
  std::vector<std::string> out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    out.push_back(fs::relative(it->path(), root).generic_string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void MakeSampleTree(const TempDir& src) {
  WriteFile(src / "train.py", "print('hello')\n");
  WriteFile(src / "run.sh", "#!/bin/sh\necho run\n");
  fs::permissions(src / "run.sh", fs::perms::owner_all | fs::perms::group_read);
  WriteFile(src / "data/nested/deep/file.txt", std::string(100000, 'z'));
  fs::create_directories(src / "empty_dir");
  fs::create_symlink("data/nested", src / "link_to_nested");
  WriteFile(src / (std::string(150, 'L') + ".txt"), "long name forces a pax header");
}

TEST(ArchiveTest, RoundTripKeepsContentModesSymlinksAndNesting) {
  TempDir src, dst;
  MakeSampleTree(src);
  mkfifo((src / "a_fifo").c_str(), 0644);  // skipped, not an error

  auto packed = PackDirectory(src.path(), 10 * kMiB);
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  Status st = UnpackArchive(*packed, dst.path(), 10 * kMiB, 1000);
  ASSERT_TRUE(st.ok()) << st.ToString();

  EXPECT_EQ(ReadFile(dst / "train.py"), "print('hello')\n");
  EXPECT_EQ(ReadFile(dst / "data/nested/deep/file.txt"), std::string(100000, 'z'));
  EXPECT_EQ(ReadFile(dst / (std::string(150, 'L') + ".txt")), "long name forces a pax header");
  EXPECT_TRUE(fs::is_directory(dst / "empty_dir"));
  struct stat sb;
  ASSERT_EQ(stat((dst / "run.sh").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0740u);
  ASSERT_TRUE(fs::is_symlink(dst / "link_to_nested"));
  EXPECT_EQ(fs::read_symlink(dst / "link_to_nested"), "data/nested");
  EXPECT_FALSE(fs::exists(dst / "a_fifo"));
  // Nothing but what was packed (minus the fifo).
  std::vector<std::string> want = ListTree(src.path());
  want.erase(std::find(want.begin(), want.end(), "a_fifo"));
  EXPECT_EQ(ListTree(dst.path()), want);
}

TEST(ArchiveTest, PackingIsDeterministic) {
  TempDir src;
  MakeSampleTree(src);
  auto first = PackDirectory(src.path(), 10 * kMiB);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // Different mtimes must not change the bytes.
  fs::last_write_time(src / "train.py", fs::file_time_type::clock::now() - std::chrono::hours(50));
  fs::last_write_time(src / "data", fs::file_time_type::clock::now() + std::chrono::hours(3));
  auto second = PackDirectory(src.path(), 10 * kMiB);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(*first, *second);
  // gzip MTIME field (bytes 4..7) is zero.
  ASSERT_GT(first->size(), 10u);
  EXPECT_EQ(first->substr(4, 4), std::string(4, '\0'));
}

TEST(ArchiveTest, PackErrors) {
  TempDir src;
  auto missing = PackDirectory(src.path() + "/nope", kMiB);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  WriteFile(src / "f", "x");
  auto not_dir = PackDirectory((src / "f").string(), kMiB);
  EXPECT_EQ(not_dir.status().code(), StatusCode::kInvalidArgument);

  // Incompressible data over the limit.
  std::string noise(300000, '\0');
  uint32_t x = 12345;
  for (char& c : noise) {
    x = x * 1103515245 + 12345;
    c = static_cast<char>(x >> 24);
  }
  WriteFile(src / "noise.bin", noise);
  auto too_big = PackDirectory(src.path(), 100000);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(too_big.status().message().find("100000"), std::string::npos)
      << too_big.status().message();
}

TEST(ArchiveTest, PathTraversalIsRefusedAndWritesNothingOutside) {
  TempDir outer;
  fs::create_directories(outer / "dest");
  std::string dest = (outer / "dest").string();
  for (const std::string& evil :
       {std::string("../evil"), std::string("ok/../../evil"), (outer / "abs_evil").string()}) {
    SCOPED_TRACE(evil);
    std::string data = BuildArchive({{"good.txt", "fine"}, {evil, "pwned"}});
    Status st = UnpackArchive(data, dest, kMiB, 100);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_FALSE(fs::exists(outer / "evil"));
    EXPECT_FALSE(fs::exists(outer / "abs_evil"));
    EXPECT_TRUE(fs::is_empty(dest)) << "partial extraction left behind";
  }
}

TEST(ArchiveTest, WritingThroughSymlinksIsRefused) {
  TempDir outer;
  fs::create_directories(outer / "dest");
  fs::create_directories(outer / "victim");
  std::string dest = (outer / "dest").string();
  // A symlink to a directory outside, then a file "through" it.
  std::string data =
      BuildArchive({{"escape", "", AE_IFLNK, (outer / "victim").string()}, {"escape/x", "pwned"}});
  Status st = UnpackArchive(data, dest, kMiB, 100);
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(fs::exists(outer / "victim/x"));
  EXPECT_TRUE(fs::is_empty(dest));

  // A symlink to a file outside, then a regular file of the same name: the link is replaced,
  // the target is untouched.
  WriteFile(outer / "victim_file", "original");
  data = BuildArchive({{"f", "", AE_IFLNK, (outer / "victim_file").string()}, {"f", "new"}});
  st = UnpackArchive(data, dest, kMiB, 100);
  EXPECT_EQ(ReadFile(outer / "victim_file"), "original") << st.ToString();
}

TEST(ArchiveTest, TruncatedOrCorruptDataIsInvalidArgument) {
  TempDir src, dst;
  MakeSampleTree(src);
  auto packed = PackDirectory(src.path(), 10 * kMiB);
  ASSERT_TRUE(packed.ok());
  // Every cut lands inside the gzip stream: PackDirectory writes no block padding after it.
  for (size_t cut : {packed->size() / 2, packed->size() - 20, packed->size() - 1, size_t{5}}) {
    SCOPED_TRACE(cut);
    Status st =
        UnpackArchive(std::string_view(*packed).substr(0, cut), dst.path(), 10 * kMiB, 1000);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_TRUE(fs::is_empty(dst.path()));
  }
  Status garbage =
      UnpackArchive("this is not an archive at all, not even close........", dst.path(), kMiB, 100);
  EXPECT_EQ(garbage.code(), StatusCode::kInvalidArgument) << garbage.ToString();
}

TEST(ArchiveTest, LimitsAreEnforced) {
  TempDir dst;
  // A zip bomb in miniature: 4 MiB of zeros compresses to a few KiB.
  std::string bomb = BuildArchive({{"zeros", std::string(4 * kMiB, '\0')}});
  ASSERT_LT(bomb.size(), 64 * 1024u);
  Status st = UnpackArchive(bomb, dst.path(), kMiB, 100);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
  EXPECT_TRUE(fs::is_empty(dst.path()));

  std::vector<RawEntry> many;
  for (int i = 0; i < 20; ++i) many.push_back({"f" + std::to_string(i), "x"});
  st = UnpackArchive(BuildArchive(many), dst.path(), kMiB, 10);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
  EXPECT_TRUE(fs::is_empty(dst.path()));
  // Exactly at the limits is fine.
  st = UnpackArchive(BuildArchive(many), dst.path(), 20, 20);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(ListTree(dst.path()).size(), 20u);
}

TEST(ArchiveTest, DestinationMustBeAnEmptyDirectory) {
  TempDir dst;
  std::string data = BuildArchive({{"a", "1"}});
  EXPECT_EQ(UnpackArchive(data, dst.path() + "/missing", kMiB, 10).code(),
            StatusCode::kFailedPrecondition);
  WriteFile(dst / "existing", "keep");
  EXPECT_EQ(UnpackArchive(data, dst.path(), kMiB, 10).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadFile(dst / "existing"), "keep");
}

TEST(ArchiveTest, SetuidBitsAreDropped) {
  TempDir src, dst;
  WriteFile(src / "tool", "#!/bin/sh\n");
  ASSERT_EQ(chmod((src / "tool").c_str(), 04755), 0);
  auto packed = PackDirectory(src.path(), kMiB);
  ASSERT_TRUE(packed.ok());
  ASSERT_TRUE(UnpackArchive(*packed, dst.path(), kMiB, 10).ok());
  struct stat sb;
  ASSERT_EQ(stat((dst / "tool").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 07777, 0755u);
}

}  // namespace
}  // namespace sluice
