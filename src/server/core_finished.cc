// Finished jobs leave memory (issue 12 item 3; docs/design-notes.md "Finished jobs"). A job that
// finished with no attempt still active is moved out of jobs_ by the next tick: its record stays
// in the store, and memory keeps only what FinishedJobs holds (owner, team, stored blobs,
// state). Reads of a finished job (GET /v1/jobs/ID, the job list, logs, streams, audit bundles)
// go to the store. Members of ServerCore; the caller holds mu_ unless a method takes it.
#include <algorithm>
#include <unordered_set>

#include "server/server_core.h"

namespace sluice::server {
namespace st = store;

namespace {

// The job list's order: newest submission first, then the later id (ids are time-ordered).
bool Newer(const st::JobRecord& a, const st::JobRecord& b) {
  return a.submitted_ms != b.submitted_ms ? a.submitted_ms > b.submitted_ms : a.id > b.id;
}

// Finished jobs are read from the store a page at a time: enough for a small list, few
// statements for a big one.
constexpr size_t kPage = 500;

}  // namespace

bool ServerCore::RetirableLocked(const std::string& id, const JobState& js) const {
  return st::IsTerminal(js.record.state) && !finished_.active_attempts.count(id);
}

void ServerCore::RetireFinishedLocked() {
  std::vector<std::string> retiring;
  retiring.swap(finished_.retiring);
  for (const auto& id : retiring) {
    auto it = jobs_.find(id);
    if (it == jobs_.end() || !RetirableLocked(id, it->second)) continue;
    finished_.jobs.Add(it->second.record);
    money_.job_charges.erase(id);  // read from the store again if a report asks
    avoid_.erase(id);
    jobs_.erase(it);
    IndexJobLocked(id);  // it was not queued; this only keeps the index's word
  }
}

Result<std::optional<st::JobRecord>> ServerCore::JobRecordLocked(const std::string& id) {
  if (auto it = jobs_.find(id); it != jobs_.end()) return std::optional(it->second.record);
  if (finished_.jobs.Find(id) == nullptr) return std::optional<st::JobRecord>();
  return store_->GetJob(id);
}

Result<ServerCore::JobState*> ServerCore::UnfinishedJobLocked(const std::string& id) {
  auto it = jobs_.find(id);
  const st::JobState* state = it != jobs_.end() ? &it->second.record.state : nullptr;
  if (const FinishedJob* done = finished_.jobs.Find(id); done != nullptr) state = &done->state;
  if (state == nullptr) return Status::NotFound("no job " + id);
  if (st::IsTerminal(*state)) {
    return Status::FailedPrecondition("job " + id + " already " + std::string(st::Name(*state)));
  }
  return &it->second;
}

void ServerCore::LatestCheckpointsLocked(std::set<std::string>& manifests) const {
  for (const auto& [id, js] : jobs_) {
    if (!js.record.checkpoint.empty()) manifests.insert(js.record.checkpoint);
  }
  for (const auto& [id, f] : finished_.jobs.all()) {
    if (!f.checkpoint.empty()) manifests.insert(f.checkpoint);
  }
}

std::map<st::JobState, int64_t> ServerCore::JobCounts() {
  std::lock_guard<TimedMutex> lock(mu_);
  std::map<st::JobState, int64_t> counts = finished_.jobs.CountByState();
  for (const auto& [id, js] : jobs_) ++counts[js.record.state];
  return counts;
}

Result<std::vector<st::JobRecord>> ServerCore::ListJobs(
    std::optional<st::JobState> state, size_t limit,
    const std::function<bool(const st::JobRecord&)>& visible) {
  std::vector<st::JobRecord> out;
  if (limit == 0) return out;
  {
    std::lock_guard<TimedMutex> lock(mu_);
    std::vector<const st::JobRecord*> live;
    for (const auto& [id, js] : jobs_) {
      if (state && js.record.state != *state) continue;
      if (visible && !visible(js.record)) continue;
      live.push_back(&js.record);
    }
    const size_t keep = std::min(limit, live.size());
    std::partial_sort(live.begin(), live.begin() + static_cast<std::ptrdiff_t>(keep), live.end(),
                      [](const st::JobRecord* a, const st::JobRecord* b) { return Newer(*a, *b); });
    for (size_t i = 0; i < keep; ++i) out.push_back(*live[i]);
  }
  // The finished ones, newest first, until `limit` of them are visible. Read without the lock:
  // a job that finished meanwhile may come from both; the store's copy (the later) is kept.
  std::vector<st::JobRecord> finished;
  std::optional<st::JobCursor> after;
  while (finished.size() < limit) {
    const size_t want = std::min(kPage, limit - finished.size());  // at least 1: see the loop
    SLUICE_ASSIGN_OR_RETURN(auto page,
                            store_->ListFinishedJobs(state, after, static_cast<int>(want)));
    for (auto& j : page) {
      after = st::JobCursor{j.submitted_ms, j.id};
      if (visible && !visible(j)) continue;
      if (finished.size() < limit) finished.push_back(std::move(j));
    }
    if (page.size() < want) break;
  }
  std::unordered_set<std::string> from_store;
  for (const auto& f : finished) from_store.insert(f.id);
  std::erase_if(out, [&](const st::JobRecord& j) { return from_store.count(j.id) > 0; });
  out.insert(out.end(), std::make_move_iterator(finished.begin()),
             std::make_move_iterator(finished.end()));
  std::sort(out.begin(), out.end(), Newer);
  if (out.size() > limit) out.resize(limit);
  return out;
}

}  // namespace sluice::server
