#include "agent/sandbox.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/process.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;

constexpr int64_t kJobUid = 2100000777;

bool Has(const std::vector<std::string>& argv, std::vector<std::string> seq) {
  return std::search(argv.begin(), argv.end(), seq.begin(), seq.end()) != argv.end();
}

TEST(SandboxArgvTest, BindsOnlyTheGivenGpusAndCoversSecretsUnderBoundDirs) {
  SandboxSupport support;
  support.usable = true;
  support.bwrap = "/usr/bin/bwrap";
  SandboxSpec spec;
  spec.workdir = "/data/work/att-1";
  spec.checkpoint_dir = "/data/checkpoints/job-1";
  spec.gpus = {1};
  spec.host_dev_dir = "/fake/dev";
  // A file and a directory under /etc (bound read-only), and a path the box never shows.
  spec.hidden = {"/etc/hostname", "/etc/apt", "/data"};
  spec.uid = kJobUid;
  auto argv = SandboxArgv(support, spec);
  EXPECT_EQ(argv.front(), "/usr/bin/bwrap");
  EXPECT_TRUE(Has(argv, {"--dev-bind-try", "/fake/dev/nvidia1", "/dev/nvidia1"}));
  EXPECT_TRUE(Has(argv, {"--dev-bind-try", "/fake/dev/nvidiactl", "/dev/nvidiactl"}));
  EXPECT_TRUE(Has(argv, {"--dev-bind-try", "/fake/dev/nvidia-uvm", "/dev/nvidia-uvm"}));
  EXPECT_THAT(argv, Not(Contains("/fake/dev/nvidia0")));
  EXPECT_TRUE(Has(argv, {"--ro-bind", "/dev/null", "/etc/hostname"}));
  EXPECT_TRUE(Has(argv, {"--tmpfs", "/etc/apt"}));
  EXPECT_FALSE(Has(argv, {"--tmpfs", "/data"}));
  EXPECT_FALSE(Has(argv, {"--bind", "/data"}));
  EXPECT_FALSE(Has(argv, {"--ro-bind", "/data"}));
  EXPECT_TRUE(Has(argv, {"--bind", spec.workdir, spec.workdir}));
  EXPECT_TRUE(Has(argv, {"--bind", spec.checkpoint_dir, spec.checkpoint_dir}));
  EXPECT_TRUE(Has(argv, {"--chdir", spec.workdir}));
  EXPECT_TRUE(Has(argv, {"/usr/bin/setpriv", "--reuid", std::to_string(kJobUid)}));
  EXPECT_TRUE(Has(argv, {"--no-new-privs"}));
  // The job's signals come back to their defaults last, just before bash.
  EXPECT_EQ(argv[argv.size() - 2], "/usr/bin/env");

  // A CPU-only job gets no NVIDIA node at all, not even the control ones.
  spec.gpus.clear();
  for (const auto& arg : SandboxArgv(support, spec)) EXPECT_THAT(arg, Not(HasSubstr("nvidia")));
}

// Runs `script` through Process, boxed when `wrapper` is non-empty; stdout and stderr together.
struct Ran {
  ExitInfo exit;
  std::vector<std::string> lines;
  std::string Text() const {
    std::string t;
    for (const auto& l : lines) t += l + "\n";
    return t;
  }
};

Ran RunScript(const std::vector<std::string>& wrapper, const std::string& script,
              std::map<std::string, std::string> env = {}) {
  ProcessSpec spec;
  spec.script = script;
  spec.cwd = "/";
  spec.env = std::move(env);
  spec.env["PATH"] = "/usr/bin:/bin";
  spec.wrapper = wrapper;
  auto mu = std::make_shared<std::mutex>();
  auto lines = std::make_shared<std::vector<std::string>>();
  auto p = Process::Start(
      spec,
      [mu, lines](OutputStream, std::string_view l) {
        std::lock_guard<std::mutex> lock(*mu);
        lines->emplace_back(l);
      },
      nullptr);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  if (!p.ok()) return {};
  Ran r;
  r.exit = (*p)->Wait();
  std::lock_guard<std::mutex> lock(*mu);
  r.lines = *lines;
  return r;
}

