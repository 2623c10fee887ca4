// FinishedJobs: what the server core keeps in memory of a job that has finished (issue 12 item
// 3; docs/design-notes.md "Finished jobs"). A finished job's record, spec and compiled request
// leave memory; the store keeps them (Store::GetJob, Store::ListFinishedJobs). What stays is
// what the core reads of every finished job without asking the store: who owns it (access
// checks, the payer of its storage), the blobs it keeps (storage billing, blob collection) and
// its state (the jobs-by-state gauge): about 330 bytes of heap a job, against about 4 KB for a
// job in the core's job map (bench/finished, docs/benchmarks.md).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>

#include "store/records.h"

namespace sluice::server {

struct FinishedJob {
  store::JobState state = store::JobState::kSucceeded;
  std::string owner;         // "" for jobs from before accounts (the admin's)
  std::string team;          // "" when not shared
  std::string workdir_blob;  // its uploaded workdir, or ""
  std::string checkpoint;    // its latest checkpoint's manifest, or ""
};

class FinishedJobs {
 public:
  // Keeps (or replaces) what is kept of a finished job's record.
  void Add(const store::JobRecord& job);
  // nullptr when the job is not a finished one kept here.
  const FinishedJob* Find(const std::string& job_id) const;
  // False when there was nothing to erase.
  bool Erase(const std::string& job_id);
  size_t size() const { return jobs_.size(); }
  // How many finished jobs are in each state (kept as jobs are added and erased).
  const std::map<store::JobState, int64_t>& CountByState() const { return by_state_; }
  const std::unordered_map<std::string, FinishedJob>& all() const { return jobs_; }

 private:
  void Count(store::JobState state, int64_t delta);

  std::unordered_map<std::string, FinishedJob> jobs_;
  std::map<store::JobState, int64_t> by_state_;
};

}  // namespace sluice::server
