// The server core's public types (issue 12 item 2: the façade's header stays small): its
// options, the agent link it sends through, who submits and how, the views its queries return,
// and the JSON forms the API handlers share. ServerCore itself is server/server_core.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "audit/verification.h"
#include "common/json.h"
#include "market/explain.h"
#include "market/job_market.h"
#include "market/offer.h"
#include "market/reliability.h"
#include "store/blob_store.h"
#include "store/store.h"

namespace sluice::server {

// The server's end of one agent's WebSocket. A seam: tests record what would be sent.
class AgentLink {
 public:
  virtual ~AgentLink() = default;
  virtual void Send(const Json& message) = 0;  // must not block
  virtual void Close() = 0;
};

class Accounts;

// Who opened an agent channel (issue 10 item 2): what its bearer token proved.
struct AgentIdentity {
  std::string account_id;  // the provider account: the join token's or the credential's owner
  std::string token_id;
  std::string node_id;  // set when the token is a node credential (it proves this node)
};

// Who submits a job, and how (issue 10 items 1 and 3).
struct SubmitOptions {
  std::string owner;  // account id; "" is the admin (as before accounts)
  std::string team;   // a team the owner belongs to (checked by the API), or ""
  // `Idempotency-Key`: the same key and body within idempotency_ttl_ms return the first job; the
  // same key with another body is refused (AlreadyExists).
  std::string idempotency_key;
  std::string body_sha256;
  bool queue_unschedulable = false;
  bool exempt_from_quota = false;  // admins
};

struct CoreOptions {
  int64_t heartbeat_interval_ms = 3000;  // told to agents in `welcome`
  int64_t heartbeat_grace_ms = 15000;    // silence after which a node is lost
  // How long each heartbeat's reply lets the node's running attempts run (fencing): shorter
  // than the grace, so an agent cut off from us has frozen them before we place them elsewhere.
  int64_t lease_ms = 10000;
  // A gap between two ticks longer than this is the server's own stall (stopped, swapped out, a
  // slow disk): nodes could not be heard meanwhile, so the gap beyond this is not counted as
  // their silence. 0: off (unit tests jump the clock between ticks on purpose).
  int64_t stall_credit_after_ms = 0;
  // How late the server now reads what agents send, in ms (the io threads' lag: HttpServer::
  // io_lag). Ticks that keep time do not see io threads starved of CPU, which read heartbeats
  // seconds after they came: lag beyond read_lag_credit_after_ms is not counted as any node's
  // silence. Unset: no lag (unit tests set their own).
  std::function<int64_t()> read_lag_ms{};
  int64_t read_lag_credit_after_ms = 1000;
  // Storm-proof verification (issue 12 item 5): at most this many conformance suites run at
  // once (a fleet registering together would otherwise measure itself into failure); a failed
  // verification is retried this many times, after verify_retry_ms, doubling, with jitter.
  int max_concurrent_verifications = 8;
  int verify_retries = 3;
  int64_t verify_retry_ms = 60000;
  int64_t cancel_grace_ms = 10000;              // SIGTERM -> SIGKILL on the agent
  market::CostModel cost_model;                 // how offers are ranked and jobs placed
  int64_t preempt_cooldown_ms = 60000;          // a preempted job avoids that node this long
  int checkpoint_retention = 3;                 // checkpoints kept per job; older ones are deleted
  audit::VerificationRules verification_rules;  // how conformance reports are judged
  // A verified node is asked to run its conformance suite again after this long (0: never).
  int64_t reverify_interval_ms = 6LL * 3600 * 1000;
  // Limits (issue 10 item 5).
  int64_t idempotency_ttl_ms = 24LL * 3600 * 1000;  // how long an Idempotency-Key is kept
  int max_active_jobs_per_account = 1000;           // queued + starting + running
  int max_nodes_per_provider = 1000;                // registered, not revoked
  int64_t max_log_bytes_per_attempt = 64LL << 20;   // older lines are dropped past it
  // Read the minute's reliability history on a thread of its own, applied by a later tick, so
  // the tick that declares silent nodes lost never waits on 30 days of history (the server
  // does; unit tests read it inline, as they drive the clock tick by tick).
  bool reliability_in_background = false;
  // An agent with more messages than this waiting for the core is disconnected; it reconnects
  // and resends what was not acknowledged (AgentInbox).
  size_t max_agent_messages_waiting = 4096;
  // After a restart every agent reconnects at once, and on a big fleet that takes longer than
  // lease + grace. While hellos still arrive (one within the grace), a node that has not come
  // back yet is not declared lost, for at most this long after the restart.
  int64_t reconnect_window_ms = 120000;
  // Tests: posted agent messages wait until HandleWaitingAgentMessages is called (instead of
  // being handled inline), so a test can line several up as a loaded server would.
  bool hold_agent_messages = false;
  // Money (issue 14; docs/design-notes.md "Metering and the ledger"). The platform's fee, taken
  // from the provider's share, in basis points (500 = 5 %); how often running attempts' meters
  // are settled into the ledger (their end settles the rest at once).
  int platform_fee_bps = 0;
  int64_t settle_interval_ms = 60000;
  // The tick settles at most this many meters per tick, the rest on the ticks that follow (a
  // round): one commit of every meter of a big fleet held the core's lock for seconds.
  size_t settle_slice = 512;
  // Likewise the once-a-minute extension of online nodes' stored uptime spans: at 10,000 nodes
  // one commit of them all held the lock 19-35 ms (bench/uptime).
  size_t uptime_slice = 512;
  // A node its provider reclaimed (whole), or under a spot-termination notice, takes no new work
  // for this long unless its provider resumes it first (issue 15 item 5).
  int64_t reclaim_cooldown_ms = 30LL * 60 * 1000;
  // Bytes the platform moves for a job (its workdir and checkpoints, to and from nodes), USD per
  // GB (10^9 bytes). Storage is charged at cost_model.storage_price_per_gb_month, the rate
  // estimates use.
  double transfer_price_per_gb = 0;
  // Budgets (issue 15 item 1; docs/design-notes.md "Budgets"): how often running work is checked
  // against its job's max_total_cost and its account's credit, and how far ahead a stop looks
  // (on top of the grace period and final upload it reserves), to cover the check's own
  // interval and the exit's way back.
  int64_t budget_check_interval_ms = 1000;
  int64_t budget_margin_ms = 5000;
  // A pass reads each group of alike queued jobs only as far as can matter (QueueIndex,
  // sched::JobRun; docs/design-notes.md "Placement at scale"). false: every queued job, every
  // pass: the oracle tests compare the grouped passes against.
  bool group_queue = true;
};

// A monthly budget as `sluice budget --list` shows it: the record, whose it is, and what the
// scope was charged this month.
struct BudgetView {
  store::BudgetRecord budget;
  std::string name;  // "account alice", "team ml"
  std::string month;
  int64_t spent_micros = 0;
};

// A job's bill so far (`sluice job`, `sluice costs --job`): its meters and what they charged.
struct JobCost {
  std::vector<store::MeterRecord> meters;  // one per attempt that started, oldest first
  int64_t charged_micros = 0;              // settled into the ledger: all of the below
  int64_t compute_micros = 0;              // of which GPU or CPU time
  int64_t storage_micros = 0;              // of which its workdir and checkpoints kept
  int64_t transfer_micros = 0;             // of which bytes moved to and from nodes
  int64_t accruing_micros = 0;             // open meters' time not yet settled, at now
  int64_t fee_micros = 0;
  int64_t lost_micros = 0;
  int64_t credited_micros = 0;  // SLA credits paid back (README "SLA credits")
  // The market's expected cost to complete when its latest attempt was placed (0: unknown).
  int64_t estimate_micros = 0;
};

// What `sluice ledger check` reports: the store's sums and anything that disagrees.
struct LedgerReport {
  store::LedgerCheck check;
  std::vector<std::string> problems;  // empty: every transaction balances, every balance agrees
};

// Placement passes committed, by how far they searched (ServerCore::PlacementPasses).
struct PlacementPassCounts {
  int64_t full = 0;
  int64_t incremental = 0;
  // The nodes incremental passes searched for shapes nothing fitted before: those changed since
  // the last pass (an attempt placed or ended on them, their offers or presence changed).
  int64_t rechecked_nodes = 0;
};

struct JobDetail {
  store::JobRecord job;
  std::vector<store::AttemptRecord> attempts;
  std::vector<store::JobEvent> events;
};

struct NodeView {
  store::NodeRecord node;
  market::Reliability reliability;
  bool verifying = false;      // a conformance run was asked for and its report has not arrived
  bool verify_queued = false;  // ... and waits for a free slot (CoreOptions::max_concurrent_...)
  int gpus_free = 0;
  int cpus_free = 0;
  double memory_free_gb = 0;
  int running_attempts = 0;
  // What each GPU measured in the last verification, as the server judged it (issue 13 item 3).
  std::vector<audit::GpuSpeed> gpu_speeds;
};

// What `GET /v1/offers` returns: the offers that matched, best first, and how many matched.
struct OfferPage {
  std::vector<market::Offer> offers;
  size_t matched = 0;
  std::optional<market::Explanation> explanation;  // set when nothing matched
};

// What `POST /v1/estimate` returns.
struct EstimatePage {
  market::MarketRequest request;
  std::vector<market::RankedOffer> ranked;  // best first
  size_t matched = 0;                       // offers matching the query within budget
  size_t over_budget = 0;                   // matching the query but above max_price_per_hour
  std::optional<market::Explanation> explanation;  // set when nothing matched
};

// One item of a job's stream: {"type":"event"|"log"|"end", ...}. Returns false when the reader
// is gone, and the core drops the subscription. A null item is a liveness probe (Tick sends it so
// readers that left a job that never ends are dropped too); it must not be written.
using StreamSink = std::function<bool(const Json& item)>;

// The chunk digests a checkpoint manifest refers to; empty when it cannot be read.
std::vector<std::string> ManifestChunks(const store::BlobStore& blobs, const std::string& manifest);
// The same, or an error when there is no blob store or the manifest cannot be read or parsed.
Result<std::vector<std::string>> ReadManifestChunks(const store::BlobStore* blobs,
                                                    const std::string& manifest);

// JSON views shared by the API handlers.
Json JobToJson(const store::JobRecord& job);
Json AttemptToJson(const store::AttemptRecord& att);
Json EventToJson(const store::JobEvent& ev);
Json LogToJson(const store::LogLine& line);
Json NodeToJson(const NodeView& node);

}  // namespace sluice::server