// A data dir laid out as an agent's, in a fresh directory: a join token, another job's work dir
// with a secret, and this job's work and checkpoint dirs owned by the job's uid.
class LiveSandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "boxing a job as another uid needs root";
    char tmpl[] = "/tmp/sandbox_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    data_ = root_ + "/agent";
    spec_.workdir = data_ + "/work/att-mine";
    spec_.checkpoint_dir = data_ + "/checkpoints/job-mine";
    other_ = data_ + "/work/att-other";
    token_ = data_ + "/join.token";
    for (const auto& d : {spec_.workdir, spec_.checkpoint_dir, other_}) fs::create_directories(d);
    // World-readable on purpose: the box must hide them, not the permissions.
    std::ofstream(token_) << "sjt_stolen_join_token\n";
    std::ofstream(other_ + "/secret.txt") << "other tenant's weights\n";
    fs::permissions(token_, fs::perms::all);
    fs::permissions(other_ + "/secret.txt", fs::perms::all);
    ASSERT_TRUE(ChownTree(spec_.workdir, kJobUid, kJobUid).ok());
    ASSERT_TRUE(ChownTree(spec_.checkpoint_dir, kJobUid, kJobUid).ok());
    spec_.hidden = {data_, token_};
    spec_.uid = kJobUid;
    support_ = DetectSandbox(true, spec_, [](const std::vector<std::string>& argv) {
      Ran r = RunScript(argv, "true");
      return Result<int>(r.exit.exit_code);
    });
    ASSERT_TRUE(support_.usable) << support_.why_not;
  }
  void TearDown() override {
    std::error_code ec;
    if (!root_.empty()) fs::remove_all(root_, ec);
  }

  std::string root_, data_, other_, token_;
  SandboxSpec spec_;
  SandboxSupport support_;
};

// The attack from issue 11: a job handed the agent's pid, the token file and another job's
// work dir. The same script without the box reads all three, so the test is live.
TEST_F(LiveSandboxTest, ATokenThiefReadsNothingOfTheAgentInTheBoxAndEverythingWithout) {
  const std::string thief =
      "cat /proc/$AGENT_PID/cmdline | tr '\\0' ' '; echo; cat \"$TOKEN\"; "
      "cat \"$OTHER/secret.txt\"; ls /proc | grep -cE '^[0-9]+$' | sed 's/^/pids=/'; "
      "echo uid=$(id -u)";
  std::map<std::string, std::string> env = {
      {"AGENT_PID", std::to_string(getpid())}, {"TOKEN", token_}, {"OTHER", other_}};
  const std::string self = fs::read_symlink("/proc/self/exe").filename().string();

  Ran boxed = RunScript(SandboxArgv(support_, spec_), thief, env);
  EXPECT_THAT(boxed.Text(), Not(HasSubstr("sjt_stolen_join_token")));
  EXPECT_THAT(boxed.Text(), Not(HasSubstr("other tenant's weights")));
  EXPECT_THAT(boxed.Text(), Not(HasSubstr(self)));
  EXPECT_THAT(boxed.Text(), HasSubstr("uid=" + std::to_string(kJobUid)));
  // Its own PID namespace: bwrap's init, bash and the pipeline, nothing of the host.
  bool counted = false;
  for (const auto& l : boxed.lines) {
    if (l.rfind("pids=", 0) == 0) {
      counted = true;
      EXPECT_LE(std::stoi(l.substr(5)), 8) << boxed.Text();
    }
  }
  EXPECT_TRUE(counted) << boxed.Text();

  Ran bare = RunScript({}, thief, env);
  EXPECT_THAT(bare.Text(), HasSubstr("sjt_stolen_join_token"));
  EXPECT_THAT(bare.Text(), HasSubstr("other tenant's weights"));
  EXPECT_THAT(bare.Text(), HasSubstr(self));
}

