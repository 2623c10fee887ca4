// LiveJobIndex: the core's job map indexed. Its unfinished jobs (any state store::IsTerminal is
// false for), newest first, all of them and by owner and by team, and how many jobs of the map
// are in each state, finished ones that wait there for an attempt to end included; kept as the map
// changes (ServerCore::IndexJobLocked; issue 12 item 3). Three readers that would otherwise walk
// every live job under the core's lock:
//  * the submit quota (--max-active-jobs-per-account) counts one account's (docs/design-notes.md
//    "The submit quota"; 52,000 live jobs behind bench/placement's `--as-user 1`);
//  * the job list takes the newest of its caller's (or, for an admin, of all) from here and
//    stops at its limit (docs/design-notes.md "The job list"; bench/finished);
//  * the sluice_jobs gauge of /v1/metrics counts the map's jobs by state.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/json.h"
#include "store/records.h"

namespace sluice::server {

class LiveJobIndex {
 public:
  // A job in the job list's order (store::ListedBefore, on the two fields it reads).
  struct Key {
    int64_t submitted_ms = 0;
    std::string_view id;  // views the id this keeps
  };
  struct NewestFirst {
    bool operator()(const Key& a, const Key& b) const {
      return a.submitted_ms != b.submitted_ms ? a.submitted_ms > b.submitted_ms : a.id > b.id;
    }
  };
  using Ids = std::set<Key, NewestFirst>;

  // Files the job as its record in the map now stands: listed while unfinished, only counted
  // once finished. Idempotent. A job's owner, team and submission time never change, but a
  // change is followed.
  void Update(const store::JobRecord& job);
  // The job left the job map (finished and retired, or deleted); nothing to do if not kept.
  void Drop(const std::string& job_id);
  // How many of the map's jobs are in each state (states with none left out).
  const std::map<store::JobState, int64_t>& CountByState() const { return by_state_; }

  // How many of `owner`'s jobs are unfinished.
  int Of(const std::string& owner) const;
  const Ids& All() const { return all_; }
  // The unfinished jobs owned by `owner`, or shared with `team`; nullptr when there are none.
  const Ids* OwnedBy(const std::string& owner) const { return Find(by_owner_, owner); }
  const Ids* SharedWith(const std::string& team) const { return Find(by_team_, team); }
  // Owners with at least one unfinished job, and their counts.
  std::unordered_map<std::string, int> CountByOwner() const;
  size_t size() const { return jobs_.size(); }
  // {"by_owner": {owner: [ids]}, "by_team": {team: [ids]}}, sorted: a canonical dump.
  Json ToJson() const;

 private:
  struct Job {
    std::string owner;
    std::string team;
    int64_t submitted_ms = 0;
    store::JobState state = store::JobState::kQueued;
  };
  void Count(store::JobState state, int64_t delta);
  using Index = std::unordered_map<std::string, Ids>;
  static const Ids* Find(const Index& index, const std::string& key);
  static void Erase(Index& index, const std::string& key, const Key& job);

  std::unordered_map<std::string, Job> jobs_;  // by id; every Key views one of these keys
  std::unordered_map<std::string, store::JobState> finished_;  // in the map, not listed
  std::map<store::JobState, int64_t> by_state_;                // of both
  Ids all_;
  Index by_owner_;
  Index by_team_;  // teams other than ""
};

}  // namespace sluice::server
