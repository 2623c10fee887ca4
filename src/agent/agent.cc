#include "agent/agent_internal.h"
#include "agent/attempt_outbox.h"

namespace sluice::agent {
namespace internal {

void Agent::OnMessage(std::string_view text) {
  auto msg = ParseJson(text);
  if (!msg.ok() || !msg->is_object()) {
    Log("ignoring a malformed message from the server");
    return;
  }
  auto type_field = GetString(*msg, "type");
  const std::string type = type_field.ok() ? *type_field : "";
  // Every message is read through its type (common/agent_protocol.h); one that does not parse
  // is logged and ignored, never half-applied.
  auto malformed = [&](const Status& s) {
    Log("ignoring a malformed %s from the server: %s", type.empty() ? "message" : type,
        s.message());
  };
  if (type == "reverify") {
    auto m = proto::ReverifyFromJson(*msg);
    if (!m.ok()) return malformed(m.status());
    std::string trigger = m->reason == "registration" ? "registration"
                          : m->reason == "scheduled"  ? "schedule"
                          : m->reason == "on-demand"  ? "on-demand"
                                                      : "re-verification";
    std::lock_guard<std::mutex> lock(mu_);
    Log("the server asks for the conformance suite (%s)", m->reason);
    verify_requested_ = trigger;
    verify_nonce_ = m->nonce;
    if (!verify_running_) {
      verify_running_ = true;
      SpawnLocked([this] { VerifyLoop(); });
    }
    cv_.notify_all();
    return;
  }
  if (type == "welcome") {
    auto m = proto::WelcomeFromJson(*msg);
    if (!m.ok()) return malformed(m.status());
    std::lock_guard<std::mutex> lock(mu_);
    if (!m->credential.empty()) {
      // Enrolled: this credential is the node's only proof from now on (the server keeps just
      // its hash), so it is on disk before anything relies on it.
      Status saved = WriteFileAtomic(CredentialPath(), m->credential + "\n", 0600);
      if (!saved.ok()) {
        Log("cannot save the node credential (%s); stopping, as the node could not prove itself "
            "on its next connection",
            saved.message());
        fatal_ = true;
        stopping_ = true;
        cv_.notify_all();
        ::kill(::getpid(), SIGTERM);  // wake the main thread's signal wait
        return;
      }
      token_ = m->credential;
      enrolled_ = true;
      Log("enrolled; node credential saved to %s", CredentialPath());
    }
    welcomed_ = true;
    node_id_ = m->node_id;
    heartbeat_ms_ = std::max<int64_t>(100, m->heartbeat_interval_ms);
    if (m->lease_ms > 0) {
      leases_.SetLeaseLength(m->lease_ms);
      lease_ms_ = m->lease_ms;
      server_grace_ms_ = m->heartbeat_grace_ms;
      // At least three heartbeats per lease: one slow reply must not freeze healthy jobs.
      if (m->lease_ms >= 300) heartbeat_ms_ = std::min(heartbeat_ms_, m->lease_ms / 3);
    }
    (void)WriteFileAtomic(opt_.data_dir + "/node.id", node_id_ + "\n");
    Log("registered as node %s", node_id_);
    return;
  }
  if (type == "assign") {
    auto a = proto::AssignFromJson(*msg);
    if (!a.ok()) return malformed(a.status());
    HandleAssign(*a);
    return;
  }
  if (type == "cancel" || type == "preempt") {
    // Both stop the process group the same way (SIGTERM, grace, SIGKILL); the server knows
    // which it asked for and records the attempt as cancelled or preempted.
    auto m = proto::StopFromJson(*msg);
    if (!m.ok()) return malformed(m.status());
    std::lock_guard<std::mutex> lock(mu_);
    auto it = attempts_.find(m->attempt_id);
    if (it == attempts_.end()) return;
    if (type == "preempt") Log("preempting %s: %s", m->attempt_id, m->cause);
    auto& a = *it->second;
    if (a.proc) {
      a.proc->Terminate(std::chrono::milliseconds(m->grace_ms));
    } else {
      a.cancel_pending = true;
    }
  } else if (type == "kill") {
    auto m = proto::KillFromJson(*msg);
    if (!m.ok()) return malformed(m.status());
    // Not placed here any more (the server moved it while we were apart): killed at once, never
    // thawed for a grace period, since another node may be running it by now.
    std::lock_guard<std::mutex> lock(mu_);
    auto it = attempts_.find(m->attempt_id);
    if (it == attempts_.end()) return;
    if (it->second->proc) {
      KillMovedLocked(*it->second);
    } else {
      it->second->cancel_pending = true;
    }
  } else if (type == "lease") {
    auto m = proto::LeaseFromJson(*msg);
    if (!m.ok()) return malformed(m.status());
    std::lock_guard<std::mutex> lock(mu_);
    OnLeaseLocked(*m);
  } else if (type == "log_ack") {
    auto m = proto::LogAckFromJson(*msg);
    if (!m.ok()) return malformed(m.status());
    std::lock_guard<std::mutex> lock(mu_);
    auto it = attempts_.find(m->attempt_id);
    if (it == attempts_.end()) return;
    AckLogs(*it->second, m->seq);
  } else if (type == "exit_ack") {
    auto m = proto::ExitAckFromJson(*msg);
    if (!m.ok()) return malformed(m.status());
    std::lock_guard<std::mutex> lock(mu_);
    ForgetLocked(m->attempt_id);
  } else if (type == "error") {
    auto m = proto::ErrorFromJson(*msg);
    if (!m.ok()) return malformed(m.status());
    std::lock_guard<std::mutex> lock(mu_);
    Log("server says: %s", m->message);
    // Refused at hello (a claim the probe contradicts, a revoked node, a node id enrolled with a
    // credential this agent lacks): retrying cannot help.
    if (!welcomed_ && (m->code == "FAILED_PRECONDITION" || m->code == "PERMISSION_DENIED")) {
      fatal_ = true;
      stopping_ = true;
      cv_.notify_all();
      ::kill(::getpid(), SIGTERM);  // wake the main thread's signal wait
    }
  }
}

bool Agent::GpuBusyLocked() const {
  if (inventory_.gpus.empty()) return false;
  for (const auto& [id, a] : attempts_) {
    if (a->proc && !a->exit) return true;
  }
  return false;
}

void Agent::VerifyLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_ && !verify_requested_.empty()) {
    // Allocating GPU memory and launching kernels under a running job would disturb it and
    // measure the job, not the machine: wait until the GPUs are idle.
    if (GpuBusyLocked()) {
      Log("conformance suite deferred until running jobs finish");
      cv_.wait(lock, [&] { return stopping_ || !GpuBusyLocked(); });
      continue;
    }
    ConformanceOptions o = opt_.conformance;
    o.trigger = verify_requested_;
    verify_requested_.clear();
    const std::string nonce = verify_nonce_;  // this run answers the newest request
    const std::string token = token_;
    if (o.disk_dir.empty()) o.disk_dir = opt_.data_dir;
    Inventory inv = inventory_;
    lock.unlock();
    // Probe again first: a driver, toolkit or PyTorch build installed since registration must
    // reach the server, whose fingerprints then deverify the node and ask for a new run.
    if (auto now = TryProbeHost(probe_options_); now.ok()) {
      bool changed =
          audit::HardwareFingerprint(*now).sha256 != audit::HardwareFingerprint(inv).sha256 ||
          audit::SoftwareFingerprint(*now).sha256 != audit::SoftwareFingerprint(inv).sha256;
      if (changed) {
        lock.lock();
        Log("the machine changed since registration (new probe); registering it again");
        inventory_ = *now;
        reregister_ = true;
        cv_.notify_all();
        continue;  // the server asks for the suite again once it has the new inventory
      }
    } else {
      Log("probe before the conformance suite failed: %s", now.status().message());
    }
    HttpLinkProbe link(url_, token);
    conformance::Report report = RunSuite(o, inv, &link, *RealClock::Get());
    int pass = 0, fail = 0, skip = 0;
    for (const auto& c : report.checks) {
      pass += c.outcome == conformance::Outcome::kPass;
      fail += c.outcome == conformance::Outcome::kFail;
      skip += c.outcome == conformance::Outcome::kSkip;
      if (c.outcome == conformance::Outcome::kFail)
        Log("conformance: %s failed: %s", c.name, c.reason);
    }
    Log("conformance suite (%s): %s", report.trigger,
        std::to_string(pass) + " passed, " + std::to_string(fail) + " failed, " +
            std::to_string(skip) + " skipped in " + std::to_string(report.duration_ms) + " ms");
    lock.lock();
    pending_report_ = DumpJson(proto::ToJson(proto::ConformanceMessage{ToJson(report), nonce}));
    dirty_ = true;
    cv_.notify_all();
  }
  verify_running_ = false;
}

