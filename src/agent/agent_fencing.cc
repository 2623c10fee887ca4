// Leases (docs/design-notes.md "Leases and fencing"): renewals passed on to the supervisors,
// attempts the server moved killed, and the agent vouching that it is alive.
#include "agent/agent_internal.h"

namespace sluice::agent::internal {

int64_t Agent::KillAtLocked(int64_t until) const {
  if (until == LeaseBook::kForever) return supervisor::kNever;
  // Without a grace from the server (an older one), assume its default: 1.5 leases.
  const int64_t grace = server_grace_ms_ > lease_ms_ ? server_grace_ms_ : lease_ms_ * 3 / 2;
  return until + (grace - lease_ms_) / 2;
}

void Agent::KillMovedLocked(Attempt& a) {
  if (!a.proc || !a.proc->running()) return;
  Log("%s is no longer placed on this node: killed%s", a.id, a.frozen ? " (it was frozen)" : "");
  a.proc->Kill();  // the supervisor kills the whole cgroup, frozen or not
}

void Agent::OnLeaseLocked(const proto::Lease& lease) {
  const std::set<std::string> listed(lease.attempts.begin(), lease.attempts.end());
  std::vector<std::string> running;
  for (const auto& [id, a] : attempts_) {
    if (a->proc && a->proc->running()) running.push_back(id);
  }
  auto out = leases_.Received(lease.seq, lease.lease_ms, listed, running);
  for (const auto& id : out.renewed) {
    const int64_t until = leases_.Until(id);
    attempts_[id]->proc->Lease(until, KillAtLocked(until));  // thaws it if it was frozen
  }
  for (const auto& id : out.not_ours) KillMovedLocked(*attempts_[id]);
}

void Agent::FenceLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    for (auto& [id, a] : attempts_) {
      if (a->proc && a->proc->running()) a->proc->Ping();
    }
    for (auto& w : warm_) w->job->Ping();  // a box whose agent is silent kills itself
    cv_.wait_for(lock, std::chrono::seconds(1), [&] { return stopping_; });
  }
}

}  // namespace sluice::agent::internal
