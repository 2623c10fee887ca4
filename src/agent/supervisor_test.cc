// The per-attempt supervisor (supervisor.h) through the agent's handle on it (supervised_job.h),
// with the real `sluice-supervisor` binary: output and exit, detaching and reattaching, leases
// (freeze, thaw, kill with no agent), and hostile input on its control socket.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/supervised_job.h"
#include "agent/supervisor_protocol.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// What a handle reported; every wait has a deadline.
struct Reports {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<proto::LogEntry> lines;
  std::vector<bool> freezes;
  std::optional<SupervisedJob::End> end;

  SupervisedJob::Callbacks Callbacks() {
    SupervisedJob::Callbacks cb;
    cb.on_line = [this](const proto::LogEntry& e) {
      std::lock_guard<std::mutex> lock(mu);
      lines.push_back(e);
      cv.notify_all();
    };
    cb.on_freeze = [this](bool frozen) {
      std::lock_guard<std::mutex> lock(mu);
      freezes.push_back(frozen);
      cv.notify_all();
    };
    cb.on_exit = [this](const SupervisedJob::End& e) {
      std::lock_guard<std::mutex> lock(mu);
      end = e;
      cv.notify_all();
    };
    return cb;
  }
  template <typename Pred>
  bool WaitFor(Pred pred, std::chrono::milliseconds limit = 10s) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, limit, [&] { return pred(); });
  }
  bool HasLine(const std::string& text) {
    for (const auto& l : lines) {
      if (l.text == text) return true;
    }
    return false;
  }
  std::vector<std::string> Texts() {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<std::string> out;
    for (const auto& l : lines) out.push_back(l.text);
    return out;
  }
};

class SupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("sup-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    dir_ = (root_ / "a.d").string();
    fs::create_directories(dir_);
    fs::create_directories(root_ / "work");
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  supervisor::Spec Spec(const std::string& script) {
    supervisor::Spec s;
    s.attempt_id = "att-test";
    s.process.script = script;
    s.process.cwd = (root_ / "work").string();
    s.process.env = {{"PATH", "/usr/local/bin:/usr/bin:/bin"}};
    return s;
  }
  std::unique_ptr<SupervisedJob> Start(const supervisor::Spec& spec, Reports& r) {
    auto job = SupervisedJob::Start(SUPERVISOR_PATH, dir_, spec, r.Callbacks());
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? std::move(*job) : nullptr;
  }
  std::string Work(const std::string& f) { return (root_ / "work" / f).string(); }
  void Touch(const std::string& f) { std::ofstream(Work(f)) << "x"; }

  static inline int counter_ = 0;
  fs::path root_;
  std::string dir_;
};

