// The agents' messages waiting for the core (issue 12 item 3, "log writes group-committed off
// the request path"; docs/design-notes.md "Agent messages: one commit for many").
//
// An io thread posts what an agent sent and goes back to reading sockets at once: it never waits
// on the core's lock, so a burst of exits cannot keep heartbeats unread. The core takes the
// waiting messages in order and handles many under one lock and one store commit. Posting
// records the node's sign of life before anything is handled, so a node whose heartbeat waits
// here is never declared lost for the wait.
//
// Thread safety: every member may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/agent_protocol.h"
#include "common/clock.h"
#include "common/status.h"

namespace sluice::server {

class AgentLink;

// One message of a connected agent, or the end of its connection.
struct InboxEntry {
  std::string node_id;
  // The connection it came on: the core ignores a link that no longer speaks for the node.
  // `hold` keeps it alive (and its address unique) while the entry waits.
  const AgentLink* link = nullptr;
  std::shared_ptr<AgentLink> hold;
  bool disconnected = false;  // the connection closed; `message` is unused
  // No message: only `done`, called once everything posted before it is handled (an error about
  // a message the channel could not read is sent after the answers to the ones before it).
  bool barrier = false;
  proto::AgentMessage message;
  // Its outcome, called once with no lock held (may be empty).
  std::function<void(const Status&)> done;
  // Set by Post: Clock::MonotonicMillis when the io thread read it. A node's silence is counted
  // from here, not from when the core got to it behind a backlog.
  int64_t arrived_mono = 0;
};

class AgentInbox {
 public:
  // `max_waiting_per_node`: more entries than this from one node refuse the next post (the
  // channel then closes the connection; the agent reconnects and resends what was not
  // acknowledged), so one agent cannot grow the queue without bound.
  AgentInbox(const Clock* clock, size_t max_waiting_per_node);

  // Queues the entry and records the node's sign of life (a disconnect is no sign of life).
  // ResourceExhausted, queuing nothing, when the node has too many waiting; Unavailable once
  // stopped.
  Status Post(InboxEntry entry);
  // Up to `max` entries, oldest first; empty when none wait.
  std::vector<InboxEntry> Take(size_t max);
  // Blocks until entries wait or Stop is called; false once stopped.
  bool Wait();
  // Wakes Wait for good; later posts are refused. Entries still waiting are returned.
  std::vector<InboxEntry> Stop();

  // A sign of life that is not a message to queue: a node's `hello`, proven by its credential,
  // waiting for the core's lock.
  void NoteHeard(const std::string& node_id);
  // Monotonic ms of the node's last posted message or NoteHeard; 0 when none came.
  int64_t HeardMono(const std::string& node_id) const;
  size_t Waiting() const;
  // Entries from this node not yet taken.
  size_t WaitingFrom(const std::string& node_id) const;

 private:
  const Clock* clock_;
  const size_t max_waiting_per_node_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopped_ = false;
  // Oldest first. A deque, not a vector: an entry is a few hundred bytes (a variant of every
  // message), and a vector growing behind a burst moved every waiting entry on each reallocation
  // and again when its taken prefix was erased (about 1 % of the server's samples in a release).
  std::deque<InboxEntry> queue_;
  std::unordered_map<std::string, size_t> waiting_;  // per node; never walked in order
  std::unordered_map<std::string, int64_t> heard_;   // per node
};

}  // namespace sluice::server