void Agent::FlushLocked(WsClient& ws) {
  if (!pending_report_.empty()) {
    ws.Send(pending_report_);
    pending_report_.clear();
  }
  for (auto& [id, a] : attempts_) {
    for (const auto& msg : TakeUnsent(*a, a->proc != nullptr)) ws.Send(DumpJson(msg));
  }
}

Status Agent::ConnectOnce() {
  WsClient::Options o;
  o.url = url_;
  o.path = "/v1/agent/connect";
  o.headers.emplace_back("Authorization", "Bearer " + BearerToken());
  o.keepalive_interval =
      std::chrono::milliseconds(static_cast<int64_t>(opt_.keep_alive_interval_s * 1000));
  o.idle_timeout = o.keepalive_interval * 3;
  auto ws = std::make_shared<WsClient>(
      o, [this](std::string_view m) { OnMessage(m); },
      [this](Status why) {
        std::lock_guard<std::mutex> lock(mu_);
        connected_ = false;
        cv_.notify_all();
      });
  SLUICE_RETURN_IF_ERROR(ws->Connect());

  std::unique_lock<std::mutex> lock(mu_);
  proto::Hello hello;
  hello.node_id = node_id_;
  hello.name = opt_.name;
  hello.inventory = inventory_;
  hello.price_per_gpu_hour = opt_.price_per_gpu_hour;
  hello.price_per_cpu_hour = opt_.price_per_cpu_hour;
  hello.interruptible_price_per_gpu_hour = opt_.interruptible_price_per_gpu_hour;
  hello.interruptible_price_per_cpu_hour = opt_.interruptible_price_per_cpu_hour;
  hello.region = opt_.region;
  hello.agent_version = kVersion;
  hello.claims = opt_.claims;
  welcomed_ = false;
  std::vector<std::string> lost;
  for (auto& [id, a] : attempts_) {
    proto::AttemptReport r;
    r.attempt_id = id;
    r.lost = a->lost;
    r.error = a->error;
    if (a->exit) {
      r.exit_code = a->exit->exit_code;
      r.signal = a->exit->signal;
    }
    r.running = !a->lost && !a->exit && a->error.empty();
    hello.attempts.push_back(r);
    if (a->lost) lost.push_back(id);
    // Everything unacknowledged goes again on this connection.
    RewindForReconnect(*a);
  }
  ws_ = ws;
  connected_ = true;
  ws->Send(DumpJson(proto::ToJson(hello)));
  for (const auto& id : lost) ForgetLocked(id);  // reported once; the server marks them lost
  dirty_ = true;
  auto next_heartbeat = std::chrono::steady_clock::now();
  while (connected_ && !stopping_ && !reregister_) {
    if (dirty_) {
      dirty_ = false;
      FlushLocked(*ws);
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= next_heartbeat) {
      leases_.Sent(++heartbeat_seq_, SteadyMs());
      ws->Send(DumpJson(proto::ToJson(proto::Heartbeat{heartbeat_seq_})));
      next_heartbeat = now + std::chrono::milliseconds(heartbeat_ms_);
    }
    cv_.wait_until(lock, next_heartbeat,
                   [&] { return dirty_ || !connected_ || stopping_ || reregister_; });
  }
  if (reregister_ && !stopping_) {
    // The machine changed (VerifyLoop): say hello again with the new inventory.
    reregister_ = false;
    ws_.reset();
    lock.unlock();
    ws->Close();
    return Status::AlreadyExists("re-registering with the changed inventory");
  }
  bool stopping = stopping_;
  if (stopping) FlushLocked(*ws);  // last words: exits of the jobs stopped with the agent
  ws_.reset();
  lock.unlock();
  ws->Close();
  return stopping ? Status::Cancelled("stopping") : Status::Unavailable("connection lost");
}