TEST_F(SupervisorTest, RunsTheJobAndReportsItsLinesInOrderThenItsExit) {
  Reports r;
  auto spec = Spec("echo one; echo two >&2; exit 3");
  spec.first_seq = 5;  // the agent wrote lines 1..4 of its own
  auto job = Start(spec, r);
  ASSERT_TRUE(job);
  ASSERT_TRUE(r.WaitFor([&] { return r.end.has_value(); }));
  job->Wait();
  EXPECT_FALSE(job->running());
  ASSERT_EQ(r.lines.size(), 2u);
  EXPECT_EQ(r.lines[0].seq, 5);
  EXPECT_EQ(r.lines[0].text, "one");
  EXPECT_EQ(r.lines[0].stream, "stdout");
  EXPECT_EQ(r.lines[1].seq, 6);
  EXPECT_EQ(r.lines[1].stream, "stderr");
  EXPECT_EQ(r.end->exit.info.exit_code, 3);
  EXPECT_FALSE(r.end->supervisor_lost);
  EXPECT_FALSE(r.end->exit.fenced);
  // What a restarted agent would find: every line, and how the job ended.
  EXPECT_TRUE(fs::exists(dir_ + "/" + supervisor::kExitFile));
  std::ifstream out(dir_ + "/" + supervisor::kOutputFile);
  int n = 0;
  for (std::string line; std::getline(out, line);) ++n;
  EXPECT_EQ(n, 2);
  EXPECT_EQ(fs::status(dir_ + "/" + supervisor::kSpecFile).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
}

TEST_F(SupervisorTest, AJobThatCannotStartEndsWithTheReason) {
  Reports r;
  auto spec = Spec("true");
  spec.process.cwd = (root_ / "no-such-dir").string();
  auto job = Start(spec, r);
  ASSERT_TRUE(job);
  ASSERT_TRUE(r.WaitFor([&] { return r.end.has_value(); }));
  EXPECT_NE(r.end->exit.error.find("no-such-dir"), std::string::npos) << r.end->exit.error;
}

TEST_F(SupervisorTest, TheJobOutlivesItsHandleAndAReattachReplaysWhatWasMissed) {
  Reports first;
  auto job = Start(Spec("echo one; while [ ! -f go ]; do sleep 0.02; done; echo two; "
                        "while [ ! -f end ]; do sleep 0.02; done; echo three"),
                   first);
  ASSERT_TRUE(job);
  ASSERT_TRUE(first.WaitFor([&] { return first.HasLine("one"); }));
  const pid_t pid = job->pid();
  ASSERT_GT(pid, 0);
  job.reset();  // the agent is gone
  Touch("go");  // the job goes on printing meanwhile
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(::kill(pid, 0), 0) << "the job died with its handle";

  Reports second;
  auto again = SupervisedJob::Attach(dir_, second.Callbacks());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_TRUE(second.WaitFor([&] { return second.HasLine("two"); })) << second.Texts().size();
  EXPECT_TRUE((*again)->running());
  Touch("end");
  ASSERT_TRUE(second.WaitFor([&] { return second.end.has_value(); }));
  EXPECT_EQ(second.Texts(), (std::vector<std::string>{"one", "two", "three"}));
  EXPECT_EQ(second.end->exit.info.exit_code, 0);
}

TEST_F(SupervisorTest, AJobThatEndedWhileNoAgentWasThereIsReplayedFromItsFiles) {
  Reports first;
  auto job =
      Start(Spec("echo one; while [ ! -f go ]; do sleep 0.02; done; echo two; exit 4"), first);
  ASSERT_TRUE(job);
  ASSERT_TRUE(first.WaitFor([&] { return first.HasLine("one"); }));
  job.reset();
  Touch("go");
  // The supervisor records the end and exits; its socket goes with it.
  for (int i = 0; i < 500 && fs::exists(dir_ + "/" + supervisor::kSocketFile); ++i) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_FALSE(fs::exists(dir_ + "/" + supervisor::kSocketFile));
  Reports second;
  auto again = SupervisedJob::Attach(dir_, second.Callbacks());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_TRUE(second.WaitFor([&] { return second.end.has_value(); }));
  EXPECT_EQ(second.Texts(), (std::vector<std::string>{"one", "two"}));
  EXPECT_EQ(second.end->exit.info.exit_code, 4);
  EXPECT_FALSE(second.end->supervisor_lost);
}

// A job that ends within a millisecond ends its supervisor before it serves the connection the
// agent opened first: the agent's connection closes unanswered. The end is on disk by then, so
// the agent reads it at once instead of trying to reconnect (which cost such jobs 200 ms). Here
// a stand-in for the supervisor closes every connection it takes; an agent that reconnected
// would be caught in that loop and never see the end.
TEST_F(SupervisorTest, AConnectionClosedAfterTheEndWasRecordedFinishesFromTheFilesAtOnce) {
  proto::LogEntry line;
  line.seq = 1;
  line.stream = "stdout";
  line.text = "started";
  std::ofstream(dir_ + "/" + supervisor::kOutputFile)
      << DumpJson(supervisor::LineEvent(line)) << "\n";
  supervisor::Exit exit;
  exit.info.exit_code = 0;
  std::ofstream(dir_ + "/" + supervisor::kExitFile) << DumpJson(supervisor::ToJson(exit)) << "\n";

  const std::string sock = dir_ + "/" + supervisor::kSocketFile;
  int listen_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listen_fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(sock.size(), sizeof addr.sun_path);
  std::memcpy(addr.sun_path, sock.c_str(), sock.size() + 1);
  ASSERT_EQ(::bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listen_fd, 8), 0);
  std::atomic<int> taken{0};
  std::atomic<bool> stop{false};
  std::thread closer([&] {
    while (!stop) {
      pollfd p{listen_fd, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      ++taken;
      ::close(fd);
    }
  });

  Reports r;
  auto job = SupervisedJob::Attach(dir_, r.Callbacks());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const bool ended = r.WaitFor([&] { return r.end.has_value(); });
  stop = true;
  closer.join();
  ::close(listen_fd);
  ASSERT_TRUE(ended) << "the agent kept reconnecting to a supervisor whose end was on disk";
  EXPECT_EQ(taken.load(), 1);
  EXPECT_EQ(r.Texts(), (std::vector<std::string>{"started"}));
  EXPECT_EQ(r.end->exit.info.exit_code, 0);
  EXPECT_FALSE(r.end->supervisor_lost);
}

TEST_F(SupervisorTest, NoSupervisorAndNoRecordedEndIsNotFound) {
  auto again = SupervisedJob::Attach(dir_, {});
  EXPECT_EQ(again.status().code(), StatusCode::kNotFound) << again.status().ToString();
}

// The job writes a counter; frozen, the counter stops.
constexpr const char* kTicker =
    "i=0; while true; do i=$((i+1)); echo $i > tick.tmp; "
    "mv tick.tmp tick; sleep 0.02; done";

TEST_F(SupervisorTest, ALeaseThatRunsOutFreezesTheJobAndARenewalThawsIt) {
  Reports r;
  auto spec = Spec(kTicker);
  spec.lease_until = supervisor::MonotonicMs() + 500;
  auto job = Start(spec, r);
  ASSERT_TRUE(job);
  ASSERT_TRUE(r.WaitFor([&] { return !r.freezes.empty(); }, 5s));
  EXPECT_TRUE(r.freezes[0]);
  auto read_tick = [&] {
    std::ifstream in(Work("tick"));
    std::string v;
    in >> v;
    return v;
  };
  std::string at_freeze = read_tick();
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(read_tick(), at_freeze) << "a frozen job went on running";
  job->Lease(supervisor::MonotonicMs() + 60000, supervisor::kNever);
  ASSERT_TRUE(r.WaitFor([&] { return r.freezes.size() == 2; }, 5s));
  EXPECT_FALSE(r.freezes[1]);
  bool moved = false;
  for (int i = 0; i < 200 && !moved; ++i) {
    std::this_thread::sleep_for(10ms);
    moved = read_tick() != at_freeze;
  }
  EXPECT_TRUE(moved) << "a thawed job did not run again";
  job->Kill();
  ASSERT_TRUE(r.WaitFor([&] { return r.end.has_value(); }));
  EXPECT_EQ(r.end->exit.info.signal, SIGKILL);
}

TEST_F(SupervisorTest, PastItsKillDeadlineWithNoAgentTheJobIsKilledAndMarkedFenced) {
  Reports r;
  auto spec = Spec(kTicker);
  spec.lease_until = supervisor::MonotonicMs() + 300;
  spec.kill_at = supervisor::MonotonicMs() + 600;
  spec.agent_silence_ms = 200;
  auto job = Start(spec, r);
  ASSERT_TRUE(job);
  const pid_t pid = job->pid();
  job.reset();  // no agent speaks for it
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    std::this_thread::sleep_for(10ms);
    gone = ::kill(pid, 0) != 0;
  }
  EXPECT_TRUE(gone) << "the job outlived its kill deadline";
  Reports later;
  auto again = SupervisedJob::Attach(dir_, later.Callbacks());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_TRUE(later.WaitFor([&] { return later.end.has_value(); }));
  EXPECT_TRUE(later.end->exit.fenced);
}

