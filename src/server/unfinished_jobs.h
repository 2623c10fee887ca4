// UnfinishedJobs: each account's unfinished jobs (any state store::IsTerminal is false for), kept
// as the core's job map changes (ServerCore::IndexJobLocked; issue 12 item 3, docs/design-notes.md
// "The submit quota"). The submit quota (--max-active-jobs-per-account) reads one account's count
// here; before, every submit of a user walked every live job under the core's lock, 52,000 of
// them behind bench/placement's deep queue (`--as-user 1`, docs/benchmarks.md).
#pragma once

#include <string>
#include <unordered_map>

namespace sluice::server {

class UnfinishedJobs {
 public:
  // Job `job_id`, owned by `owner`, is unfinished (true) or not (finished, deleted, never was).
  // Idempotent: saying the same twice counts once. A job's owner never changes, but a change is
  // counted as one (the old owner's count drops).
  void Set(const std::string& job_id, const std::string& owner, bool unfinished);
  // How many of `owner`'s jobs are unfinished.
  int Of(const std::string& owner) const;
  // Owners with at least one unfinished job, and their counts.
  const std::unordered_map<std::string, int>& ByOwner() const { return by_owner_; }
  size_t size() const { return owner_of_.size(); }

 private:
  std::unordered_map<std::string, std::string> owner_of_;  // the jobs counted
  std::unordered_map<std::string, int> by_owner_;
};

}  // namespace sluice::server
