// The queue in groups of jobs that wait or start alike (issue 12 item 3; docs/design-notes.md
// "Placement at scale"): one owner, team, shape (sched::ShapeKey) and wording of their wait, each
// group in the order a pass considers its jobs. A placement pass reads a group's first jobs only
// (as a sched::JobRun, until its shape is settled) and answers the rest together; and a group
// remembers the answer all its members hold, but those it lists as unsettled, so a pass that
// gives the group the same answer again touches only those, not the whole queue.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace sluice::server {

class QueueIndex {
 public:
  // A job's place within its group: (-priority, submission order), the order in which a pass
  // considers jobs of one shape (sched::Schedule; a shape shares capacity kind and bid).
  using Order = std::pair<int64_t, int64_t>;

  // What a group's members hold: a waiting reason and its never-fits flag exactly, or (`prefix`)
  // a reason beginning with `reason` (a refusal, "waiting for credit: ...", whose amounts change
  // while its cause does not).
  struct Answer {
    std::string reason;
    bool never_fits = false;
    bool prefix = false;
    bool HeldBy(std::string_view held_reason, bool held_never_fits) const;
    bool operator==(const Answer&) const = default;
  };

  // A member: its job's id, and the caller's handle on the job (given to File; the index never
  // reads through it), so a pass reads a member without looking it up by id.
  struct Member {
    std::string id;
    const void* job = nullptr;
  };

  struct Group {
    std::map<Order, Member> members;
    std::optional<Answer> settled;  // held by every member not listed below
    std::map<Order, std::string> unsettled;
  };

  // A job's reason and never-fits flag as memory holds them now.
  using Reasons = std::function<std::pair<std::string_view, bool>(const std::string& job_id)>;

  // Files job `id` under `key` at `order`, with its reason as it stands, and the caller's
  // handle on it; an empty key files it alone (searched every pass). Filing it again moves it.
  void File(const std::string& id, const std::string& key, Order order, std::string_view reason,
            bool never_fits, const void* job = nullptr);
  // Takes the job out (it left the queue).
  void Drop(const std::string& id);
  // The group's members now hold `answer` (the caller committed it to those that did not): it
  // becomes the group's, and the members that do not hold it (`reasons`) are listed unsettled.
  // O(the group): for a change of the answer, which touched every member anyway.
  void Settle(const std::string& key, Answer answer, const Reasons& reasons);

  const std::map<std::string, Group>& groups() const { return groups_; }
  const std::set<std::string>& alone() const { return alone_; }
  size_t size() const { return filed_.size(); }
  bool Has(const std::string& id) const { return filed_.count(id) > 0; }

  // A member that neither holds its group's answer nor is listed unsettled (nullopt: none).
  // O(the queue): for checks in debug builds and tests.
  std::optional<std::string> FirstAstray(const Reasons& reasons) const;

 private:
  struct Filed {
    std::string key;
    Order order;
  };
  std::unordered_map<std::string, Filed> filed_;
  std::map<std::string, Group> groups_;
  std::set<std::string> alone_;
};

}  // namespace sluice::server
