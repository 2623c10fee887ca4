// Attempts: started under their supervisors (cold or in a warm box), reattached after a
// restart, persisted, checkpointed, preempted from this side, and forgotten once reported.
#include "agent/agent_internal.h"

namespace sluice::agent::internal {

namespace {

// What the supervisor in `dir` recorded of its job's end: nothing yet, an end it cannot vouch
// for (unreadable), the fence it applied itself (its lease ran out with no agent to renew it),
// or the job's own end.
enum class RecordedEnd { kNone, kUnreadable, kFenced, kEnded };
RecordedEnd ReadRecordedEnd(const std::string& dir) {
  auto text = ReadFile(dir + "/" + supervisor::kExitFile);
  if (!text.ok()) return RecordedEnd::kNone;
  auto j = ParseJson(*text);
  auto e = j.ok() ? supervisor::ExitFromJson(*j) : Result<supervisor::Exit>(j.status());
  if (!e.ok()) return RecordedEnd::kUnreadable;
  return e->fenced ? RecordedEnd::kFenced : RecordedEnd::kEnded;
}

}  // namespace

void Agent::RecoverAttempts() {
  // Reattached supervisors report from their own threads from the start.
  std::lock_guard<std::mutex> lock(mu_);
  std::error_code ec;
  fs::create_directories(AttemptsDir(), ec);
  for (const auto& entry : fs::directory_iterator(AttemptsDir(), ec)) {
    if (entry.path().extension() != ".json") continue;
    auto text = ReadFile(entry.path().string());
    if (!text.ok()) continue;
    auto j = ParseJson(*text);
    if (!j.ok() || !j->is_object()) {
      fs::remove(entry.path(), ec);
      continue;
    }
    auto a = std::make_shared<Attempt>();
    a->id = j->value("attempt_id", "");
    a->job_id = j->value("job_id", "");
    a->pgid = j->value("pgid", 0);
    a->start_time = j->value("start_time", "");
    a->error = j->value("error", "");
    a->slot = j->value("slot", -1);
    a->checkpoint_dir = j->value("checkpoint_dir", "");
    a->checkpoint_interval_ms = j->value("checkpoint_interval_ms", int64_t{0});
    a->grace_ms = j->value("grace_ms", int64_t{30000});
    if (a->id.empty() || SafeName(a->id) != a->id) continue;
    if (j->contains("exit_code") && (*j)["exit_code"].is_number_integer()) {
      a->exit = ExitInfo{(*j)["exit_code"].get<int>(), j->value("signal", 0)};
      a->final_checkpoint = j->value("checkpoint", "");
      a->out_of_memory = j->value("out_of_memory", false);
    } else if (a->error.empty() && j->value("supervised", false) && ReattachLocked(a)) {
      // Still running under its supervisor (or it ended while we were away, and the
      // supervisor recorded how): the job is not restarted.
    } else if (a->error.empty()) {
      const bool fenced = ReadRecordedEnd(SupervisorDir(a->id)) == RecordedEnd::kFenced;
      // It was running when the previous agent died. PR_SET_PDEATHSIG took the shell; kill
      // whatever is left of its group. Safe against pid reuse: Linux never hands out a pid that
      // is still some group's id, so if a process with that pid exists it must be our leader
      // (same start time), and if none exists any remaining members of the group are ours.
      std::string leader_start = a->pgid > 0 ? ProcessStartTime(a->pgid) : "";
      if (a->pgid > 1 && (leader_start.empty() || leader_start == a->start_time)) {
        (void)KillProcessGroup(a->pgid, SIGKILL);
      }
      // And whatever left the group (setsid, double fork) but not the attempt's cgroup.
      if (auto cg = AttemptCgroup::Open(cgroups_, a->id); cg.ok()) {
        (void)(*cg)->KillAll();
        a->cgroup = std::move(*cg);
      }
      a->lost = true;
      Log(fenced ? "attempt %s was killed by its supervisor while no agent renewed its lease; "
                   "reporting it lost"
                 : "attempt %s has no supervisor left and no recorded end; reporting it lost",
          a->id);
    }
    attempts_[a->id] = a;
  }
}

bool Agent::ReattachLocked(const std::shared_ptr<Attempt>& a) {
  const std::string dir = SupervisorDir(a->id);
  // Fenced: the server has it as lost (or soon will).
  const RecordedEnd end = ReadRecordedEnd(dir);
  if (end == RecordedEnd::kFenced || end == RecordedEnd::kUnreadable) return false;
  auto job = SupervisedJob::Attach(dir, JobCallbacks(a));
  if (!job.ok()) return false;
  a->proc = std::move(*job);
  Log("reattached to the supervisor of %s", a->id);
  StartCheckpointsLocked(a);
  return true;
}

void Agent::PersistLocked(const Attempt& a) {
  Json j{{"attempt_id", a.id},
         {"job_id", a.job_id},
         {"pgid", a.pgid},
         {"start_time", a.start_time},
         {"error", a.error},
         {"supervised", a.proc != nullptr},
         {"slot", a.slot},
         {"checkpoint_dir", a.checkpoint_dir},
         {"checkpoint_interval_ms", a.checkpoint_interval_ms},
         {"grace_ms", a.grace_ms}};
  if (a.exit) {
    j["exit_code"] = a.exit->exit_code;
    j["signal"] = a.exit->signal;
    j["checkpoint"] = a.final_checkpoint;
    j["out_of_memory"] = a.out_of_memory;
  }
  // How the attempt ended (an exit, or an error before it could start) must survive a reboot:
  // reported after it, a finished job is not run again. A record of an attempt still starting
  // or running is for a restart of this agent's process only (the page cache keeps it): after a
  // host crash its processes are gone anyway, and the server reconciles an attempt the agent
  // does not report as lost. So it costs no disk flush, which on a shared disk waits for every
  // other process's dirty data and sat on the path of each job's start (docs/benchmarks.md).
  const Durability durability =
      a.exit || !a.error.empty() ? Durability::kPowerLoss : Durability::kProcessCrash;
  Status s = WriteFileAtomic(AttemptsDir() + "/" + a.id + ".json", DumpJson(j), 0644, durability);
  if (!s.ok()) Log("%s", s.ToString());
}

void Agent::ForgetLocked(const std::string& attempt_id) {
  auto it = attempts_.find(attempt_id);
  if (it == attempts_.end()) return;
  if (it->second->proc && it->second->proc->running()) return;  // still running: keep
  std::error_code ec;
  fs::remove(AttemptsDir() + "/" + attempt_id + ".json", ec);
  fs::remove_all(WorkDir(attempt_id), ec);
  fs::remove_all(SupervisorDir(attempt_id), ec);
  // The final checkpoint is on the server (the exit that carried it was acknowledged), and a
  // later attempt here restores from there.
  if (!it->second->checkpoint_dir.empty()) fs::remove_all(it->second->checkpoint_dir, ec);
  // ~Process joins its monitor thread, so it must not run on that thread (a callback may hold
  // the last reference for a moment) nor under mu_: a worker waits until the callbacks are
  // done, then drops the attempt.
  std::shared_ptr<Attempt> keep = it->second;
  attempts_.erase(it);
  leases_.Forget(attempt_id);
  SpawnLocked([keep]() mutable {
    if (keep->proc) keep->proc->Wait();
    if (keep->cgroup) {
      // Killed when the leader exited; the kernel may take a moment to empty it.
      for (int i = 0; i < 50 && !keep->cgroup->Remove().ok(); ++i) {
        (void)keep->cgroup->KillAll();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    keep.reset();
  });
}

void Agent::SpawnLocked(std::function<void()> fn) {
  ++active_workers_;
  std::thread([this, fn = std::move(fn)]() mutable {
    fn();
    fn = nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    --active_workers_;
    cv_.notify_all();
  }).detach();
}

std::string Agent::SaveCheckpoint(Attempt& a) {
  if (a.checkpoint_dir.empty()) return "";
  std::lock_guard<std::mutex> one_at_a_time(a.upload_mu);
  std::error_code ec;
  if (fs::is_empty(a.checkpoint_dir, ec) || ec) return "";  // the job saved nothing (yet)
  checkpoint::HttpBlobTransport transport(url_, BearerToken());
  auto r = checkpoint::UploadCheckpoint(a.checkpoint_dir, transport);
  if (!r.ok()) {
    Log("saving the checkpoint of %s failed: %s", a.id, r.status().message());
    return "";
  }
  if (r->files == 0) return "";
  Log("saved checkpoint of %s: %s", a.id,
      std::to_string(r->files) + " files, " + std::to_string(r->total_bytes) + " bytes, " +
          std::to_string(r->uploaded_bytes) + " sent");
  return r->manifest_digest;
}

// Every `interval_ms` while the attempt runs: save SLUICE_CHECKPOINT_DIR and report the
// manifest if it changed.
void Agent::CheckpointLoop(std::weak_ptr<Attempt> weak, int64_t interval_ms) {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(interval_ms);
      cv_.wait_until(lock, deadline, [&] {
        auto a = weak.lock();
        return stopping_ || !a || a->exiting;
      });
      auto a = weak.lock();
      if (stopping_ || !a || a->exiting) return;
    }
    auto a = weak.lock();
    if (!a) return;
    std::string manifest = SaveCheckpoint(*a);
    std::lock_guard<std::mutex> lock(mu_);
    if (!manifest.empty() && manifest != a->last_checkpoint && !a->exiting) {
      a->last_checkpoint = manifest;
      a->pending_checkpoint = manifest;
      dirty_ = true;
      cv_.notify_all();
    }
  }
}

void Agent::PreemptAllLocked(const std::string& cause) {
  for (auto& [id, a] : attempts_) {
    if (!a->proc || !a->proc->running() || a->exiting || a->noticed) continue;
    Log("preempting %s: %s", id, cause);
    a->noticed = true;
    a->notice = cause;
    a->proc->Terminate(std::chrono::milliseconds(a->grace_ms));
  }
  dirty_ = true;
  cv_.notify_all();
}

void Agent::SpotNoticeLoop() {
  auto url = ParseUrl(opt_.spot_metadata_url);
  if (!url.ok()) {
    Log("--spot-metadata-url: %s", url.status().message());
    return;
  }
  // The whole URL path is the resource polled, not a prefix.
  std::string path = url->base_path.empty() ? "/" : url->base_path;
  url->base_path.clear();
  const auto interval =
      std::chrono::milliseconds(static_cast<int64_t>(opt_.spot_poll_interval_s * 1000));
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, interval, [&] { return stopping_; })) return;
    }
    HttpClient http(*url, "", std::chrono::seconds(2));
    auto resp = http.Request("GET", path);
    if (!resp.ok() || resp->status != 200) continue;  // 404: no notice; errors: try again
    std::string body = Trim(resp->body.substr(0, 200));
    std::lock_guard<std::mutex> lock(mu_);
    PreemptAllLocked("spot termination notice" + (body.empty() ? "" : ": " + body));
  }
}

