#include "agent/process.h"

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;
using namespace std::chrono_literals;

// Collects callback output; thread-safe because callbacks run on the monitor thread.
struct Recorder {
  std::mutex mu;
  std::vector<std::pair<OutputStream, std::string>> lines;
  int exit_calls = 0;
  ExitInfo exit;

  Process::LineCallback OnLine() {
    return [this](OutputStream s, std::string_view line) {
      std::lock_guard<std::mutex> lock(mu);
      lines.emplace_back(s, std::string(line));
    };
  }
  Process::ExitCallback OnExit() {
    return [this](const ExitInfo& e) {
      std::lock_guard<std::mutex> lock(mu);
      ++exit_calls;
      exit = e;
    };
  }
  std::vector<std::string> Stream(OutputStream s) {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<std::string> out;
    for (auto& [st, l] : lines) {
      if (st == s) out.push_back(l);
    }
    return out;
  }
};

ProcessSpec Spec(std::string script) {
  ProcessSpec spec;
  spec.script = std::move(script);
  spec.cwd = "/";
  spec.env = {{"PATH", "/usr/local/bin:/usr/bin:/bin"}};
  return spec;
}

// Polls `cond` until it holds or `timeout` passes; returns whether it held.
template <typename F>
bool WaitFor(F cond, std::chrono::milliseconds timeout = 10s) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return cond();
}

// Gone means no such pid or a zombie: in a container PID 1 may never reap orphans, and a zombie
// holds no resources and runs no code.
bool ProcessGone(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content;
  std::getline(stat, content);
  if (content.empty()) return true;
  size_t paren = content.rfind(')');
  return paren != std::string::npos && paren + 2 < content.size() &&
         (content[paren + 2] == 'Z' || content[paren + 2] == 'X');
}

int CountOpenFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n - 1;  // the DIR's own fd
}

TEST(ProcessTest, StdoutAndStderrArriveAsLinesInOrder) {
  Recorder rec;
  auto p = Process::Start(Spec("echo one; echo err1 >&2; echo two; echo err2 >&2; exit 0"),
                          rec.OnLine(), rec.OnExit());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ExitInfo info = (*p)->Wait();
  EXPECT_EQ(info.exit_code, 0);
  EXPECT_EQ(info.signal, 0);
  EXPECT_THAT(rec.Stream(OutputStream::kStdout), ElementsAre("one", "two"));
  EXPECT_THAT(rec.Stream(OutputStream::kStderr), ElementsAre("err1", "err2"));
  EXPECT_EQ(rec.exit_calls, 1);
  EXPECT_FALSE((*p)->running());
}

TEST(ProcessTest, ExitCodePropagates) {
  Recorder rec;
  auto p = Process::Start(Spec("echo bye; exit 3"), rec.OnLine(), rec.OnExit());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ExitInfo info = (*p)->Wait();
  EXPECT_EQ(info.exit_code, 3);
  EXPECT_EQ(info.signal, 0);
  EXPECT_EQ(info.ToString(), "exit code 3");
  // on_exit comes after the output.
  std::lock_guard<std::mutex> lock(rec.mu);
  EXPECT_EQ(rec.exit_calls, 1);
  EXPECT_EQ(rec.exit.exit_code, 3);
  EXPECT_THAT(rec.lines, ElementsAre(Pair(OutputStream::kStdout, "bye")));
}

TEST(ProcessTest, EnvironmentIsExactlyTheSpecAndCwdIsHonoured) {
  ASSERT_EQ(setenv("SLUICE_TEST_MUST_NOT_LEAK", "1", 1), 0);
  char tmpl[] = "/tmp/sluice_proc_cwd_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  ProcessSpec spec = Spec(
      // /proc/$$/environ is the environment bash was exec'd with, before it adds PWD/SHLVL.
      "/usr/bin/tr '\\0' '\\n' < /proc/$$/environ | /usr/bin/sort; echo \"cwd=$(pwd -P)\"");
  spec.cwd = tmpl;
  spec.env["JOB_ID"] = "j-42";
  spec.env["WITH_SPACE"] = "a b=c";
  Recorder rec;
  auto p = Process::Start(spec, rec.OnLine(), rec.OnExit());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)->Wait().exit_code, 0);
  char real[PATH_MAX];
  ASSERT_NE(realpath(tmpl, real), nullptr);
  EXPECT_THAT(rec.Stream(OutputStream::kStdout),
              ElementsAre("JOB_ID=j-42", "PATH=/usr/local/bin:/usr/bin:/bin", "WITH_SPACE=a b=c",
                          std::string("cwd=") + real));
  rmdir(tmpl);
  unsetenv("SLUICE_TEST_MUST_NOT_LEAK");
}