TEST_F(SupervisorTest, ALiveAgentKeepsAFrozenJobPastTheKillDeadline) {
  // A server outage: the agent is alive but has no renewal to bring. Only the server's word
  // may kill the job then.
  Reports r;
  auto spec = Spec(kTicker);
  spec.lease_until = supervisor::MonotonicMs() + 200;
  spec.kill_at = supervisor::MonotonicMs() + 400;
  spec.agent_silence_ms = 500;
  auto job = Start(spec, r);
  ASSERT_TRUE(job);
  for (int i = 0; i < 15; ++i) {  // 1.5 s, well past the kill deadline
    job->Ping();
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(job->running());
  EXPECT_FALSE(r.end.has_value());
  job->Terminate(100ms);  // a frozen job is thawed to get its SIGTERM
  ASSERT_TRUE(r.WaitFor([&] { return r.end.has_value(); }));
  EXPECT_FALSE(r.end->exit.fenced);
}

TEST_F(SupervisorTest, TerminateGivesTheJobItsGracePeriod) {
  Reports r;
  auto job = Start(Spec("trap 'echo saving; exit 0' TERM; echo up; while true; do sleep 0.02; "
                        "done"),
                   r);
  ASSERT_TRUE(job);
  ASSERT_TRUE(r.WaitFor([&] { return r.HasLine("up"); }));
  job->Terminate(5s);
  ASSERT_TRUE(r.WaitFor([&] { return r.end.has_value(); }));
  EXPECT_TRUE(r.HasLine("saving"));
  EXPECT_EQ(r.end->exit.info.exit_code, 0);
}

TEST_F(SupervisorTest, AWarmBoxRunsTheJobItIsLaterGivenWithExactlyItsEnvironment) {
  Reports idle;
  auto spec = Spec("unused: the stub runs");
  spec.warm = true;
  spec.process.env.clear();  // as the agent starts its warm boxes
  auto job = Start(spec, idle);
  ASSERT_TRUE(job);
  ASSERT_GT(job->pid(), 0);
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(job->running()) << "a warm box must wait for its job: "
                              << (idle.end
                                      ? idle.end->exit.info.ToString() + " " + idle.end->exit.error
                                      : "")
                              << (idle.lines.empty() ? "" : idle.lines[0].text);
  // The agent renames the box's directory to the attempt's, then says go.
  const std::string moved = (root_ / "att.d").string();
  fs::rename(dir_, moved);
  Reports r;
  Json go{{"op", "go"},
          {"dir", moved},
          {"attempt_id", "att-go"},
          {"cwd", Work("")},
          {"script",
           "echo \"[$JOBVAR]\"; env | cut -d= -f1 | sort | tr '\\n' ' '; echo; pwd; read x; "
           "echo read=$?; exit 5"},
          {"env", {{"PATH", "/usr/bin:/bin"}, {"JOBVAR", "a b"}}},
          {"first_seq", 3}};
  job->Go(moved, r.Callbacks(), go);
  ASSERT_TRUE(r.WaitFor([&] { return r.end.has_value(); }));
  // Only what the job gave, and what bash itself sets for any job (PWD, SHLVL, _).
  EXPECT_EQ(r.Texts(), (std::vector<std::string>{"[a b]", "JOBVAR PATH PWD SHLVL _ ",
                                                 (root_ / "work").string(), "read=1"}));
  ASSERT_FALSE(r.lines.empty());
  EXPECT_EQ(r.lines[0].seq, 3);
  EXPECT_EQ(r.end->exit.info.exit_code, 5);
  EXPECT_TRUE(fs::exists(moved + "/" + supervisor::kExitFile));
  EXPECT_TRUE(idle.lines.empty());
  EXPECT_FALSE(idle.end.has_value()) << "the box's reports go to whoever said go";
}

// The job reaches the box as shell the stub evals (supervisor_protocol.h, kWarmStub): whatever
// the job's script, variables and directory hold must arrive as they are, never run as shell.
TEST_F(SupervisorTest, AWarmBoxPassesQuotesDollarsNewlinesAndLongValuesThroughUnexpanded) {
  Reports idle;
  auto spec = Spec("unused: the stub runs");
  spec.warm = true;
  spec.process.env.clear();
  auto job = Start(spec, idle);
  ASSERT_TRUE(job);
  const std::string moved = (root_ / "att.d").string();
  const std::string cwd = Work("it's $(x)");
  fs::create_directories(cwd);
  const std::string hostile =
      "it's \"q\" $(touch " + (root_ / "pwned").string() + ") `id` \\n\nline2 \xc3\xa9 '' \\'";
  const std::string big(100000, 'b');  // more than a pipe holds
  fs::rename(dir_, moved);
  Reports r;
  Json go{{"op", "go"},
          {"dir", moved},
          {"attempt_id", "att-go"},
          {"cwd", cwd},
          {"script", "printf '%s|' \"$HOSTILE\"; echo; echo ${#BIG}; pwd; echo 'done'\"'\"'s'"},
          {"env", {{"PATH", "/usr/bin:/bin"}, {"HOSTILE", hostile}, {"BIG", big}}},
          {"first_seq", 1}};
  job->Go(moved, r.Callbacks(), go);
  ASSERT_TRUE(r.WaitFor([&] { return r.end.has_value(); }));
  EXPECT_EQ(r.end->exit.info.exit_code, 0)
      << r.end->exit.error << (r.lines.empty() ? "" : r.lines[0].text);
  EXPECT_EQ(r.Texts(), (std::vector<std::string>{
                           "it's \"q\" $(touch " + (root_ / "pwned").string() + ") `id` \\n",
                           "line2 \xc3\xa9 '' \\'|", "100000", cwd, "done's"}));
  EXPECT_FALSE(fs::exists(root_ / "pwned")) << "a variable's value ran as shell";
}

TEST_F(SupervisorTest, AWarmBoxWhoseAgentIsGoneIsKilled) {
  Reports r;
  auto spec = Spec("unused");
  spec.warm = true;
  spec.agent_silence_ms = 200;
  auto job = Start(spec, r);
  ASSERT_TRUE(job);
  const pid_t pid = job->pid();
  ASSERT_GT(pid, 0);
  job.reset();
  bool gone = false;
  for (int i = 0; i < 300 && !gone; ++i) {
    std::this_thread::sleep_for(10ms);
    gone = ::kill(pid, 0) != 0;
  }
  EXPECT_TRUE(gone);
}

TEST_F(SupervisorTest, GarbageOnTheControlSocketNeitherCrashesItNorStopsTheJob) {
  Reports r;
  auto job = Start(Spec("echo up; while [ ! -f go ]; do sleep 0.02; done; echo done"), r);
  ASSERT_TRUE(job);
  ASSERT_TRUE(r.WaitFor([&] { return r.HasLine("up"); }));
  job.reset();
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string path = dir_ + "/" + supervisor::kSocketFile;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  std::string junk = "not json\n{\"op\":7}\n[1,2]\n{\"op\":\"attach\",\"from\":\"x\"}\n" +
                     std::string(100000, 'z');
  (void)::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
  std::this_thread::sleep_for(200ms);
  ::close(fd);
  Reports again;
  auto back = SupervisedJob::Attach(dir_, again.Callbacks());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  Touch("go");
  ASSERT_TRUE(again.WaitFor([&] { return again.end.has_value(); }));
  EXPECT_EQ(again.Texts(), (std::vector<std::string>{"up", "done"}));
  EXPECT_EQ(again.end->exit.info.exit_code, 0);
}

}  // namespace
}  // namespace sluice