std::map<std::string, std::string> Agent::JobEnv(const proto::Assign& a) const {
  std::map<std::string, std::string> env;
  auto inherit = [&](const char* key, const char* fallback) {
    const char* v = std::getenv(key);
    if (v)
      env[key] = v;
    else if (fallback)
      env[key] = fallback;
  };
  inherit("PATH", "/usr/local/bin:/usr/bin:/bin");
  inherit("HOME", "/");
  inherit("USER", nullptr);
  inherit("LOGNAME", nullptr);
  inherit("LANG", "C.UTF-8");
  inherit("TZ", nullptr);
  // NVIDIA's CUDA container images set it to /usr/local/nvidia/lib64, where the driver's
  // libcuda.so.1 is mounted (the lent H200 machine's did); a job's PyTorch may find it nowhere
  // else.
  inherit("LD_LIBRARY_PATH", nullptr);
  env["SHELL"] = "/bin/bash";
  env["PYTHONUNBUFFERED"] = "1";  // job output should stream, not arrive at exit
  for (const auto& [k, v] : a.env) env[k] = v;
  // Set last: the spec validator forbids these keys, and the agent has the final word.
  std::string uuids, indices;
  for (int g : a.gpus) {
    std::string id = std::to_string(g);
    for (const auto& gi : inventory_.gpus) {
      if (gi.index == g && !gi.uuid.empty()) id = gi.uuid;
    }
    uuids += (uuids.empty() ? "" : ",") + id;
    indices += (indices.empty() ? "" : ",") + std::to_string(g);
  }
  env["CUDA_VISIBLE_DEVICES"] = uuids;  // empty: the job sees no GPU at all
  env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
  env["NVIDIA_VISIBLE_DEVICES"] = uuids.empty() ? "void" : uuids;
  env["SLUICE_GPUS"] = indices;
  env["SLUICE_CPUS"] = std::to_string(a.cpus);
  env["SLUICE_JOB_ID"] = a.job_id;
  env["SLUICE_ATTEMPT_ID"] = a.attempt_id;
  env["SLUICE_ATTEMPT"] = std::to_string(a.attempt);
  env["SLUICE_NODE_ID"] = node_id_;
  return env;
}

