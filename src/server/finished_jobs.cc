// FinishedJobs (finished_jobs.h): a finished job's owner, blobs and state, by job id.
#include "server/finished_jobs.h"

namespace sluice::server {

void FinishedJobs::Add(const store::JobRecord& job) {
  FinishedJob kept{job.state, job.owner, job.team, job.workdir_blob, job.checkpoint};
  auto [it, added] = jobs_.try_emplace(job.id, kept);
  if (!added) {
    Count(it->second.state, -1);
    it->second = std::move(kept);
  }
  Count(job.state, +1);
}

const FinishedJob* FinishedJobs::Find(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  return it != jobs_.end() ? &it->second : nullptr;
}

bool FinishedJobs::Erase(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return false;
  Count(it->second.state, -1);
  jobs_.erase(it);
  return true;
}

void FinishedJobs::Count(store::JobState state, int64_t delta) {
  if ((by_state_[state] += delta) == 0) by_state_.erase(state);
}

}  // namespace sluice::server
