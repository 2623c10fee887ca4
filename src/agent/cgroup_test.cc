#include "agent/cgroup.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "agent/process.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Put(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

template <typename T>
T Or(const Result<T>& r, T fallback) {
  return r.ok() ? *r : fallback;
}

// Polls `cond` every 20 ms for up to 5 s; the kernel changes cgroup state asynchronously.
template <typename Cond>
bool WaitFor(Cond cond) {
  for (int i = 0; i < 250; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return cond();
}

// A plain directory laid out like a cgroup v2 root: what the agent writes there is readable.
class FakeV2Test : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("cg-v2-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    Put(root_ / "cgroup.controllers", "cpuset cpu io memory pids\n");
    Put(root_ / "cgroup.subtree_control", "");
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(FakeV2Test, DetectsV2AndEnablesTheControllersForItsChildren) {
  CgroupSupport s = DetectCgroups(root_.string());
  EXPECT_EQ(s.layout, CgroupSupport::Layout::kV2) << s.Describe();
  EXPECT_TRUE(s.memory && s.cpu && s.pids && s.freezer) << s.Describe();
  EXPECT_TRUE(s.usable());
  EXPECT_EQ(Slurp(root_ / "sluice/cgroup.subtree_control"), "+cpu +memory +pids");
}

TEST_F(FakeV2Test, WritesTheAllocationAsLimits) {
  CgroupSupport s = DetectCgroups(root_.string());
  CgroupLimits l;
  l.memory_bytes = 512 << 20;
  l.cpus = 1.5;
  l.max_pids = 100;
  auto cg = AttemptCgroup::Create(s, "att-1", l);
  ASSERT_TRUE(cg.ok()) << cg.status().ToString();
  fs::path d = root_ / "sluice/att-1";
  EXPECT_EQ(Slurp(d / "memory.max"), std::to_string(512 << 20));
  EXPECT_EQ(Slurp(d / "cpu.max"), "150000 100000");
  EXPECT_EQ(Slurp(d / "pids.max"), "100");
  EXPECT_EQ((*cg)->procs_fds().size(), 1u);
  ASSERT_TRUE((*cg)->Freeze().ok());
  EXPECT_EQ(Slurp(d / "cgroup.freeze"), "1");
  ASSERT_TRUE((*cg)->Thaw().ok());
  EXPECT_EQ(Slurp(d / "cgroup.freeze"), "0");
  Put(d / "memory.events", "low 0\nhigh 0\nmax 4\noom 1\noom_kill 0\n");
  EXPECT_FALSE((*cg)->OomKilled().value());
  Put(d / "memory.events", "low 0\nhigh 0\nmax 9\noom 2\noom_kill 1\n");
  EXPECT_TRUE((*cg)->OomKilled().value());
}

TEST_F(FakeV2Test, RefusesNamesThatLeaveItsDirectory) {
  CgroupSupport s = DetectCgroups(root_.string());
  for (const char* bad : {"", "../x", "a/b", ".hidden"}) {
    EXPECT_EQ(AttemptCgroup::Create(s, bad, {}).status().code(), StatusCode::kInvalidArgument)
        << bad;
    // Recovery takes the name from the data dir: no way out of our parent there either.
    EXPECT_EQ(AttemptCgroup::Open(s, bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST_F(FakeV2Test, StaleEmptyAttemptCgroupsAreRemovedAndNothingElse) {
  CgroupSupport s = DetectCgroups(root_.string());
  fs::path parent = root_ / "sluice";
  auto make = [&](const std::string& name, const std::string& procs, bool old) {
    fs::create_directories(parent / name);
    Put(parent / name / "cgroup.procs", procs);
    if (old) {
      fs::last_write_time(parent / name, fs::file_time_type::clock::now() - std::chrono::hours(1));
    }
  };
  make("att-old", "", true);
  make("att-busy", "123\n", true);  // a live job: never touched
  make("att-new", "", false);       // another agent may be about to start a job in it
  make("other", "", true);          // not an attempt's
  EXPECT_EQ(RemoveStaleCgroups(s, 300), 1);
  EXPECT_FALSE(fs::exists(parent / "att-old"));
  EXPECT_TRUE(fs::exists(parent / "att-busy"));
  EXPECT_TRUE(fs::exists(parent / "att-new"));
  EXPECT_TRUE(fs::exists(parent / "other"));
}

// A warm sandbox runs in a cgroup of its own before its job is known; the job's limits come
// with the job. v2 has no rename (EPERM on a real host, found on an H200 machine's cgroup v2):
// the box's processes move into a new cgroup with the job's limits, and the old one goes.
TEST_F(FakeV2Test, AdoptMovesAWarmCgroupsProcessesIntoOneWithTheAttemptsLimits) {
  CgroupSupport s = DetectCgroups(root_.string());
  CgroupLimits warm;
  warm.max_pids = 50;
  ASSERT_TRUE(AttemptCgroup::Create(s, "warm-1", warm).ok());
  const std::string pid = std::to_string(getpid());  // one that exists: the move is not skipped
  Put(root_ / "sluice/warm-1/cgroup.procs", pid + "\n");
  CgroupLimits l;
  l.memory_bytes = 256 << 20;
  l.cpus = 0.5;
  l.max_pids = 70;
  auto cg = AttemptCgroup::Adopt(s, "warm-1", "att-2", l);
  ASSERT_TRUE(cg.ok()) << cg.status().ToString();
  EXPECT_FALSE(fs::exists(root_ / "sluice/warm-1"));
  fs::path d = root_ / "sluice/att-2";
  EXPECT_EQ(Slurp(d / "memory.max"), std::to_string(256 << 20));
  EXPECT_EQ(Slurp(d / "cpu.max"), "50000 100000");
  EXPECT_EQ(Slurp(d / "pids.max"), "70");
  EXPECT_EQ(Slurp(d / "cgroup.procs"), pid);
  EXPECT_FALSE((*cg)->procs_fds().empty());
  // Nothing to adopt, or a name that leaves the directory: refused, nothing renamed.
  EXPECT_FALSE(AttemptCgroup::Adopt(s, "warm-9", "att-3", l).ok());
  EXPECT_EQ(AttemptCgroup::Adopt(s, "att-2", "../x", l).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(fs::exists(d));
}

TEST(CgroupDetectTest, NothingMountedSaysSo) {
  fs::path empty = fs::temp_directory_path() / ("cg-none-" + std::to_string(getpid()));
  fs::create_directories(empty);
  CgroupSupport s = DetectCgroups(empty.string());
  EXPECT_EQ(s.layout, CgroupSupport::Layout::kNone);
  EXPECT_FALSE(s.usable());
  EXPECT_NE(s.Describe().find("neither cgroup v1 nor v2"), std::string::npos) << s.Describe();
  EXPECT_EQ(AttemptCgroup::Create(s, "att", {}).status().code(), StatusCode::kFailedPrecondition);
  fs::remove_all(empty);
}

// The host's real cgroups, where the agent may create them (root on our test machines; the
// machine's layout decides v1 or v2). Skipped, with the reason, elsewhere.
class RealCgroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    support_ = DetectCgroups();
    if (!support_.usable()) GTEST_SKIP() << "cgroups not usable here: " << support_.Describe();
    name_ = "test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  // Runs `script` inside a new cgroup with `limits`; returns its exit.
  ExitInfo Run(const std::string& script, const CgroupLimits& limits) {
    auto cg = AttemptCgroup::Create(support_, name_, limits);
    EXPECT_TRUE(cg.ok()) << cg.status().ToString();
    if (!cg.ok()) return {};
    cg_ = std::move(*cg);
    ProcessSpec spec;
    spec.script = script;
    spec.cwd = "/";
    spec.env = {{"PATH", "/usr/local/bin:/usr/bin:/bin"}};
    spec.join_cgroup_fds = cg_->procs_fds();
    auto p = Process::Start(spec, nullptr, nullptr);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    if (!p.ok()) return {};
    return (*p)->Wait();
  }
  void TearDown() override {
    if (!cg_) return;
    (void)cg_->KillAll();
    EXPECT_TRUE(WaitFor([&] { return cg_->Remove().ok(); }));
  }
  CgroupSupport support_;
  std::string name_;
  std::unique_ptr<AttemptCgroup> cg_;
};

TEST_F(RealCgroupTest, AJobOverItsMemoryIsKilledAndTheOomIsSeen) {
  CgroupLimits l;
  l.memory_bytes = 64 << 20;
  // 256 MiB, touched page by page: far past the limit.
  ExitInfo e = Run("/usr/bin/python3 -c 'b = bytearray(256 << 20); print(len(b))'", l);
  EXPECT_NE(e.exit_code, 0);
  EXPECT_TRUE(Or(cg_->OomKilled(), false)) << e.ToString();
}

TEST_F(RealCgroupTest, AJobWithinItsMemoryIsNotFlagged) {
  CgroupLimits l;
  l.memory_bytes = 256 << 20;
  ExitInfo e = Run("/usr/bin/python3 -c 'b = bytearray(16 << 20)'", l);
  EXPECT_EQ(e.exit_code, 0) << e.ToString();
  EXPECT_FALSE(Or(cg_->OomKilled(), true));
}

TEST_F(RealCgroupTest, ProcessesThatLeaveTheGroupAreStillInsideAndDieWithIt) {
  // setsid leaves the job's process group (what PR_SET_PDEATHSIG and killpg reach), not its
  // cgroup. The script waits until it has left: the group is killed when the script ends.
  fs::path marker = fs::temp_directory_path() / (name_ + ".left");
  fs::remove(marker);
  ExitInfo e = Run("setsid bash -c 'touch " + marker.string() +
                       "; exec sleep 300' < /dev/null > /dev/null 2>&1 &\n"
                       "while [ ! -e " +
                       marker.string() + " ]; do sleep 0.01; done",
                   {});
  fs::remove(marker);
  EXPECT_EQ(e.exit_code, 0);
  auto pids = cg_->Pids();
  ASSERT_TRUE(pids.ok());
  ASSERT_EQ(pids->size(), 1u) << "the escaped sleep";
  ASSERT_TRUE(cg_->KillAll().ok());
  EXPECT_TRUE(WaitFor([&] { return Or(cg_->Pids(), std::vector<int>{1}).empty(); }));
}

TEST_F(RealCgroupTest, AdoptKeepsTheProcessesInsideAndPutsThemUnderTheNewLimits) {
  CgroupLimits warm;
  warm.max_pids = 100;
  const std::string warm_name = name_ + "-warm";
  auto box = AttemptCgroup::Create(support_, warm_name, warm);
  ASSERT_TRUE(box.ok()) << box.status().ToString();
  ProcessSpec spec;
  spec.script = "sleep 30";
  spec.cwd = "/";
  spec.env = {{"PATH", "/usr/bin:/bin"}};
  spec.join_cgroup_fds = (*box)->procs_fds();
  auto p = Process::Start(spec, nullptr, nullptr);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  CgroupLimits l;
  l.memory_bytes = 64 << 20;
  l.max_pids = 20;
  auto cg = AttemptCgroup::Adopt(support_, warm_name, name_, l);
  ASSERT_TRUE(cg.ok()) << cg.status().ToString();
  cg_ = std::move(*cg);
  auto pids = cg_->Pids();
  ASSERT_TRUE(pids.ok()) << pids.status().ToString();
  EXPECT_NE(std::find(pids->begin(), pids->end(), (*p)->pid()), pids->end());
  const std::string limit =
      support_.layout == CgroupSupport::Layout::kV2
          ? Slurp(support_.root + "/sluice/" + name_ + "/memory.max")
          : Slurp(support_.root + "/memory/sluice/" + name_ + "/memory.limit_in_bytes");
  EXPECT_EQ(std::stoll(limit), int64_t{64} << 20);
  (*p)->Kill();
  (*p)->Wait();
}

TEST_F(RealCgroupTest, FreezeStopsTheWholeTreeAndThawResumesIt) {
  // A counter that a frozen tree cannot advance.
  fs::path counter = fs::temp_directory_path() / (name_ + ".count");
  fs::remove(counter);
  // Out of the script's process group (killed when the script ends) once it has counted once.
  ExitInfo e = Run("setsid bash -c 'while :; do echo x >> " + counter.string() +
                       "; sleep 0.01; done' < /dev/null > /dev/null 2>&1 &\n"
                       "while [ ! -s " +
                       counter.string() + " ]; do sleep 0.01; done",
                   {});
  ASSERT_EQ(e.exit_code, 0);
  auto size = [&] {
    std::error_code ec;
    auto n = fs::file_size(counter, ec);
    return ec ? 0 : n;
  };
  WaitFor([&] { return size() >= 10; });
  ASSERT_GE(size(), 10u) << "the counter is not running";
  ASSERT_TRUE(cg_->Freeze().ok());
  ASSERT_TRUE(WaitFor([&] { return Or(cg_->Frozen(), false); }));
  auto before = size();
  std::this_thread::sleep_for(200ms);  // time for it to advance, were it running
  EXPECT_EQ(size(), before);
  ASSERT_TRUE(cg_->Thaw().ok());
  EXPECT_TRUE(WaitFor([&] { return size() > before; }));
  fs::remove(counter);
}

}  // namespace
}  // namespace sluice
