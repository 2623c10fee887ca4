// Helpers of the agent runtime (agent_internal.h).
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "agent/agent_internal.h"
#include "gtest/gtest.h"

namespace sluice::agent::internal {
namespace {

ino_t Inode(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

// A warm box binds its directory by inode: after the adoption that inode holds the prepared
// files and carries the agent's name for it.
TEST(AdoptDirectoryTest, ThePreparedFilesMoveIntoTheBoxDirWhichTakesTheirName) {
  const fs::path root = fs::temp_directory_path() / ("adopt-" + std::to_string(getpid()));
  fs::remove_all(root);
  const std::string prepared = (root / "work/att-1").string();
  const std::string box = (root / "work/warm-1").string();
  fs::create_directories(prepared + "/sub");
  fs::create_directories(box);
  std::ofstream(prepared + "/train.py") << "print(1)\n";
  std::ofstream(prepared + "/sub/data") << "x";
  const ino_t box_inode = Inode(box);
  ASSERT_NE(box_inode, 0u);
  ASSERT_TRUE(AdoptDirectory(prepared, box).ok());
  EXPECT_FALSE(fs::exists(box));
  EXPECT_EQ(Inode(prepared), box_inode);
  EXPECT_TRUE(fs::exists(prepared + "/train.py"));
  EXPECT_TRUE(fs::exists(prepared + "/sub/data"));
  // Nothing to adopt into: an error, and the prepared files stay where they were.
  const std::string other = (root / "work/att-2").string();
  fs::create_directories(other);
  std::ofstream(other + "/f") << "y";
  EXPECT_FALSE(AdoptDirectory(other, (root / "work/warm-gone").string()).ok());
  EXPECT_TRUE(fs::exists(other + "/f"));
  fs::remove_all(root);
}

TEST(SafeNameTest, AnIdCanNeverNameAPathOutsideItsDirectory) {
  EXPECT_EQ(SafeName("att-0123abcd"), "att-0123abcd");
  EXPECT_EQ(SafeName("../../etc"), "______etc");
  EXPECT_EQ(SafeName(""), "_");
}

}  // namespace
}  // namespace sluice::agent::internal
