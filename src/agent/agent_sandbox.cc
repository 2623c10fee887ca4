// The job sandbox as the agent runs it: detection, network rules, job uid slots, and warm
// boxes built ahead of their jobs (docs/design-notes.md "Job sandbox", "Warm boxes").
#include "agent/agent_internal.h"

namespace sluice::agent::internal {

JobNetworkRules Agent::JobNetwork() const {
  JobNetworkRules r;
  r.first_uid = opt_.first_job_uid;
  r.last_uid = opt_.first_job_uid + kMaxJobSlots - 1;
  r.local_ports = {url_.port};
  return r;
}

Result<int> Agent::RunHostScript(const std::string& script, std::string* said) const {
  ProcessSpec spec;
  spec.script = script;
  spec.cwd = "/";
  spec.env = {{"PATH", "/usr/sbin:/usr/bin:/sbin:/bin"}, {"LANG", "C.UTF-8"}};
  auto proc = Process::Start(
      spec,
      [said](OutputStream, std::string_view line) {
        if (said) *said = std::string(line);
      },
      nullptr);
  if (!proc.ok()) return proc.status();
  return (*proc)->Wait().exit_code;
}

int Agent::FreeSlotLocked() const {
  std::set<int> used = warm_slots_;
  for (const auto& [id, a] : attempts_) {
    if (a->slot >= 0) used.insert(a->slot);
  }
  int slot = 0;
  while (used.count(slot)) ++slot;
  return slot;
}

std::vector<std::string> Agent::HiddenPaths() const {
  std::vector<std::string> hidden = {opt_.data_dir};
  std::error_code ec;
  if (!opt_.join_token_file.empty()) {
    hidden.push_back(fs::absolute(opt_.join_token_file, ec).lexically_normal().string());
  }
  return hidden;
}

void Agent::DetectJobSandbox() {
  const bool root = geteuid() == 0;
  SandboxSpec probe_spec;
  probe_spec.workdir = opt_.data_dir + "/work";
  probe_spec.checkpoint_dir = opt_.data_dir + "/checkpoints";
  probe_spec.hidden = HiddenPaths();
  if (root) probe_spec.uid = opt_.first_job_uid;
  std::error_code ec;
  fs::create_directories(probe_spec.checkpoint_dir, ec);
  sandbox_ = DetectSandbox(root, probe_spec, [&](const std::vector<std::string>& argv) {
    ProcessSpec spec;
    spec.script = "true";
    spec.cwd = "/";
    spec.wrapper = argv;
    std::string said;  // bwrap's own complaint, for the start line
    auto proc = Process::Start(
        spec, [&said](OutputStream, std::string_view line) { said = std::string(line); }, nullptr);
    if (!proc.ok()) return Result<int>(proc.status());
    int rc = (*proc)->Wait().exit_code;
    if (rc != 0 && !said.empty()) return Result<int>(Status::FailedPrecondition(said));
    return Result<int>(rc);
  });
}

void Agent::FillWarmLocked() {
  if (draining_ || stopping_ || warm_failures_ >= 3) return;
  while (static_cast<int>(warm_.size()) + warm_building_ < opt_.warm_boxes) {
    int slot = -1;
    if (sandbox_.own_uid) {
      slot = FreeSlotLocked();
      if (slot >= kMaxJobSlots) return;
      warm_slots_.insert(slot);
    }
    ++warm_building_;
    SpawnLocked([this, slot] { BuildWarmBox(slot); });
  }
}

void Agent::BuildWarmBox(int slot) {
  auto w = std::make_unique<WarmBox>();
  w->name = "warm-" + RandomHex(6);
  w->slot = slot;
  const std::string work = WorkDir(w->name), ckpt = WarmCheckpointDir(w->name),
                    dir = SupervisorDir(w->name);
  std::error_code ec;
  Status s = Status::Ok();
  for (const auto& d : {work, ckpt, dir}) {
    fs::create_directories(d, ec);
    if (ec) s = Status::Internal("cannot create " + d + ": " + ec.message());
  }
  fs::permissions(dir, fs::perms::owner_all, ec);
  SandboxSpec box;
  box.workdir = work;
  box.checkpoint_dir = ckpt;
  box.hidden = HiddenPaths();
  if (s.ok() && slot >= 0) {
    box.uid = SandboxUid(static_cast<uid_t>(opt_.first_job_uid), slot);
    s = ChownTree(work, box.uid, box.uid);
    if (s.ok()) s = ChownTree(ckpt, box.uid, box.uid);
  }
  supervisor::Spec spec;
  spec.attempt_id = w->name;
  spec.warm = true;
  spec.process.cwd = work;  // the environment stays empty (supervisor_protocol.h, kWarmStub)
  if (sandbox_.usable) spec.process.wrapper = SandboxArgv(sandbox_, box);
  if (s.ok() && cgroups_.usable()) {
    CgroupLimits limits;  // the job's own come with it (AttemptCgroup::Adopt)
    limits.max_pids = opt_.max_pids_per_job;
    auto cg = AttemptCgroup::Create(cgroups_, w->name, limits);
    s = cg.status();
    w->cgroup = cg.ok();
    spec.cgroups = cgroups_;
  }
  SupervisedJob::Callbacks cb;
  cb.on_exit = [this, name = w->name](const SupervisedJob::End& end) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = warm_.begin(); it != warm_.end(); ++it) {
      if ((*it)->name != name) continue;
      // Died unused: killed with its agent's stop, or something is wrong with the box.
      if (!stopping_) {
        ++warm_failures_;
        Log("warm sandbox %s ended before a job came (%s)", name,
            end.exit.error.empty() ? end.exit.info.ToString() : end.exit.error);
        if (warm_failures_ >= 3) Log("warm sandboxes: three failed in a row; not building more");
      }
      auto w = std::move(*it);
      warm_.erase(it);
      DiscardWarmLocked(std::move(w));
      FillWarmLocked();
      return;
    }
  };
  Result<std::unique_ptr<SupervisedJob>> job =
      s.ok() ? SupervisedJob::Start(supervisor_exe_, dir, spec, cb)
             : Result<std::unique_ptr<SupervisedJob>>(s);
  std::lock_guard<std::mutex> lock(mu_);
  --warm_building_;
  if (job.ok()) w->job = std::move(*job);
  if (!job.ok() || draining_ || stopping_ || !w->job->ready()) {
    // Broken (it could not start, or ended): counts towards giving up. Merely slow (built with
    // idle CPU time only, on a busy machine): discarded, and the next one tried.
    if (!job.ok() || (!draining_ && !stopping_ && !w->job->running())) {
      ++warm_failures_;
      Log("cannot build a warm sandbox: %s",
          job.ok() ? std::string("it ended before it was ready") : job.status().message());
    }
    DiscardWarmLocked(std::move(w));
    FillWarmLocked();  // at most three broken ones in a row
    return;
  }
  warm_.push_back(std::move(w));
}

