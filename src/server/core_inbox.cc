// Agent messages: one commit for many (docs/design-notes.md). The io threads post what agents
// send to the inbox (AgentInbox) and return to their sockets; the messages waiting are handled in
// order, many under one lock, and the attempt messages among them (started, log, checkpoint,
// exited) are staged into one edit and committed together. Members of ServerCore.
#include <algorithm>
#include <future>
#include <variant>

#include "common/thread_name.h"
#include "server/core_internal.h"
#include "server/server_core.h"

namespace sluice::server {

using namespace core;  // NOLINT: the core's own helpers (core_internal.h)

namespace {

// Messages handled per lock and per commit: enough that a burst of exits costs a few commits,
// few enough that a request waiting on the lock waits for one batch, not the whole burst.
constexpr size_t kInboxBatch = 256;

}  // namespace

void ServerCore::StartInbox() {
  std::lock_guard<TimedMutex> lock(mu_);
  if (inbox_thread_.joinable()) return;
  inbox_thread_ = std::thread([this] {
    NameThisThread("sluice-inbox");
    while (inbox_.Wait()) HandleWaitingAgentMessages();
  });
  inbox_running_.store(true, std::memory_order_release);
}

Status ServerCore::PostAgentMessage(const std::string& node_id,
                                    const std::shared_ptr<AgentLink>& link, proto::AgentMessage msg,
                                    std::function<void(const Status&)> done) {
  if (const auto* hb = std::get_if<proto::Heartbeat>(&msg)) {
    if (AnswerHeartbeatNow(node_id, link.get(), *hb, done)) return Status::Ok();
  }
  InboxEntry entry;
  entry.node_id = node_id;
  entry.link = link.get();
  entry.hold = link;
  entry.message = std::move(msg);
  entry.done = std::move(done);
  SLUICE_RETURN_IF_ERROR(inbox_.Post(std::move(entry)));
  HandleInlineUnlessQueued();
  return Status::Ok();
}

// Most of what an idle fleet sends is heartbeats (2,000/s from 10,000 agents). Through the inbox
// each cost two thread hand-offs: the io thread waking the inbox thread, and the inbox thread's
// answer waking an io thread to write it; on this VM every wake-up is a trip through the
// hypervisor. Answered here, the io thread that read it queues the answer on its own connection
// (docs/design-notes.md "Agent messages: one commit for many").
//
// Order is what makes this safe: a node's messages are handled in the order it sent them, and a
// lease answer must not overtake an earlier `started` or `exited`. So the heartbeat is answered
// here only when nothing of its node waits in the inbox and none is being handled: the inbox
// thread takes entries only while it holds mu_ (HandleWaitingAgentMessages), so with mu_ held
// here no entry is between "taken" and "handled". Without the inbox thread (tests), posts are
// handled inline anyway.
bool ServerCore::AnswerHeartbeatNow(const std::string& node_id, const AgentLink* link,
                                    const proto::Heartbeat& hb,
                                    const std::function<void(const Status&)>& done) {
  if (!inbox_running_.load(std::memory_order_acquire)) return false;
  // Never wait for the lock on an io thread: a busy core gets the heartbeat through the inbox.
  std::unique_lock<TimedMutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  mu_.HoldingFor(kHeldForHeartbeat);
  if (inbox_.WaitingFrom(node_id) != 0) return false;
  auto nit = nodes_.find(node_id);
  if (nit == nodes_.end() || nit->second.link.get() != link) return false;  // the inbox says why
  NodeState& ns = nit->second;
  ns.last_seen_mono = std::max(ns.last_seen_mono, clock_->MonotonicMillis());
  const Status s = OnHeartbeatLocked(ns, hb);
  lock.unlock();
  if (done) done(s);
  return true;
}

void ServerCore::PostAgentDisconnected(const std::string& node_id,
                                       const std::shared_ptr<AgentLink>& link) {
  InboxEntry entry;
  entry.node_id = node_id;
  entry.link = link.get();
  entry.hold = link;
  entry.disconnected = true;
  if (!inbox_.Post(std::move(entry)).ok()) return;  // stopping: nothing more is recorded
  HandleInlineUnlessQueued();
}

Status ServerCore::PostAgentBarrier(const std::string& node_id, std::function<void()> then) {
  InboxEntry entry;
  entry.node_id = node_id;
  entry.barrier = true;
  entry.done = [then = std::move(then)](const Status&) { then(); };
  SLUICE_RETURN_IF_ERROR(inbox_.Post(std::move(entry)));
  HandleInlineUnlessQueued();
  return Status::Ok();
}

Status ServerCore::PostAndWait(InboxEntry entry) {
  std::promise<Status> outcome;
  entry.done = [&outcome](const Status& s) { outcome.set_value(s); };
  SLUICE_RETURN_IF_ERROR(inbox_.Post(std::move(entry)));
  // A caller that waits cannot leave it queued for a test to handle.
  if (!inbox_thread_.joinable()) HandleWaitingAgentMessages();
  return outcome.get_future().get();
}

Status ServerCore::AgentMessage(const std::string& node_id, const AgentLink* link,
                                const proto::AgentMessage& msg) {
  InboxEntry entry;
  entry.node_id = node_id;
  entry.link = link;
  entry.message = msg;
  return PostAndWait(std::move(entry));
}

Status ServerCore::AgentMessage(const std::string& node_id, const AgentLink* link,
                                const Json& msg) {
  SLUICE_ASSIGN_OR_RETURN(proto::AgentMessage typed, proto::AgentMessageFromJson(msg));
  return AgentMessage(node_id, link, typed);
}

void ServerCore::AgentDisconnected(const std::string& node_id, const AgentLink* link) {
  InboxEntry entry;
  entry.node_id = node_id;
  entry.link = link;
  entry.disconnected = true;
  (void)PostAndWait(std::move(entry));  // refused only while stopping: nothing more is recorded
}

void ServerCore::HandleInlineUnlessQueued() {
  if (!inbox_thread_.joinable() && !options_.hold_agent_messages) HandleWaitingAgentMessages();
}

void ServerCore::HandleWaitingAgentMessages() {
  while (inbox_.Waiting() > 0) {
    std::vector<InboxEntry> entries;
    std::vector<Status> outcomes;
    {
      // Taken under mu_, not before it: AnswerHeartbeatNow relies on no entry being taken and
      // not yet handled while it holds mu_.
      std::lock_guard<TimedMutex> lock(mu_);
      mu_.HoldingFor(kHeldForAgentMessages);
      entries = inbox_.Take(kInboxBatch);
      if (entries.empty()) return;
      outcomes = HandleEntriesLocked(entries);
    }
    // With the lock free: a caller's reaction (an error sent, a connection closed) may itself
    // call into the core.
    for (size_t i = 0; i < entries.size(); ++i) {
      if (entries[i].done) entries[i].done(outcomes[i]);
    }
  }
}

std::vector<Status> ServerCore::HandleEntriesLocked(const std::vector<InboxEntry>& entries) {
  std::vector<Status> outcomes(entries.size(), Status::Ok());
  Edit edit;
  std::vector<size_t> in_edit;     // entries whose outcome is the edit's commit
  std::vector<size_t> heartbeats;  // answered last, from the state every commit left
  bool exited = false;
  // The node the entry's link still speaks for, or null (the link was replaced or closed).
  auto speaker = [this](const InboxEntry& e) -> NodeState* {
    auto nit = nodes_.find(e.node_id);
    return nit != nodes_.end() && nit->second.link.get() == e.link ? &nit->second : nullptr;
  };
  const Status stale =
      Status::FailedPrecondition("this connection is no longer the node's agent link");
  auto commit = [&] {
    if (in_edit.empty()) return;
    const Status s = CommitLocked(edit);
    for (size_t i : in_edit) outcomes[i] = s;
    edit = Edit{};
    in_edit.clear();
  };
  for (size_t i = 0; i < entries.size(); ++i) {
    const InboxEntry& e = entries[i];
    if (e.barrier) continue;
    if (e.disconnected) {
      commit();
      DisconnectLocked(e.node_id, e.link);
      continue;
    }
    NodeState* node = speaker(e);
    if (node == nullptr) {
      outcomes[i] = stale;
      continue;
    }
    NodeState& ns = *node;
    // When it arrived, not now: behind a burst the core handles messages seconds late, and a
    // node that then went silent must be lost a grace after it last spoke, not after the
    // backlog cleared (docs/design-notes.md "Agent messages").
    ns.last_seen_mono = std::max(ns.last_seen_mono, e.arrived_mono);
    const proto::AgentMessage& msg = e.message;
    if (std::holds_alternative<proto::Heartbeat>(msg)) {
      heartbeats.push_back(i);
    } else if (const auto* c = std::get_if<proto::ConformanceMessage>(&msg)) {
      commit();  // the verdict commits on its own, after everything before it
      outcomes[i] = OnConformanceLocked(ns, *c);
    } else if (const auto* notice = std::get_if<proto::PreemptNotice>(&msg)) {
      commit();
      outcomes[i] = OnPreemptNoticeLocked(ns, *notice);
    } else {
      const auto* log = std::get_if<proto::LogBatch>(&msg);
      if (log != nullptr && LogTrimNeedsCommitLocked(edit, *log)) commit();
      outcomes[i] = StageAttemptMessageLocked(ns, msg, edit, exited);
      if (outcomes[i].ok()) in_edit.push_back(i);
    }
  }
  commit();
  for (size_t i : heartbeats) {
    NodeState* node = speaker(entries[i]);
    outcomes[i] = node == nullptr
                      ? stale
                      : OnHeartbeatLocked(*node, std::get<proto::Heartbeat>(entries[i].message));
  }
  if (exited) {
    if (Status s = RequestScheduleLocked(); !s.ok()) {
      DegradedLocked("schedule", "scheduling after attempts exited", s);
    }
  }
  return outcomes;
}

}  // namespace sluice::server
