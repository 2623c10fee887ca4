// The server core's live state, entry by entry, and a change of it staged before its commit
// (docs/design-notes.md "Commit, then apply"); and the state the core keeps per concept (the
// placement view, money, a pass's buffers). ServerCore (server/server_core.h) holds these under
// its lock and names the entries as its own (ServerCore::NodeState, ...); nothing else uses them
// but VerificationQueue, which reads and sets a node's verification flags for the core.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "audit/verification.h"
#include "common/inventory.h"
#include "common/json.h"
#include "market/job_market.h"
#include "market/reliability.h"
#include "sched/scheduler.h"
#include "sched/shape_rankings.h"
#include "server/core_types.h"
#include "server/finished_jobs.h"
#include "spec/job_spec.h"
#include "store/store.h"

namespace sluice::server::core_state {

struct NodeState {
  store::NodeRecord record;
  // record.inventory parsed once, when it changes (registration, load), never per query.
  std::shared_ptr<const Inventory> inventory;
  // What the node sells when idle (its GPUs, totals and offers), built on first use after any
  // change to the record, verdict or reliability (each of those resets it): placement reads
  // it on every submit and exit, and building offers for every node each time was the cost.
  mutable std::shared_ptr<const sched::NodeCapacity> idle;
  // The same less what its active attempts hold, with whether it takes work now: built on
  // first use after its idle capacity, its attempts or its online state change (ApplyLocked
  // resets it), and shared with every pass and listing until then.
  mutable std::shared_ptr<const sched::NodeCapacity> now;
  // The digest of Snapshot(record) once that snapshot is durably in the store; empty when
  // unknown. Placements reuse it instead of parsing, dumping and hashing the whole inventory
  // and conformance report each time (a tenth of the server's time in a burst of placements).
  // Cleared wherever the record is replaced (ApplyLocked, a hello); set only after the commit
  // that wrote the snapshot. Debug builds check it against a fresh Snapshot on every use.
  std::string snapshot_digest;
  std::shared_ptr<AgentLink> link;  // null while disconnected
  int64_t last_seen_mono = 0;       // Clock::MonotonicMillis of the last sign of life
  bool since_restart = false;       // loaded at start and not back yet (reconnect_window_ms)
  // Trust: a conformance run was asked for and its report has not come; the server's verdict
  // on the last report (its usable toolkits and PyTorch builds go into offers).
  bool awaiting_report = false;
  bool has_verdict = false;
  audit::Verdict verdict;
  market::Reliability reliability;
  int64_t online_since_ms = 0;  // wall ms this connection's uptime span started; 0 offline
  // The nonces of the `reverify` requests not yet answered, oldest first. A conformance report
  // must echo one (each is used once), so a report captured elsewhere cannot be replayed.
  std::vector<std::string> report_nonces;
  // Marks `nonce` (one ServerCore::CheckReportNonceLocked accepted) and every older one used
  // (core_identity.cc); on the node as an edit stages it.
  void ConsumeReportNonce(const std::string& nonce);
  // Storm-proof verification (issue 12 item 5; verification_queue.h). A requested run waits
  // here while the server already has its maximum of suites running; `awaiting_report` is set
  // for it all the same (it is under way, and jobs may wait for it).
  bool verify_queued = false;
  std::string verify_reason;         // the queued request's trigger
  int64_t verify_queue_order = 0;    // first come, first served (VerificationQueue)
  int64_t verify_admitted_mono = 0;  // when its `reverify` was sent
  int verify_failures = 0;           // failed verdicts in a row
  int64_t verify_retry_mono = 0;     // when to ask again after a failure; 0: not scheduled
};
// Money (issues 14 and 15): open meters by attempt id, balances by account (micro-dollars),
// the last settlement and budget check.
struct MoneyState {
  std::map<std::string, store::MeterRecord> open_meters;
  std::map<std::string, int64_t> balances;
  int64_t last_settle_mono = 0;  // when the last settlement round began
  // A round in progress (SettleRoundStepLocked): the id of the next meter to settle.
  std::optional<std::string> settle_next;
  int64_t last_budget_check_mono = 0;
  // The jobs in the job map with a max_total_cost (IndexJobLocked keeps it): the budget check
  // looks up the job of an attempt only when its job is here, or its payer or team has a limit.
  std::unordered_set<std::string> budgeted_jobs;
  // Job -> its attempt whose cost anomaly was raised (NoteAnomaliesLocked): once per attempt,
  // and only a job's current attempt is asked, so a later attempt replaces it. Dropped when the
  // job leaves memory (retired or deleted), when no anomaly can be raised for it any more.
  std::map<std::string, std::string> anomalies_raised;
  // StoredBytesLocked's cache: job -> (what it keeps, as a key; bytes). Derived, not state.
  std::map<std::string, std::pair<std::string, int64_t>> stored_bytes;
};
// What holds the core's lock, for its per-holder hold times (ServerCore::mu_, TimedMutex).
enum LockHolder : size_t {
  kHeldForRequest,        // API requests, hellos, anything not named below
  kHeldForAgentMessages,  // an inbox batch (HandleWaitingAgentMessages)
  kHeldForPlacement,      // a scheduler pass (SchedulerLoop)
  kHeldForTick,           // the tick and the reliability refresh it applies
  kHeldForHeartbeat,      // a heartbeat answered on an io thread (AnswerHeartbeatNow)
};
// Finished jobs out of memory (issue 12 item 3; docs/design-notes.md "Finished jobs"): what
// stays of each (FinishedJobs), each job's active attempts (a finished job stays whole while
// one still runs: its exit needs the job), and the jobs that finished or lost an attempt since
// the last tick (ServerCore::RetireFinishedLocked looks at those, not at every job).
struct FinishedState {
  FinishedJobs jobs;
  std::unordered_map<std::string, int> active_attempts;
  std::vector<std::string> retiring;
};
// CapacityLocked's view of the fleet (docs/design-notes.md "Placement at scale"): the nodes in
// it in id order, each one's place, the nodes changed since it was brought up to date, whether it
// is to be built afresh, and the earliest pause in it that ends (a pause is read against the
// clock: past its end, all is built afresh). With it, its sched::FleetFacts, so a pass need not
// read every node for them: how many of its nodes have an interruptible or preempting attempt,
// and its paused nodes' places.
struct CapacityView {
  std::vector<std::shared_ptr<const sched::NodeCapacity>> nodes;
  std::unordered_map<std::string, size_t> slot;
  std::unordered_set<std::string> dirty;
  bool stale = true;
  int64_t pause_ends_ms = 0;
  size_t preemptible = 0;
  std::set<size_t> paused;
  sched::FleetFacts facts;
};
struct JobState {
  store::JobRecord record;
  spec::JobSpec spec;
  market::MarketRequest market;  // compiled from spec
  int attempts = 0;              // attempts made so far; the next one is attempts + 1
  // interruptible-then-on-demand: whether it may use on-demand capacity now, and since when
  // (monotonic ms) it has been waiting in the queue.
  bool fell_back = false;
  int64_t queued_since_mono = 0;
  int64_t order = 0;
  bool never_fits = false;
  // RequestLocked's cache: shared by the copies an edit stages, rebuilt when it no longer
  // matches (fell_back is the one input that changes while a job is queued).
  mutable std::shared_ptr<const sched::JobRequest> request;
};
// Incremental placement (sched::ScheduleOptions; docs/design-notes.md "Placement at scale"):
// the last full pass's exhausted shapes, the nodes whose attempts changed since, and whether any
// node's offers or presence changed since (then the next pass searches every node for every
// shape).
struct SearchState {
  std::set<std::string> exhausted_shapes;
  std::set<std::string> changed_nodes;
  bool nodes_changed = true;
  int64_t last_full_mono = 0;
  // The tick asked the scheduler thread for a full search before the last one grows too old for
  // incremental passes (TickState), so a submit's own pass never falls back to every node.
  bool full_due = false;
  // Each shape's offers in order of estimate, kept between passes: a submit's own pass walks its
  // shape's ranking from the best estimate instead of reading every node (sched/shape_rankings.h).
  sched::ShapeRankings rankings;
};
// A placement pass's queue, kept between passes for their capacity (ServerCore::PlaceLocked): a
// deep queue's vectors allocated and freed per pass cost more in the kernel than the pass itself.
struct PassBuffers {
  std::vector<const JobState*> states;
  std::vector<const sched::JobRequest*> queue;
  std::vector<std::shared_ptr<const sched::JobRequest>> copies;  // not cached in a job
  std::vector<int> tails;  // per position: its group's entry in the pass's tails, or -1
};
// The tick's own timekeeping (ServerCore::TickState); guarded by the core's lock.
struct TickTimes {
  int64_t last_tick_mono = 0;        // for CoreOptions::stall_credit_after_ms
  int64_t read_lag_logged_mono = 0;  // the last "reading late" line: one per 5 s at most
};
// The scheduler thread (ServerCore::StartScheduler) and what wakes it; guarded by the core's lock.
struct SchedulerThread {
  bool due = false;                  // a pass is due
  bool stop = false;                 // the thread is to stop
  std::condition_variable_any wake;  // waits with the core's lock, a TimedMutex
  std::thread thread;
};
// A state change computed from the live state and not yet applied (issue 12 item 1;
// docs/design-notes.md "Commit, then apply"; LevelDB's VersionEdit is the model): the store
// writes and, staged beside them, every entry of memory the change implies, whole.
// CommitLocked(Edit&) writes the batch and only then applies the staged entries and sends what
// the change tells agents, so a failed write leaves memory as it was. Code computing an edit
// reads an entry it staged through the Staged*/View* accessors, never the live maps.
struct Edit {
  store::WriteBatch batch;
  std::map<std::string, JobState> jobs;
  std::map<std::string, NodeState> nodes;
  // Active attempts; nullopt: the attempt ended and leaves the active set with its counters.
  std::map<std::string, std::optional<store::AttemptRecord>> attempts;
  std::map<std::string, std::vector<store::CheckpointRecord>> checkpoints;  // kept, per job
  std::map<std::string, std::map<std::string, int64_t>> avoid;              // cooldowns to add
  std::map<std::string, int64_t> max_log_seq;                               // per attempt
  std::map<std::string, int64_t> log_bytes;                                 // per attempt
  std::map<std::string, std::string> anomalies;  // job -> attempt: cost anomalies it raises
  std::set<std::string> alerts;  // budget alerts (scope|month|percent) this edit raises
  // Meters (issue 14) opened, settled or closed (nullopt: closed, it leaves the open set), and
  // what the edit's ledger transactions add to each account's balance.
  std::map<std::string, std::optional<store::MeterRecord>> meters;
  std::map<std::string, int64_t> balance_deltas;
  std::vector<std::pair<std::string, Json>> sends;  // to a node's agent, once applied
  std::vector<std::shared_ptr<AgentLink>> close;    // links to close, once applied
};

}  // namespace sluice::server::core_state