TEST(ProcessTest, PartialLastLineIsDelivered) {
  Recorder rec;
  auto p = Process::Start(Spec("printf 'full\\npartial'"), rec.OnLine(), rec.OnExit());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  (*p)->Wait();
  EXPECT_THAT(rec.Stream(OutputStream::kStdout), ElementsAre("full", "partial"));
}

TEST(ProcessTest, LongLineIsSplit) {
  Recorder rec;
  // 200 KiB of 'x' then a newline, then a short line.
  auto p = Process::Start(Spec("head -c 204800 /dev/zero | tr '\\0' x; echo; echo tail"),
                          rec.OnLine(), rec.OnExit());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)->Wait().exit_code, 0);
  auto out = rec.Stream(OutputStream::kStdout);
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].size(), kMaxLineBytes);
  EXPECT_EQ(out[1].size(), kMaxLineBytes);
  EXPECT_EQ(out[2].size(), kMaxLineBytes);
  EXPECT_EQ(out[3].size(), 204800 - 3 * kMaxLineBytes);
  EXPECT_EQ(out[0], std::string(kMaxLineBytes, 'x'));
  EXPECT_EQ(out[4], "tail");
}

TEST(ProcessTest, TerminateKillsEveryProcessInTheGroup) {
  Recorder rec;
  auto p = Process::Start(
      Spec("sleep 1000 & echo $!; sleep 1000 & echo $!; (sleep 1000 & echo $!; wait) & "
           "echo ready; wait"),
      rec.OnLine(), rec.OnExit());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_TRUE(WaitFor([&] { return rec.Stream(OutputStream::kStdout).size() >= 4; }));
  std::vector<pid_t> pids;
  for (const auto& line : rec.Stream(OutputStream::kStdout)) {
    if (line != "ready") pids.push_back(static_cast<pid_t>(std::stol(line)));
  }
  ASSERT_EQ(pids.size(), 3u);
  pids.push_back((*p)->pid());
  for (pid_t pid : pids) {
    EXPECT_EQ(getpgid(pid), (*p)->pgid()) << "pid " << pid << " not in the job's group";
  }
  EXPECT_TRUE((*p)->running());

  (*p)->Terminate(5s);
  ExitInfo info = (*p)->Wait();
  EXPECT_NE(info.signal, 0) << info.ToString();
  for (pid_t pid : pids) {
    EXPECT_TRUE(WaitFor([&] { return ProcessGone(pid); })) << "pid " << pid << " survived";
  }
}

TEST(ProcessTest, JobIgnoringSigtermIsKilledAfterGrace) {
  Recorder rec;
  auto p = Process::Start(Spec("trap '' TERM; echo ready; while true; do sleep 0.05; done"),
                          rec.OnLine(), rec.OnExit());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_TRUE(WaitFor([&] { return !rec.Stream(OutputStream::kStdout).empty(); }));
  auto start = std::chrono::steady_clock::now();
  (*p)->Terminate(300ms);  // must not block the caller for the grace period
  EXPECT_LT(std::chrono::steady_clock::now() - start, 200ms);
  ExitInfo info = (*p)->Wait();
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(info.signal, SIGKILL);
  EXPECT_EQ(info.exit_code, 128 + SIGKILL);
  EXPECT_GE(elapsed, 300ms);
  EXPECT_LT(elapsed, 5s);
  EXPECT_EQ(rec.exit_calls, 1);
}

TEST(ProcessTest, StragglersAreKilledWhenTheShellExits) {
  Recorder rec;
  auto p = Process::Start(Spec("sleep 1000 & echo $!"), rec.OnLine(), rec.OnExit());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ((*p)->Wait().exit_code, 0);
  // The backgrounded sleep holds the pipes; killing the group is what lets Wait return.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  auto out = rec.Stream(OutputStream::kStdout);
  ASSERT_EQ(out.size(), 1u);
  pid_t straggler = static_cast<pid_t>(std::stol(out[0]));
  EXPECT_TRUE(WaitFor([&] { return ProcessGone(straggler); }));
}

