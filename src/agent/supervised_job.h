// The agent's handle on one attempt run by its supervisor (agent/supervisor.h): starts the
// supervisor, or reattaches to one a previous agent instance started, and turns what it says on
// the control socket into callbacks; sends it the agent's orders (terminate, kill, lease
// renewals, pings). Destroying the handle detaches: the job keeps running under its supervisor.
//
// When the connection drops without the job's exit, the handle reconnects and asks for the
// lines it has not seen (by seq); when the supervisor is gone it finishes from the files the
// supervisor left (output.jsonl, exit.json), or reports the supervisor lost.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "agent/supervisor_protocol.h"
#include "common/agent_protocol.h"
#include "common/status.h"

namespace sluice {

class SupervisedJob {
 public:
  struct End {
    supervisor::Exit exit;
    bool supervisor_lost = false;  // it died without recording the job's end
  };
  struct Callbacks {
    std::function<void(const proto::LogEntry&)> on_line;  // each seq once, in order
    std::function<void(const End&)> on_exit;              // once, after every line
    std::function<void(bool frozen)> on_freeze;           // the supervisor (un)froze the job
  };

  // Writes `spec` to `dir`/spec.json (0600), makes the control socket, starts `exe dir` in a
  // session of its own (it must outlive the agent) and waits until the job has started or
  // failed to (then on_exit carries the error); a warm box (Spec::warm), until it is built and
  // waits for its job. `dir` must exist, mode 0700.
  static Result<std::unique_ptr<SupervisedJob>> Start(const std::string& exe,
                                                      const std::string& dir,
                                                      const supervisor::Spec& spec, Callbacks cb);
  // Reattaches to the supervisor of `dir`, left by a previous agent instance; when it has gone,
  // replays what it recorded. NotFound: no supervisor and no recorded end (the job is lost).
  static Result<std::unique_ptr<SupervisedJob>> Attach(const std::string& dir, Callbacks cb);

  SupervisedJob(const SupervisedJob&) = delete;
  SupervisedJob& operator=(const SupervisedJob&) = delete;
  ~SupervisedJob();

  // The job's shell, which leads its process group; 0 until the supervisor has said.
  pid_t pid() const;
  pid_t pgid() const { return pid(); }
  // True until on_exit has returned.
  bool running() const;
  // A warm box is built and waits for its job.
  bool ready() const;
  void Terminate(std::chrono::milliseconds grace);
  void Kill();
  // The server renewed the lease: frozen from `until`, killed from `kill_at` unless the agent
  // is alive then (CLOCK_MONOTONIC ms).
  void Lease(int64_t until, int64_t kill_at);
  void Ping();
  // Gives a warm box (started with Spec::warm) its job: `go` is the op (supervisor_protocol.h),
  // `dir` the directory the agent has renamed the box's to, `cb` what reports about the job.
  // False when the box had already ended (its end went to the old callbacks).
  bool Go(const std::string& dir, Callbacks cb, const Json& go);
  // Blocks until on_exit has returned.
  void Wait();

 private:
  SupervisedJob(std::string dir, Callbacks cb)
      : dir_(std::move(dir)), cb_(std::make_shared<Callbacks>(std::move(cb))) {}
  std::shared_ptr<const Callbacks> callbacks() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cb_;
  }
  std::string dir() const {
    std::lock_guard<std::mutex> lock(mu_);
    return dir_;
  }
  void ReadLoop();
  // Handles one event line; true once the job's end has been delivered.
  bool OnEvent(const std::string& line);
  bool Reconnect();
  bool EndRecorded() const;  // the supervisor wrote the exit file
  void FinishFromDisk();
  void Deliver(const End& end);
  void SendLocked(const Json& op);

  std::thread reader_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_.
  std::string dir_;  // changes once, at Go
  std::shared_ptr<const Callbacks> cb_;
  std::optional<Json> go_;  // sent again after a reconnect (the supervisor ignores a second)
  int fd_ = -1;
  bool closing_ = false;
  bool done_ = false;        // on_exit has returned
  bool delivering_ = false;  // on_exit was called: the callbacks can no longer change
  bool ready_ = false;       // a warm box said it is built
  pid_t pid_ = 0;
  int64_t last_seq_ = 0;  // reader thread writes, Reconnect reads
  // The orders given, sent again after a reconnect (each is harmless twice).
  std::optional<int64_t> terminate_ms_;
  bool killed_ = false;
  std::optional<std::pair<int64_t, int64_t>> lease_;
};

}  // namespace sluice