void Agent::HandleAssign(const proto::Assign& assign) {
  std::lock_guard<std::mutex> lock(mu_);
  if (attempts_.count(assign.attempt_id)) return;  // a duplicate assign is a no-op
  auto a = std::make_shared<Attempt>();
  a->id = assign.attempt_id;
  a->job_id = assign.job_id;
  attempts_[a->id] = a;
  leases_.Granted(a->id, SteadyMs());
  PersistLocked(*a);
  // Fetching and unpacking the workdir may take a while: not on the socket's thread.
  SpawnLocked([this, assign] { StartAttempt(assign); });
}

SupervisedJob::Callbacks Agent::JobCallbacks(std::weak_ptr<Attempt> weak) {
  SupervisedJob::Callbacks cb;
  cb.on_line = [this, weak](const proto::LogEntry& e) {
    auto att = weak.lock();
    if (!att) return;
    std::lock_guard<std::mutex> lock(mu_);
    att->next_seq = std::max(att->next_seq, e.seq + 1);
    att->lines.push_back(e);
    dirty_ = true;
    cv_.notify_all();
  };
  cb.on_freeze = [this, weak](bool frozen) {
    auto att = weak.lock();
    if (!att) return;
    std::lock_guard<std::mutex> lock(mu_);
    att->frozen = frozen;
    Log(frozen
            ? "lease of %s ran out (no word from the server): frozen until the server confirms it"
            : "the server confirmed %s: thawed",
        att->id);
  };
  cb.on_exit = [this, weak](const SupervisedJob::End& end) {
    auto att = weak.lock();
    if (!att) return;
    std::lock_guard<std::mutex> lock(mu_);
    att->exiting = true;
    att->frozen = false;
    cv_.notify_all();
    // The final checkpoint is saved before the exit is reported, so the server requeues the
    // job with it (issue 4: ... SIGKILL → final checkpoint upload → attempt ended).
    SpawnLocked([this, att, end] {
      const bool started = end.exit.error.empty();
      std::string manifest = started ? SaveCheckpoint(*att) : "";
      std::lock_guard<std::mutex> lock(mu_);
      if (!started) {
        att->error = end.exit.error;
      } else if (end.supervisor_lost || end.exit.fenced) {
        // Killed behind the job's back (its supervisor died, or fenced it while this agent
        // was unresponsive): the node's fault, not the job's. Say hello again to report it
        // lost, which requeues the job without counting it against the job.
        att->lost = true;
        reregister_ = true;
        Log("attempt %s was killed by %s; reporting it lost", att->id,
            end.supervisor_lost ? "the loss of its supervisor" : "its supervisor (lease ran out)");
      } else {
        att->exit = end.exit.info;
        att->final_checkpoint = manifest;
        att->out_of_memory = end.exit.out_of_memory;
      }
      PersistLocked(*att);
      dirty_ = true;
      cv_.notify_all();
    });
  };
  return cb;
}