void Agent::ConnectionLoop() {
  std::mt19937 rng(std::random_device{}());
  double backoff = 0.1;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
    }
    auto started = std::chrono::steady_clock::now();
    Status s = ConnectOnce();
    if (s.code() == StatusCode::kCancelled) return;
    if (s.code() == StatusCode::kUnauthenticated || s.code() == StatusCode::kPermissionDenied) {
      std::lock_guard<std::mutex> lock(mu_);
      // Never fall back to the join token: it cannot speak for an enrolled node, and a revoked
      // node must stay off until its provider enrols it again.
      if (enrolled_) {
        Log("node credential refused (revoked?): remove %s to enrol again (%s)",
            CredentialPath() + " and " + opt_.data_dir + "/node.id", s.message());
      } else {
        Log("the server refused the join token: %s", s.message());
      }
      fatal_ = true;
      stopping_ = true;
      cv_.notify_all();
      ::kill(::getpid(), SIGTERM);  // wake the main thread's signal wait
      return;
    }
    if (s.code() == StatusCode::kAlreadyExists) continue;  // re-registering: at once
    if (std::chrono::steady_clock::now() - started > std::chrono::seconds(10)) backoff = 0.1;
    Log("server unreachable (%s); retrying", s.message());
    std::uniform_real_distribution<double> jitter(0.5, 1.0);
    auto wait = std::chrono::milliseconds(static_cast<int64_t>(backoff * jitter(rng) * 1000));
    backoff = std::min(backoff * 2, opt_.max_backoff_s);
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, wait, [&] { return stopping_; });
  }
}

