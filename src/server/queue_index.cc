#include "server/queue_index.h"

namespace sluice::server {

bool QueueIndex::Answer::HeldBy(std::string_view held_reason, bool held_never_fits) const {
  if (prefix) return held_reason.substr(0, reason.size()) == reason;
  return held_reason == reason && held_never_fits == never_fits;
}

void QueueIndex::File(const std::string& id, const std::string& key, Order order,
                      std::string_view reason, bool never_fits, const void* job) {
  auto filed = filed_.find(id);
  if (filed != filed_.end() && (filed->second.key != key || filed->second.order != order)) {
    Drop(id);
    filed = filed_.end();
  }
  if (key.empty()) {
    filed_.insert_or_assign(id, Filed{key, order});
    alone_.insert(id);
    return;
  }
  Group& group = groups_[key];
  if (filed == filed_.end()) {
    filed_.emplace(id, Filed{key, order});
    group.members.insert_or_assign(order, Member{id, job});
  } else {
    group.members[order].job = job;
  }
  if (group.settled && group.settled->HeldBy(reason, never_fits)) {
    group.unsettled.erase(order);
  } else {
    group.unsettled.insert_or_assign(order, id);
  }
}

void QueueIndex::Drop(const std::string& id) {
  auto filed = filed_.find(id);
  if (filed == filed_.end()) return;
  if (filed->second.key.empty()) {
    alone_.erase(id);
  } else if (auto group = groups_.find(filed->second.key); group != groups_.end()) {
    group->second.members.erase(filed->second.order);
    group->second.unsettled.erase(filed->second.order);
    if (group->second.members.empty()) groups_.erase(group);
  }
  filed_.erase(filed);
}

void QueueIndex::Settle(const std::string& key, Answer answer, const Reasons& reasons) {
  auto group = groups_.find(key);
  if (group == groups_.end()) return;  // every member left the queue
  Group& g = group->second;
  g.unsettled.clear();
  for (const auto& [order, member] : g.members) {
    auto [reason, never_fits] = reasons(member.id);
    if (!answer.HeldBy(reason, never_fits)) g.unsettled.emplace(order, member.id);
  }
  g.settled = std::move(answer);
}

std::optional<std::string> QueueIndex::FirstAstray(const Reasons& reasons) const {
  for (const auto& [key, g] : groups_) {
    for (const auto& [order, member] : g.members) {
      if (g.unsettled.count(order) > 0) continue;
      auto [reason, never_fits] = reasons(member.id);
      if (!g.settled || !g.settled->HeldBy(reason, never_fits)) return member.id;
    }
  }
  return std::nullopt;
}

}  // namespace sluice::server