void Agent::StartAttempt(proto::Assign assign) {
  std::string dir = WorkDir(assign.attempt_id);
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  Status prepared =
      ec ? Status::Internal("cannot create " + dir + ": " + ec.message()) : Status::Ok();
  if (prepared.ok() && !assign.workdir_blob.empty()) {
    HttpClient http(url_, BearerToken(), std::chrono::seconds(60));
    auto resp = http.Request("GET", "/v1/blobs/" + assign.workdir_blob);
    if (!resp.ok()) {
      prepared = resp.status();
    } else if (resp->status != 200) {
      prepared = Status::Unavailable("fetching workdir: HTTP " + std::to_string(resp->status));
    } else {
      prepared = UnpackArchive(resp->body, dir, kMaxWorkdirBytes, kMaxWorkdirEntries);
    }
  }
  // The job's checkpoint directory: the server's latest complete checkpoint, or empty. Local
  // leftovers of an earlier attempt are never trusted over the server's account.
  const std::string ckpt = CheckpointDir(assign.job_id);
  bool resumed = false;
  std::string restore_warning;
  if (prepared.ok()) {
    if (!assign.checkpoint.empty()) {
      checkpoint::HttpBlobTransport transport(url_, BearerToken());
      Status r = checkpoint::RestoreCheckpoint(assign.checkpoint, ckpt, transport);
      resumed = r.ok();
      if (!r.ok()) {
        restore_warning = "sluice: could not restore checkpoint " +
                          assign.checkpoint.substr(0, 12) + " (" + r.message() +
                          "); starting without it";
        Log("%s", restore_warning);
      }
    }
    if (!resumed) {
      fs::remove_all(ckpt, ec);
      fs::create_directories(ckpt, ec);
      if (ec) prepared = Status::Internal("cannot create " + ckpt + ": " + ec.message());
    }
  }
  std::shared_ptr<Attempt> a;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = attempts_.find(assign.attempt_id);
    if (it == attempts_.end()) return;
    a = it->second;
    a->checkpoint_dir = ckpt;
    a->grace_ms = assign.grace_ms;
    a->last_checkpoint = resumed ? assign.checkpoint : "";
    if (!restore_warning.empty()) {
      proto::LogEntry e;
      e.seq = a->next_seq++;
      e.stream = "stderr";
      e.ts_ms = RealClock::Get()->NowMillis();
      e.text = restore_warning;
      a->lines.push_back(std::move(e));
    }
    if (a->cancel_pending && prepared.ok()) prepared = Status::Cancelled("cancelled before start");
    if (!prepared.ok()) {
      a->error = prepared.message();
      PersistLocked(*a);
      dirty_ = true;
      cv_.notify_all();
      return;
    }
  }
  // A warm box when one is ready. Not for GPU jobs: a box shows only the GPUs it was built for,
  // and a GPU job's start takes seconds in CUDA anyway.
  std::unique_ptr<WarmBox> warm;
  if (assign.gpus.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    warm = TakeWarmLocked();
  }
  if (warm) return StartInWarmBox(std::move(warm), assign, a, resumed);
  ProcessSpec spec;
  spec.script = assign.run;
  spec.cwd = dir;
  spec.env = JobEnv(assign);
  spec.env["SLUICE_CHECKPOINT_DIR"] = ckpt;
  if (resumed) spec.env["SLUICE_RESUMED"] = "1";
  if (sandbox_.usable) {
    SandboxSpec box;
    box.workdir = dir;
    box.checkpoint_dir = ckpt;
    box.gpus = assign.gpus;
    box.hidden = HiddenPaths();
    spec.env["HOME"] = dir;
    // The job's uid has no passwd entry; tools that ask for a user name (Python's getpass, and
    // with it PyTorch's compile cache) read these first.
    spec.env["USER"] = spec.env["LOGNAME"] = "sluice-job";
    if (sandbox_.own_uid) {
      int slot;
      {
        std::lock_guard<std::mutex> lock(mu_);
        slot = a->slot = FreeSlotLocked();
      }
      if (slot >= kMaxJobSlots) {
        std::lock_guard<std::mutex> lock(mu_);
        a->error = "this node already runs " + std::to_string(kMaxJobSlots) + " jobs";
        PersistLocked(*a);
        dirty_ = true;
        cv_.notify_all();
        return;
      }
      uid_t uid = SandboxUid(static_cast<uid_t>(opt_.first_job_uid), slot);
      box.uid = uid;
      // Unpacked and restored as root: the job's from here on.
      Status owned = ChownTree(dir, uid, uid);
      if (owned.ok()) owned = ChownTree(ckpt, uid, uid);
      if (!owned.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        a->error = "cannot hand its directories to the job's user: " + owned.message();
        PersistLocked(*a);
        dirty_ = true;
        cv_.notify_all();
        return;
      }
    }
    spec.wrapper = SandboxArgv(sandbox_, box);
  }
  std::unique_ptr<AttemptCgroup> cgroup;
  if (cgroups_.usable()) {
    CgroupLimits limits;
    limits.memory_bytes = static_cast<int64_t>(assign.memory_gb * 1024.0 * 1024.0 * 1024.0);
    limits.cpus = assign.cpus;
    limits.max_pids = opt_.max_pids_per_job;
    auto cg = AttemptCgroup::Create(cgroups_, assign.attempt_id, limits);
    if (!cg.ok()) {
      // The node sells limited slices; a job it cannot confine does not run.
      std::lock_guard<std::mutex> lock(mu_);
      a->error = "cannot create its cgroup: " + cg.status().message();
      PersistLocked(*a);
      dirty_ = true;
      cv_.notify_all();
      return;
    }
    cgroup = std::move(*cg);  // its supervisor joins the job to it
  }
  supervisor::Spec sup;
  sup.attempt_id = assign.attempt_id;
  sup.process = spec;
  if (cgroup) sup.cgroups = cgroups_;
  const std::string sup_dir = SupervisorDir(assign.attempt_id);
  fs::create_directories(sup_dir, ec);
  fs::permissions(sup_dir, fs::perms::owner_all, ec);
  {
    std::lock_guard<std::mutex> lock(mu_);
    sup.first_seq = a->next_seq;
    sup.lease_until = leases_.Until(a->id);
    sup.kill_at = KillAtLocked(sup.lease_until);
    a->cgroup = std::move(cgroup);
    a->checkpoint_interval_ms = assign.checkpoint_interval_ms;
  }
  // Not under mu_: it waits for the job to start, and the supervisor's reports take mu_.
  auto proc = SupervisedJob::Start(supervisor_exe_, sup_dir, sup, JobCallbacks(a));
  std::lock_guard<std::mutex> lock(mu_);
  if (!proc.ok()) {
    a->error = "cannot start its supervisor: " + proc.status().message();
    PersistLocked(*a);
  } else {
    StartedLocked(a, std::move(*proc));
  }
  dirty_ = true;
  cv_.notify_all();
}

void Agent::StartedLocked(const std::shared_ptr<Attempt>& a, std::unique_ptr<SupervisedJob> job) {
  a->proc = std::move(job);
  a->pgid = a->proc->pgid();
  a->start_time = a->pgid > 0 ? ProcessStartTime(a->pgid) : "";
  PersistLocked(*a);
  if (a->cancel_pending) {
    a->proc->Terminate(std::chrono::milliseconds(a->grace_ms));  // cancelled while starting
  }
  StartCheckpointsLocked(a);
  dirty_ = true;
  cv_.notify_all();
}

void Agent::StartCheckpointsLocked(const std::shared_ptr<Attempt>& a) {
  if (a->checkpoint_interval_ms <= 0) return;
  std::weak_ptr<Attempt> weak = a;
  SpawnLocked(
      [this, weak, interval = a->checkpoint_interval_ms] { CheckpointLoop(weak, interval); });
}

}  // namespace sluice::agent::internal