std::unique_ptr<WarmBox> Agent::TakeWarmLocked() {
  while (!warm_.empty()) {
    auto w = std::move(warm_.front());
    warm_.pop_front();
    if (w->job && w->job->ready()) return w;
    DiscardWarmLocked(std::move(w));
  }
  return nullptr;
}

void Agent::DiscardWarmLocked(std::unique_ptr<WarmBox> w) {
  std::shared_ptr<WarmBox> keep(std::move(w));
  SpawnLocked([this, keep] {
    if (keep->job) {
      keep->job->Kill();
      keep->job->Wait();
      keep->job.reset();
    }
    std::error_code ec;
    for (const auto& d :
         {WorkDir(keep->name), WarmCheckpointDir(keep->name), SupervisorDir(keep->name)}) {
      fs::remove_all(d, ec);
    }
    if (keep->cgroup) {
      if (auto cg = AttemptCgroup::Open(cgroups_, keep->name); cg.ok()) {
        for (int i = 0; i < 50 && !(*cg)->Remove().ok(); ++i) {
          (void)(*cg)->KillAll();
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (keep->slot >= 0) warm_slots_.erase(keep->slot);
  });
}

void Agent::StartInWarmBox(std::unique_ptr<WarmBox> w, const proto::Assign& assign,
                           const std::shared_ptr<Attempt>& a, bool resumed) {
  const std::string dir = WorkDir(assign.attempt_id), ckpt = a->checkpoint_dir;
  // What the job sees: the paths the box was built with (bound there, by inode). Unboxed
  // (--no-sandbox), the warm supervisor's stub simply moves to the attempt's own paths.
  const bool boxed = sandbox_.usable;
  const std::string box_work = boxed ? WorkDir(w->name) : dir;
  const std::string box_ckpt = boxed ? WarmCheckpointDir(w->name) : ckpt;
  auto fail = [&](const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    a->error = why;
    PersistLocked(*a);
    dirty_ = true;
    cv_.notify_all();
    DiscardWarmLocked(std::move(w));
  };
  Status s = Status::Ok();
  if (boxed) {
    s = AdoptDirectory(dir, WorkDir(w->name));
    if (s.ok()) s = AdoptDirectory(ckpt, WarmCheckpointDir(w->name));
  } else {
    std::error_code rm;  // unused: the stub changes to the attempt's own dirs
    fs::remove_all(WorkDir(w->name), rm);
    fs::remove_all(WarmCheckpointDir(w->name), rm);
  }
  if (s.ok() && w->slot >= 0) {
    const uid_t uid = SandboxUid(static_cast<uid_t>(opt_.first_job_uid), w->slot);
    s = ChownTree(dir, uid, uid);  // unpacked and restored as root: the job's from here on
    if (s.ok()) s = ChownTree(ckpt, uid, uid);
  }
  if (!s.ok()) return fail("cannot hand its directories to its sandbox: " + s.message());
  std::unique_ptr<AttemptCgroup> cgroup;
  if (w->cgroup) {
    CgroupLimits limits;
    limits.memory_bytes = static_cast<int64_t>(assign.memory_gb * 1024.0 * 1024.0 * 1024.0);
    limits.cpus = assign.cpus;
    limits.max_pids = opt_.max_pids_per_job;
    auto cg = AttemptCgroup::Adopt(cgroups_, w->name, assign.attempt_id, limits);
    if (!cg.ok()) return fail("cannot limit its cgroup: " + cg.status().message());
    cgroup = std::move(*cg);
    w->cgroup = false;  // the attempt's now
  }
  const std::string sup_dir = SupervisorDir(assign.attempt_id);
  std::error_code ec;
  fs::rename(SupervisorDir(w->name), sup_dir, ec);
  if (ec) return fail("cannot rename its supervisor's directory: " + ec.message());
  std::map<std::string, std::string> env = JobEnv(assign);
  env["SLUICE_CHECKPOINT_DIR"] = box_ckpt;
  if (resumed) env["SLUICE_RESUMED"] = "1";
  if (boxed) {  // as for a cold start (StartAttempt)
    env["HOME"] = box_work;
    env["USER"] = env["LOGNAME"] = "sluice-job";
  }
  Json env_json = Json::object();
  for (const auto& [k, v] : env) env_json[k] = v;
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t until = leases_.Until(a->id);
  Json go{{"op", "go"},
          {"dir", sup_dir},
          {"attempt_id", assign.attempt_id},
          {"cwd", box_work},
          {"script", assign.run},
          {"env", env_json},
          {"first_seq", a->next_seq},
          {"until", until},
          {"kill_at", KillAtLocked(until)}};
  a->cgroup = std::move(cgroup);
  a->checkpoint_interval_ms = assign.checkpoint_interval_ms;
  if (!w->job->Go(sup_dir, JobCallbacks(a), go)) {
    // The box died just before: nothing of the job ran.
    a->error = "its sandbox ended before the job could start";
    PersistLocked(*a);
    dirty_ = true;
    cv_.notify_all();
    DiscardWarmLocked(std::move(w));
    FillWarmLocked();
    return;
  }
  Log(boxed ? "%s runs in warm sandbox %s" : "%s runs under warm supervisor %s", a->id, w->name);
  a->slot = w->slot;  // the attempt holds the box's uid now
  warm_slots_.erase(w->slot);
  warm_failures_ = 0;
  StartedLocked(a, std::move(w->job));
  FillWarmLocked();
}

}  // namespace sluice::agent::internal