int Agent::Run() {
  // Blocked before any thread exists (process monitors, supervisors' readers, warm boxes'
  // builders all start threads): every thread inherits the mask, so a stop signal can only be
  // taken by the sigwait below, never kill the agent through a thread that did not block it.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGUSR1);  // the provider takes the node back: preempt its jobs
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  auto token = ReadFile(opt_.join_token_file);
  if (!token.ok()) {
    std::fprintf(stderr, "sluice agent: --join-token-file: %s\n", token.status().message().c_str());
    return 2;
  }
  // The secret on the first line, then optional `ca-sha256:` / `server:` lines (token_file.h).
  auto join_file = ParseTokenFile(*token);
  if (!join_file.ok()) {
    std::fprintf(stderr, "sluice agent: --join-token-file %s: %s\n", opt_.join_token_file.c_str(),
                 join_file.status().message().c_str());
    return 2;
  }
  token_ = join_file->secret;
  auto url = ParseUrl(opt_.server_url);
  if (!url.ok()) {
    std::fprintf(stderr, "sluice agent: --server: %s\n", url.status().message().c_str());
    return 2;
  }
  url_ = *url;
  // How an https/wss server is verified (docs/design-notes.md, "TLS"): --ca-file, else the join
  // token's CA pin, else the system store. url_ carries it into every client the agent makes.
  if (!opt_.ca_file.empty()) {
    auto ca = ReadFile(opt_.ca_file);
    if (!ca.ok()) {
      std::fprintf(stderr, "sluice agent: --ca-file: %s\n", ca.status().message().c_str());
      return 2;
    }
    url_.tls.ca_pem = *ca;
  } else {
    url_.tls.ca_sha256 = join_file->ca_sha256;
  }
  std::error_code ec;
  fs::create_directories(opt_.data_dir + "/work", ec);
  if (ec) {
    std::fprintf(stderr, "sluice agent: cannot create --data-dir %s: %s\n", opt_.data_dir.c_str(),
                 ec.message().c_str());
    return 1;
  }
  if (opt_.supervisor_path.empty()) {
    std::error_code exe_ec;
    fs::path self = fs::read_symlink("/proc/self/exe", exe_ec);
    supervisor_exe_ = (self.parent_path() / "sluice-supervisor").string();
  } else {
    supervisor_exe_ = fs::absolute(opt_.supervisor_path, ec).string();
  }
  // Each supervisor's control socket lives in the data dir, and a unix socket's path has at most
  // 107 bytes: say so now rather than fail every job.
  if (const std::string sock =
          SupervisorDir("att-0123456789abcdef") + "/" + supervisor::kSocketFile;
      sock.size() >= sizeof(sockaddr_un::sun_path)) {
    std::fprintf(stderr,
                 "sluice agent: --data-dir %s is too long (%zu bytes): its jobs' control sockets "
                 "(%s) would not fit a unix socket's %zu-byte path; use one of at most %zu "
                 "bytes\n",
                 opt_.data_dir.c_str(), opt_.data_dir.size(), sock.c_str(),
                 sizeof(sockaddr_un::sun_path) - 1,
                 opt_.data_dir.size() - (sock.size() - (sizeof(sockaddr_un::sun_path) - 1)));
    return 2;
  }
  if (::access(supervisor_exe_.c_str(), X_OK) != 0) {
    std::fprintf(stderr,
                 "sluice agent: cannot run the job supervisor %s: %s.\n"
                 "It is built and installed beside `sluice` (the `sluice-supervisor` target), "
                 "or named with --supervisor; every job runs under one.\n",
                 supervisor_exe_.c_str(), std::strerror(errno));
    return 2;
  }
  ProbeOptions& popt = probe_options_;
  popt.data_dir = opt_.data_dir;
  popt.nvidia_smi_file = opt_.nvidia_smi_file;
  popt.skip_software = opt_.skip_software_probe;
  auto inv = TryProbeHost(popt);
  if (!inv.ok()) {
    std::fprintf(stderr, "sluice agent: probe: %s\n", inv.status().message().c_str());
    return 1;
  }
  inventory_ = *inv;
  Log("probed %s: %s", inventory_.hostname,
      std::to_string(inventory_.cpu_cores) + " CPUs, " +
          std::to_string(inventory_.memory_mib / 1024) + " GiB, " +
          std::to_string(inventory_.gpus.size()) + " GPUs (" + inventory_.gpu_source + ")");
  // Enrolled before: the node proves itself with its own credential, and the join token (read
  // above for what else it carries) is not sent (docs/design-notes.md "Node identity").
  if (auto cred = ReadFile(CredentialPath()); cred.ok() && !Trim(*cred).empty()) {
    token_ = Trim(*cred);
    enrolled_ = true;
    Log("using the node credential in %s", CredentialPath());
  }
  if (auto id = ReadFile(opt_.data_dir + "/node.id"); id.ok()) node_id_ = Trim(*id);
  if (opt_.no_sandbox) {
    inventory_.sandbox = "none";
    Log("sandbox: off (--no-sandbox): jobs run as this agent's user and can read whatever it "
        "can, tokens included; offers show `sandbox: none`");
  } else {
    DetectJobSandbox();
    if (!sandbox_.usable) {
      std::fprintf(stderr,
                   "sluice agent: cannot sandbox jobs here: %s.\n"
                   "Jobs from other accounts must not run unboxed on your machine. Install "
                   "bubblewrap and allow user namespaces, or start with --no-sandbox if every "
                   "job this node runs is your own.\n",
                   sandbox_.why_not.c_str());
      return 1;
    }
    inventory_.sandbox = "bwrap";
    Log("sandbox: %s", sandbox_.Describe());
  }
  if (sandbox_.usable) {
    // The rules match the jobs' own uids, so only a root agent (jobs with uids of their own)
    // can have them; a lent H200 machine's image had no iptables at all.
    std::string why = "the agent is not root, so its jobs keep its uid";
    if (sandbox_.own_uid) {
      std::string said;
      auto rc = RunHostScript(InstallScript(JobNetwork()), &said);
      network_filtered_ = rc.ok() && *rc == 0;
      why = rc.ok() ? (said.empty() ? "iptables failed" : said) : rc.status().message();
      // IPv4 may have taken its rules before IPv6 failed: leave no half-filter behind.
      if (!network_filtered_) (void)RunHostScript(RemoveScript(JobNetwork()), nullptr);
    }
    if (network_filtered_) {
      Log("job network: jobs may not reach 169.254.169.254 (cloud credentials) or local TCP port "
          "%s (iptables chain %s)",
          std::to_string(url_.port), JobNetwork().Chain());
    } else if (!opt_.allow_unfiltered_network) {
      std::fprintf(stderr,
                   "sluice agent: cannot filter the jobs' network here: %s.\n"
                   "Jobs from other accounts could read this machine's cloud credentials at "
                   "169.254.169.254. Install iptables and run the agent as root, or start with "
                   "--allow-unfiltered-network if this machine has no cloud credentials to "
                   "lose.\n",
                   why.c_str());
      return 1;
    } else {
      inventory_.sandbox = "bwrap-open-network";
      Log("job network: NOT filtered (%s; --allow-unfiltered-network): jobs can reach the cloud "
          "metadata address 169.254.169.254 and this machine's local ports; offers show "
          "`sandbox: bwrap-open-network`",
          why);
    }
  }
  cgroups_ = DetectCgroups(opt_.cgroup_root);
  if (cgroups_.usable()) {
    Log("job limits: %s", cgroups_.Describe());
    if (int n = RemoveStaleCgroups(cgroups_, 300); n > 0) {
      Log("removed %s empty job cgroups left by agents that were killed", std::to_string(n));
    }
  } else {
    Log("job limits: none (%s): jobs run without CPU, memory or process-count limits",
        cgroups_.Describe());
  }
  RecoverAttempts();
  // Warm boxes of a previous instance: their supervisors kill them once no agent is connected.
  for (const std::string& parent :
       {opt_.data_dir + "/work", opt_.data_dir + "/checkpoints", AttemptsDir()}) {
    for (const auto& e : fs::directory_iterator(parent, ec)) {
      if (e.path().filename().string().rfind("warm-", 0) == 0) fs::remove_all(e.path(), ec);
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    FillWarmLocked();
  }

  std::thread conn([this] { ConnectionLoop(); });
  {
    std::lock_guard<std::mutex> lock(mu_);
    SpawnLocked([this] { FenceLoop(); });
  }
  if (!opt_.spot_metadata_url.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    SpawnLocked([this] { SpotNoticeLoop(); });
  }
  int sig = 0;
  for (;;) {
    sigwait(&stop_signals, &sig);
    if (sig != SIGUSR1) break;
    std::lock_guard<std::mutex> lock(mu_);
    PreemptAllLocked("the provider signalled the agent (SIGUSR1)");
  }
  bool fatal;
  {
    std::unique_lock<std::mutex> lock(mu_);
    fatal = fatal_;
    if (!fatal) Log("%s received: stopping jobs and shutting down", strsignal(sig));
    // Running jobs get SIGTERM and the grace period; their exits are reported if connected.
    draining_ = true;
    while (!warm_.empty()) {
      auto w = std::move(warm_.front());
      warm_.pop_front();
      DiscardWarmLocked(std::move(w));
    }
    for (auto& [id, a] : attempts_) {
      if (a->proc && a->proc->running()) {
        // Its supervisor thaws a frozen job first: it gets its SIGTERM and grace like the others.
        a->proc->Terminate(
            std::chrono::milliseconds(static_cast<int64_t>(opt_.stop_grace_s * 1000)));
      }
    }
    auto deadline =
        std::chrono::steady_clock::now() +
        std::chrono::milliseconds(static_cast<int64_t>(opt_.stop_grace_s * 1000) + 3000);
    cv_.wait_until(lock, deadline, [&] {
      for (auto& [id, a] : attempts_) {
        if (a->proc && !a->exit) return false;
      }
      return true;
    });
    stopping_ = true;
    dirty_ = true;
    cv_.notify_all();
  }
  conn.join();
  if (network_filtered_) (void)RunHostScript(RemoveScript(JobNetwork()), nullptr);
  std::map<std::string, std::shared_ptr<Attempt>> attempts;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return active_workers_ == 0; });
    attempts.swap(attempts_);
  }
  attempts.clear();  // kills what is left and joins the monitor threads, outside mu_
  return fatal ? 1 : 0;
}

}  // namespace internal

int RunAgent(const AgentOptions& options) {
  AgentOptions absolute = options;
  std::error_code ec;
  // The sandbox binds paths by name: they must not depend on the agent's working directory.
  absolute.data_dir = internal::fs::absolute(options.data_dir, ec).lexically_normal().string();
  if (ec) absolute.data_dir = options.data_dir;
  while (absolute.data_dir.size() > 1 && absolute.data_dir.back() == '/') {
    absolute.data_dir.pop_back();
  }
  internal::Agent agent(std::move(absolute));
  return agent.Run();
}

}  // namespace sluice::agent
