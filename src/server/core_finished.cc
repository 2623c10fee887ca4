// Finished jobs leave memory (issue 12 item 3; docs/design-notes.md "Finished jobs"). A job that
// finished with no attempt still active is moved out of jobs_ by the next tick: its record stays
// in the store, and memory keeps only what FinishedJobs holds (owner, team, stored blobs,
// state). Reads of a finished job (GET /v1/jobs/ID, the job list, logs, streams, audit bundles)
// go to the store. Members of ServerCore; the caller holds mu_ unless a method takes it.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "server/server_core.h"

namespace sluice::server {
namespace st = store;

namespace {

// The sets of unfinished jobs a list within `scope` reads: all of them without a scope, else the
// owners' and the teams' that have any.
std::vector<const LiveJobIndex::Ids*> ScopeSets(const LiveJobIndex& jobs,
                                                const st::JobScope* scope) {
  if (scope == nullptr) return {&jobs.All()};
  std::vector<const LiveJobIndex::Ids*> sets;
  for (const auto& owner : scope->owners) sets.push_back(jobs.OwnedBy(owner));
  for (const auto& team : scope->teams) {
    if (!team.empty()) sets.push_back(jobs.SharedWith(team));
  }
  std::erase(sets, nullptr);
  return sets;
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
    charges_.Forget(id);  // read from the store again if a report asks
    money_.anomalies_raised.erase(id);
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
  for (const auto& [state, n] : live_index_.CountByState()) counts[state] += n;
#ifndef NDEBUG
  // Debug builds (the sanitizer run) check the counts against the walk they replace.
  std::map<st::JobState, int64_t> walked = finished_.jobs.CountByState();
  for (const auto& [id, js] : jobs_) ++walked[js.record.state];
  std::erase_if(walked, [](const auto& entry) { return entry.second == 0; });
  if (walked != counts) {
    std::fprintf(stderr, "server: the jobs counted by state differ from the job map's\n");
    std::abort();
  }
#endif
  return counts;
}

#ifndef NDEBUG
// Debug builds (the sanitizer run) check the index the list reads against the walk it replaces:
// the unfinished jobs in jobs_ within `scope` (all, without one) are exactly those it files there.
void ServerCore::CheckListIndexLocked(const st::JobScope* scope) const {
  auto has = [](const std::vector<std::string>& v, const std::string& x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  std::set<std::string> walked, indexed;
  for (const auto& [id, js] : jobs_) {
    const st::JobRecord& j = js.record;
    if (st::IsTerminal(j.state)) continue;
    if (scope == nullptr || has(scope->owners, j.owner) ||
        (!j.team.empty() && has(scope->teams, j.team))) {
      walked.insert(id);
    }
  }
  for (const LiveJobIndex::Ids* ids : ScopeSets(live_index_, scope)) {
    for (const auto& key : *ids) indexed.emplace(key.id);
  }
  if (walked != indexed) {
    std::fprintf(stderr, "server: the job list's index has %zu jobs in scope, the walk %zu\n",
                 indexed.size(), walked.size());
    std::abort();
  }
}
#endif

Result<std::vector<st::JobRecord>> ServerCore::ListJobs(std::optional<st::JobState> state,
                                                        size_t limit, const st::JobScope* scope) {
  std::vector<st::JobRecord> out;
  if (limit == 0) return out;
  {
    std::lock_guard<TimedMutex> lock(mu_);
    // The caller's unfinished jobs (an admin's: all), newest first from the index: at most
    // `limit` of each set, so a list costs its length, not the number of live jobs. Jobs that
    // finished and wait in the map for an attempt to end are in the store's list below.
    std::vector<const st::JobRecord*> live;
    for (const LiveJobIndex::Ids* ids : ScopeSets(live_index_, scope)) {
      size_t taken = 0;
      for (auto key = ids->begin(); key != ids->end() && taken < limit; ++key) {
        auto it = jobs_.find(std::string(key->id));
        if (it == jobs_.end() || (state && it->second.record.state != *state)) continue;
        live.push_back(&it->second.record);
        ++taken;
      }
    }
#ifndef NDEBUG
    CheckListIndexLocked(scope);
#endif
    // A job both owned and shared came twice: once each, newest first.
    std::sort(live.begin(), live.end(), [](const st::JobRecord* a, const st::JobRecord* b) {
      return st::ListedBefore(*a, *b);
    });
    live.erase(std::unique(live.begin(), live.end()), live.end());
    const size_t keep = std::min(limit, live.size());
    for (size_t i = 0; i < keep; ++i) out.push_back(*live[i]);
  }
  // The finished ones, newest first, until `limit` of them. Read without the lock:
  // a job that finished meanwhile may come from both; the store's copy (the later) is kept.
  std::vector<st::JobRecord> finished;
  std::optional<st::JobCursor> after;
  while (finished.size() < limit) {
    const size_t want = std::min(kPage, limit - finished.size());  // at least 1: see the loop
    SLUICE_ASSIGN_OR_RETURN(auto page,
                            store_->ListFinishedJobs(state, after, static_cast<int>(want), scope));
    for (auto& j : page) {
      after = st::JobCursor{j.submitted_ms, j.id};
      finished.push_back(std::move(j));
    }
    if (page.size() < want) break;
  }
  std::unordered_set<std::string> from_store;
  for (const auto& f : finished) from_store.insert(f.id);
  std::erase_if(out, [&](const st::JobRecord& j) { return from_store.count(j.id) > 0; });
  out.insert(out.end(), std::make_move_iterator(finished.begin()),
             std::make_move_iterator(finished.end()));
  std::sort(out.begin(), out.end(), st::ListedBefore);
  if (out.size() > limit) out.resize(limit);
  return out;
}

}  // namespace sluice::server
