// bench_job_start: time from asking for a job to its first output line (`echo started`), as the
// agent starts jobs, for three ways in one run, interleaved so the host's drift hits all alike:
//   process     Process::Start directly (the agent before issue 11's supervisor; the baseline)
//   supervised  SupervisedJob::Start: the per-attempt sluice-supervisor, then the job
//   boxed       supervised, and the job in the bubblewrap sandbox as the agent builds it
//               (needs bwrap; skipped otherwise)
//   warm        boxed, from a warm box: the supervisor and the sandbox were started before the
//               job came (untimed), as the agent keeps one ready; timed from its `go`
// Prints p50/p99 per way and each p50's ratio to the baseline's.
//
//   bench_job_start [--runs N] [--supervisor PATH]
// (default 100 runs per way; the supervisor built with the bench unless --supervisor names another,
// e.g. an older build's, to compare the two in runs alternated by hand)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/process.h"
#include "agent/sandbox.h"
#include "agent/supervised_job.h"

namespace fs = std::filesystem;
using sluice::Process;
using sluice::ProcessSpec;
using sluice::SupervisedJob;
using Clock = std::chrono::steady_clock;

namespace {

// Set by a callback when the first line (and later the exit) arrives.
struct Signal {
  std::mutex mu;
  std::condition_variable cv;
  bool line = false, done = false;
  void Set(bool Signal::*what) {
    std::lock_guard<std::mutex> lock(mu);
    this->*what = true;
    cv.notify_all();
  }
  bool Wait(bool Signal::*what) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(30), [&] { return this->*what; });
  }
};

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  double rank = p * static_cast<double>(v.size() - 1);
  size_t lo = static_cast<size_t>(rank);
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 100;
  std::string supervisor = SUPERVISOR_PATH;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--supervisor") == 0 && i + 1 < argc) {
      supervisor = argv[++i];
    } else {
      std::fprintf(stderr, "usage: bench_job_start [--runs N] [--supervisor PATH]\n");
      return 2;
    }
  }
  const fs::path root = fs::temp_directory_path() / ("bench-job-start-" + std::to_string(getpid()));
  fs::create_directories(root / "work");
  fs::create_directories(root / "ckpt");
  ProcessSpec job;
  job.script = "echo started";
  job.cwd = (root / "work").string();
  // What the agent gives a CPU job (Agent::JobEnv), ~600 bytes: a warm box reads it on `go`.
  job.env = {{"PATH", "/usr/local/bin:/usr/bin:/bin"},
             {"HOME", job.cwd},
             {"USER", "sluice-job"},
             {"LOGNAME", "sluice-job"},
             {"LANG", "C.UTF-8"},
             {"SHELL", "/bin/bash"},
             {"PYTHONUNBUFFERED", "1"},
             {"CUDA_VISIBLE_DEVICES", ""},
             {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"},
             {"NVIDIA_VISIBLE_DEVICES", "void"},
             {"SLUICE_GPUS", ""},
             {"SLUICE_CPUS", "1.000000"},
             {"SLUICE_JOB_ID", "job-0123456789ab"},
             {"SLUICE_ATTEMPT_ID", "att-0123456789ab"},
             {"SLUICE_ATTEMPT", "1"},
             {"SLUICE_NODE_ID", "node-0123456789abcdef"},
             {"SLUICE_CHECKPOINT_DIR", (root / "ckpt").string()}};

  sluice::SandboxSpec box;
  box.workdir = job.cwd;
  box.checkpoint_dir = (root / "ckpt").string();
  box.hidden = {(root / "sup").string()};
  const bool root_user = geteuid() == 0;
  if (root_user) box.uid = 2100000000;
  sluice::SandboxSupport support = sluice::DetectSandbox(
      root_user, box, [&](const std::vector<std::string>& argv) -> sluice::Result<int> {
        ProcessSpec probe = job;
        probe.script = "true";
        probe.wrapper = argv;
        auto p = Process::Start(probe, nullptr, nullptr);
        if (!p.ok()) return p.status();
        return (*p)->Wait().exit_code;
      });
  if (support.usable && root_user) {
    fs::permissions(root / "work", fs::perms::all);
    fs::permissions(root / "ckpt", fs::perms::all);
  }

  std::map<std::string, std::function<double()>> ways;
  ways["process"] = [&] {
    Signal s;
    auto t0 = Clock::now();
    auto p = Process::Start(
        job, [&](sluice::OutputStream, std::string_view) { s.Set(&Signal::line); },
        [&](const sluice::ExitInfo&) { s.Set(&Signal::done); });
    if (!p.ok() || !s.Wait(&Signal::line)) return -1.0;
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    (*p)->Wait();
    return ms;
  };
  int n = 0;
  auto supervised = [&](bool boxed) {
    Signal s;
    const std::string dir = (root / "sup" / std::to_string(n++)).string();
    fs::create_directories(dir);
    sluice::supervisor::Spec spec;
    spec.attempt_id = "bench";
    spec.process = job;
    if (boxed) spec.process.wrapper = sluice::SandboxArgv(support, box);
    SupervisedJob::Callbacks cb;
    cb.on_line = [&](const sluice::proto::LogEntry&) { s.Set(&Signal::line); };
    cb.on_exit = [&](const SupervisedJob::End&) { s.Set(&Signal::done); };
    auto t0 = Clock::now();
    auto j = SupervisedJob::Start(supervisor, dir, spec, cb);
    if (!j.ok() || !s.Wait(&Signal::line)) return -1.0;
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    (*j)->Wait();
    std::error_code ec;
    fs::remove_all(dir, ec);  // the supervisor may be removing its socket at the same time
    return ms;
  };
  ways["supervised"] = [&] { return supervised(false); };
  auto warm = [&] {
    Signal s;
    const std::string dir = (root / "sup" / std::to_string(n++)).string();
    fs::create_directories(dir);
    sluice::supervisor::Spec spec;
    spec.attempt_id = "bench";
    spec.process = job;
    spec.process.wrapper = sluice::SandboxArgv(support, box);
    spec.process.env.clear();  // a warm box starts with an empty environment
    spec.warm = true;
    auto j = SupervisedJob::Start(supervisor, dir, spec, {});
    if (!j.ok()) return -1.0;
    SupervisedJob::Callbacks cb;
    cb.on_line = [&](const sluice::proto::LogEntry&) { s.Set(&Signal::line); };
    cb.on_exit = [&](const SupervisedJob::End&) { s.Set(&Signal::done); };
    sluice::Json env = sluice::Json::object();
    for (const auto& [k, v] : job.env) env[k] = v;
    // The agent keeps its box long before a job comes; let this one finish building.
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    auto t0 = Clock::now();
    (*j)->Go(dir, cb,
             sluice::Json{{"op", "go"},
                          {"dir", dir},
                          {"attempt_id", "bench"},
                          {"cwd", job.cwd},
                          {"script", job.script},
                          {"env", env},
                          {"first_seq", 1}});
    if (!s.Wait(&Signal::line)) return -1.0;
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    (*j)->Wait();
    std::error_code ec;
    fs::remove_all(dir, ec);
    return ms;
  };
  if (support.usable) {
    ways["boxed"] = [&] { return supervised(true); };
    ways["warm"] = warm;
  } else {
    std::printf("boxed: skipped (%s)\n", support.why_not.c_str());
  }

  std::map<std::string, std::vector<double>> samples;
  for (auto& [name, fn] : ways) fn();  // warm-up, untimed
  for (int i = 0; i < runs; ++i) {
    for (auto& [name, fn] : ways) {
      double ms = fn();
      if (ms < 0) {
        std::fprintf(stderr, "%s: the job did not start\n", name.c_str());
        return 1;
      }
      samples[name].push_back(ms);
    }
  }
  std::error_code ec;
  fs::remove_all(root, ec);
  const double base = Percentile(samples["process"], 0.5);
  std::printf("start to first output line, %d runs each, interleaved\n", runs);
  for (const char* name : {"process", "supervised", "boxed", "warm"}) {
    if (!samples.count(name)) continue;
    const auto& v = samples[name];
    double p50 = Percentile(v, 0.5);
    std::printf("%-11s p50=%7.2f ms  p99=%7.2f ms  p50 vs process: %.2fx (+%.2f ms)\n", name, p50,
                Percentile(v, 0.99), p50 / base, p50 - base);
  }
  return 0;
}