TEST(ProcessTest, DaemonHoldingPipesDoesNotHang) {
  Recorder rec;
  // setsid leaves the group, so the group SIGKILL cannot reach it, and it keeps stdout open.
  // The shell waits until the daemon really is in its own group (field 5 of stat is pgrp).
  auto p = Process::Start(Spec("setsid sleep 30 & d=$!; echo $d; "
                               "while [ \"$(cut -d' ' -f5 /proc/$d/stat)\" = \"$$\" ]; do "
                               "sleep 0.01; done; echo started"),
                          rec.OnLine(), rec.OnExit());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ((*p)->Wait().exit_code, 0);
  auto elapsed = std::chrono::steady_clock::now() - start;
  // Reading gave up after the drain period instead of waiting 30 s for the daemon.
  EXPECT_GE(elapsed, kDrainAfterKill - 100ms);
  EXPECT_LT(elapsed, kDrainAfterKill + 3s);
  auto out = rec.Stream(OutputStream::kStdout);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1], "started");
  pid_t daemon = static_cast<pid_t>(std::stol(out[0]));
  EXPECT_FALSE(ProcessGone(daemon));  // it really escaped the group
  kill(daemon, SIGKILL);
}

TEST(ProcessTest, MissingCwdIsAnError) {
  ProcessSpec spec = Spec("echo hi");
  spec.cwd = "/nonexistent/sluice/dir";
  bool exited = false;
  auto p = Process::Start(spec, nullptr, [&](const ExitInfo&) { exited = true; });
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(p.status().message(), ::testing::HasSubstr("/nonexistent/sluice/dir"));
  EXPECT_FALSE(exited);
}

TEST(ProcessTest, InvalidEnvNameIsRejected) {
  ProcessSpec spec = Spec("true");
  spec.env["A=B"] = "x";
  auto p = Process::Start(spec, nullptr, nullptr);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
}

TEST(ProcessTest, ManyShortProcessesLeakNoFds) {
  int before = CountOpenFds();
  for (int i = 0; i < 50; ++i) {
    Recorder rec;
    auto p = Process::Start(Spec("echo " + std::to_string(i)), rec.OnLine(), rec.OnExit());
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ((*p)->Wait().exit_code, 0);
    EXPECT_THAT(rec.Stream(OutputStream::kStdout), ElementsAre(std::to_string(i)));
  }
  EXPECT_EQ(CountOpenFds(), before);
}

TEST(ProcessTest, ChildInheritsNoAgentFds) {
  // An fd the agent opened without CLOEXEC must not reach the job.
  int leaked = dup(0);  // dup() never sets CLOEXEC
  ASSERT_GE(leaked, 0);
  Recorder rec;
  auto p =
      Process::Start(Spec("ls /proc/self/fd | sort -n | tr '\\n' ' '"), rec.OnLine(), rec.OnExit());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  (*p)->Wait();
  // ls itself holds one more fd (its directory handle), numbered 3.
  EXPECT_THAT(rec.Stream(OutputStream::kStdout), ElementsAre("0 1 2 3 "));
  close(leaked);
}

TEST(ProcessTest, DestructorKillsRunningJob) {
  pid_t pid;
  {
    auto p = Process::Start(Spec("sleep 1000"), nullptr, nullptr);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    pid = (*p)->pid();
    EXPECT_TRUE((*p)->running());
  }
  EXPECT_TRUE(WaitFor([&] { return ProcessGone(pid); }));
}

TEST(KillProcessGroupTest, RefusesDangerousGroupsAndReportsMissingOnes) {
  EXPECT_EQ(KillProcessGroup(0, SIGTERM).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(KillProcessGroup(1, SIGTERM).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(KillProcessGroup(-5, SIGTERM).code(), StatusCode::kInvalidArgument);
  // A pgid far above pid_max cannot exist.
  EXPECT_EQ(KillProcessGroup(0x3fffffff, SIGTERM).code(), StatusCode::kNotFound);
}

TEST(KillProcessGroupTest, KillsALeftoverGroup) {
  Recorder rec;
  auto p = Process::Start(Spec("echo ready; sleep 1000"), rec.OnLine(), rec.OnExit());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_TRUE(WaitFor([&] { return !rec.Stream(OutputStream::kStdout).empty(); }));
  EXPECT_TRUE(KillProcessGroup((*p)->pgid(), SIGKILL).ok());
  EXPECT_EQ((*p)->Wait().signal, SIGKILL);
}

}  // namespace
}  // namespace sluice
