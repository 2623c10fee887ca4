#include "server/live_job_index.h"

namespace sluice::server {

void LiveJobIndex::Update(const store::JobRecord& job) {
  if (store::IsTerminal(job.state)) {
    Drop(job.id);
    finished_.emplace(job.id, job.state);
    Count(job.state, 1);
    return;
  }
  auto known = jobs_.find(job.id);
  if (known != jobs_.end()) {
    Job& kept = known->second;
    if (kept.owner == job.owner && kept.team == job.team && kept.submitted_ms == job.submitted_ms) {
      Count(kept.state, -1);
      kept.state = job.state;
      Count(kept.state, 1);
      return;
    }
  }
  Drop(job.id);
  auto [it, added] = jobs_.emplace(job.id, Job{job.owner, job.team, job.submitted_ms, job.state});
  Count(job.state, 1);
  const Key key{job.submitted_ms, it->first};  // a node's key stays put while the node lives
  all_.insert(key);
  by_owner_[job.owner].insert(key);
  if (!job.team.empty()) by_team_[job.team].insert(key);
}

void LiveJobIndex::Drop(const std::string& job_id) {
  if (auto done = finished_.find(job_id); done != finished_.end()) {
    Count(done->second, -1);
    finished_.erase(done);
  }
  auto known = jobs_.find(job_id);
  if (known == jobs_.end()) return;
  const Key key{known->second.submitted_ms, known->first};
  all_.erase(key);
  Erase(by_owner_, known->second.owner, key);
  if (!known->second.team.empty()) Erase(by_team_, known->second.team, key);
  Count(known->second.state, -1);
  jobs_.erase(known);
}

void LiveJobIndex::Count(store::JobState state, int64_t delta) {
  auto it = by_state_.try_emplace(state, 0).first;
  it->second += delta;
  if (it->second == 0) by_state_.erase(it);
}

int LiveJobIndex::Of(const std::string& owner) const {
  const Ids* ids = OwnedBy(owner);
  return ids == nullptr ? 0 : static_cast<int>(ids->size());
}

std::unordered_map<std::string, int> LiveJobIndex::CountByOwner() const {
  std::unordered_map<std::string, int> out;
  for (const auto& [owner, ids] : by_owner_) out.emplace(owner, static_cast<int>(ids.size()));
  return out;
}

Json LiveJobIndex::ToJson() const {
  auto dump = [](const Index& index) {
    Json out = Json::object();  // ordered by key
    for (const auto& [key, ids] : index) {
      Json list = Json::array();  // newest first
      for (const Key& k : ids) list.push_back(std::string(k.id));
      out[key] = std::move(list);
    }
    return out;
  };
  Json states = Json::object();
  for (const auto& [state, n] : by_state_) states[std::string(store::Name(state))] = n;
  return Json{{"by_owner", dump(by_owner_)}, {"by_team", dump(by_team_)}, {"by_state", states}};
}

const LiveJobIndex::Ids* LiveJobIndex::Find(const Index& index, const std::string& key) {
  auto it = index.find(key);
  return it == index.end() ? nullptr : &it->second;
}

void LiveJobIndex::Erase(Index& index, const std::string& key, const Key& job) {
  auto it = index.find(key);
  if (it == index.end()) return;
  it->second.erase(job);
  if (it->second.empty()) index.erase(it);
}

}  // namespace sluice::server
