#include "server/unfinished_jobs.h"

namespace sluice::server {

void UnfinishedJobs::Set(const std::string& job_id, const std::string& owner, bool unfinished) {
  auto counted = owner_of_.find(job_id);
  if (counted != owner_of_.end()) {
    if (unfinished && counted->second == owner) return;
    auto count = by_owner_.find(counted->second);
    if (count != by_owner_.end() && --count->second <= 0) by_owner_.erase(count);
    owner_of_.erase(counted);
  }
  if (!unfinished) return;
  owner_of_.emplace(job_id, owner);
  ++by_owner_[owner];
}

int UnfinishedJobs::Of(const std::string& owner) const {
  auto it = by_owner_.find(owner);
  return it == by_owner_.end() ? 0 : it->second;
}

}  // namespace sluice::server
