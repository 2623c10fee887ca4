#include "common/thread_name.h"

#include <gtest/gtest.h>

#include <thread>

namespace sluice {
namespace {

TEST(ThreadNameTest, AThreadCarriesTheNameItGaveItself) {
  std::string seen;
  std::thread t([&] {
    NameThisThread("sluice-inbox");
    seen = ThisThreadName();
  });
  t.join();
  EXPECT_EQ(seen, "sluice-inbox");
}

TEST(ThreadNameTest, ALongNameIsCutToWhatTheKernelKeeps) {
  std::string seen;
  std::thread t([&] {
    NameThisThread("sluice-a-name-far-too-long");
    seen = ThisThreadName();
  });
  t.join();
  EXPECT_EQ(seen, "sluice-a-name-f");  // 15 bytes
}

TEST(ThreadNameTest, NamingOneThreadLeavesTheOthers) {
  const std::string mine = ThisThreadName();
  std::thread t([] { NameThisThread("sluice-other"); });
  t.join();
  EXPECT_EQ(ThisThreadName(), mine);
}

}  // namespace
}  // namespace sluice
