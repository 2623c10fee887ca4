#include "server/agent_inbox.h"

#include <utility>

namespace sluice::server {

AgentInbox::AgentInbox(const Clock* clock, size_t max_waiting_per_node)
    : clock_(clock), max_waiting_per_node_(max_waiting_per_node) {}

Status AgentInbox::Post(InboxEntry entry) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return Status::Unavailable("the server is stopping");
    size_t& waiting = waiting_[entry.node_id];
    // A disconnect is always taken: it is the last entry of its connection.
    if (!entry.disconnected && waiting >= max_waiting_per_node_) {
      return Status::ResourceExhausted("this agent has " + std::to_string(waiting) +
                                       " messages waiting for the server; reconnect and resend");
    }
    ++waiting;
    entry.arrived_mono = clock_->MonotonicMillis();
    if (!entry.disconnected && !entry.barrier) heard_[entry.node_id] = entry.arrived_mono;
    queue_.push_back(std::move(entry));
  }
  wake_.notify_one();
  return Status::Ok();
}

std::vector<InboxEntry> AgentInbox::Take(size_t max) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<InboxEntry> out;
  const size_t n = std::min(max, queue_.size());
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    InboxEntry& e = queue_.front();
    auto w = waiting_.find(e.node_id);
    if (w != waiting_.end() && --w->second == 0) waiting_.erase(w);
    out.push_back(std::move(e));
    queue_.pop_front();  // the deque frees its blocks as they empty: memory follows what waits
  }
  return out;
}

bool AgentInbox::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  wake_.wait(lock, [this] { return stopped_ || !queue_.empty(); });
  return !stopped_;
}

std::vector<InboxEntry> AgentInbox::Stop() {
  std::vector<InboxEntry> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    for (InboxEntry& e : queue_) left.push_back(std::move(e));
    queue_.clear();
    waiting_.clear();
  }
  wake_.notify_all();
  return left;
}

void AgentInbox::NoteHeard(const std::string& node_id) {
  std::lock_guard<std::mutex> lock(mu_);
  heard_[node_id] = clock_->MonotonicMillis();
}

int64_t AgentInbox::HeardMono(const std::string& node_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = heard_.find(node_id);
  return it == heard_.end() ? 0 : it->second;
}

size_t AgentInbox::WaitingFrom(const std::string& node_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = waiting_.find(node_id);
  return it == waiting_.end() ? 0 : it->second;
}

size_t AgentInbox::Waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

}  // namespace sluice::server