TEST_F(LiveSandboxTest, TheJobWritesItsOwnDirsAndNothingOfTheSystem) {
  Ran r = RunScript(SandboxArgv(support_, spec_),
                    "set -u; pwd; echo w > out.txt && echo wrote-work; "
                    "echo c > \"$CKPT/state\" && echo wrote-ckpt; "
                    "touch /usr/evil 2>/dev/null || echo usr-readonly; "
                    "touch /etc/evil 2>/dev/null || echo etc-readonly; "
                    "echo t > \"$TMPNAME\" && echo tmp-private; "
                    "python3 -c 'import multiprocessing as m; m.Lock(); print(\"shm-usable\")'; "
                    "cat /etc/shadow >/dev/null 2>&1 || echo no-shadow; "
                    "grep -E '^(NoNewPrivs|CapEff)' /proc/self/status | tr -s '\\t' ' '",
                    {{"CKPT", spec_.checkpoint_dir}, {"TMPNAME", root_ + ".inbox"}});
  EXPECT_EQ(r.exit.exit_code, 0) << r.Text();
  EXPECT_THAT(r.lines, ElementsAre(spec_.workdir, "wrote-work", "wrote-ckpt", "usr-readonly",
                                   "etc-readonly", "tmp-private", "shm-usable", "no-shadow",
                                   "CapEff: 0000000000000000", "NoNewPrivs: 1"));
  EXPECT_TRUE(fs::exists(spec_.workdir + "/out.txt"));
  EXPECT_TRUE(fs::exists(spec_.checkpoint_dir + "/state"));
  EXPECT_FALSE(fs::exists(root_ + ".inbox")) << "the box's /tmp is the host's";
}

// Fake GPU device nodes made with mknod: an attempt given GPU 1 sees GPU 1 and the control
// nodes, not GPUs 0 and 2.
TEST_F(LiveSandboxTest, AnAttemptGivenGpuOneSeesOnlyGpuOnesDeviceNode) {
  const std::string dev = root_ + "/dev";
  fs::create_directories(dev);
  for (const char* n : {"nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm"}) {
    // The character device of /dev/null: harmless, and real enough for bwrap to bind.
    ASSERT_EQ(mknod((dev + "/" + n).c_str(), S_IFCHR | 0666, makedev(1, 3)), 0) << n;
    fs::permissions(dev + "/" + n, fs::perms::owner_read | fs::perms::owner_write |
                                       fs::perms::group_read | fs::perms::group_write |
                                       fs::perms::others_read | fs::perms::others_write);
  }
  spec_.host_dev_dir = dev;
  spec_.gpus = {1};
  Ran r = RunScript(SandboxArgv(support_, spec_),
                    "ls /dev | grep nvidia; echo x > /dev/nvidia1 && "
                    "echo gpu1-usable");
  EXPECT_THAT(r.lines, ElementsAre("nvidia-uvm", "nvidia1", "nvidiactl", "gpu1-usable"));

  spec_.gpus = {};
  Ran cpu = RunScript(SandboxArgv(support_, spec_), "ls /dev | grep -c nvidia || true");
  EXPECT_THAT(cpu.lines, ElementsAre("0"));
}

// bwrap's monitor is in the job's process group: the group's SIGTERM must reach the job, which
// saves and exits, and not kill the monitor (which would SIGKILL the job at once).
TEST_F(LiveSandboxTest, PreemptionsSigtermReachesTheJobAndItsGracePeriodRuns) {
  ProcessSpec spec;
  spec.script =
      "trap 'echo saving; sleep 0.2; echo saved; exit 0' TERM; echo ready; "
      "while true; do sleep 0.05; done";
  spec.cwd = "/";
  spec.env = {{"PATH", "/usr/bin:/bin"}};
  spec.wrapper = SandboxArgv(support_, spec_);
  std::mutex mu;
  std::vector<std::string> lines;
  auto p = Process::Start(
      spec,
      [&](OutputStream, std::string_view l) {
        std::lock_guard<std::mutex> lock(mu);
        lines.emplace_back(l);
      },
      nullptr);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto deadline = std::chrono::steady_clock::now() + 10s;
  auto ready = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return !lines.empty();
  };
  while (!ready() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(ready());
  (*p)->Terminate(10s);
  ExitInfo exit = (*p)->Wait();
  EXPECT_EQ(exit.exit_code, 0) << exit.ToString();
  std::lock_guard<std::mutex> lock(mu);
  // bash reports the loop's `sleep`, which the group's SIGTERM ended, as "Terminated".
  std::erase(lines, "Terminated");
  EXPECT_THAT(lines, ElementsAre("ready", "saving", "saved"));
}

}  // namespace
}  // namespace sluice
