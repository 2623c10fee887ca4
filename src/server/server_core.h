// ServerCore: the marketplace's live state and the rules that change it. The HTTP handlers and
// the agent channel call into it; it writes every change to the Store before acknowledging
// (DESIGN.md §7), asks the pure scheduler for a plan after every event that can change
// placement (submit, capacity change) and pushes work to agents through AgentLink.
//
// Thread safety: every public method takes mu_; callbacks (AgentLink::Send, stream sinks) are
// invoked with mu_ held and must not block or call back into the core.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "audit/signing_key.h"
#include "audit/verification.h"
#include "common/agent_protocol.h"
#include "common/clock.h"
#include "common/inventory.h"
#include "common/json.h"
#include "common/status.h"
#include "market/catalog.h"
#include "market/explain.h"
#include "market/job_market.h"
#include "market/offer.h"
#include "market/offer_index.h"
#include "market/query.h"
#include "market/reliability.h"
#include "sched/scheduler.h"
#include "server/agent_inbox.h"
#include "server/queue_index.h"
#include "spec/job_spec.h"
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
  // sched::MostPlacements; docs/design-notes.md "Placement at scale"). false: every queued job,
  // every pass: the oracle tests compare the grouped passes against.
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

class ServerCore {
 public:
  ServerCore(store::Store* store, const Clock* clock, CoreOptions options);
  ~ServerCore();  // stops the scheduler and inbox threads, if started

  // Runs scheduling passes on a thread of their own from now on (the server does; unit tests
  // do not, and get each pass inline): a state change that frees or adds capacity marks a pass
  // due and wakes the thread, so changes arriving while a pass runs share the next one instead
  // of each paying for a pass over the whole queue (docs/design-notes.md "Placement at scale").
  void StartScheduler();
  // Handles agents' messages on a thread of their own from now on (the server does; unit tests
  // get each message handled inline): PostAgentMessage returns at once, and the thread handles
  // the messages waiting, many per lock and per store commit (docs/design-notes.md "Agent
  // messages: one commit for many").
  void StartInbox();

  // Rebuilds the live state from the store. Nodes start offline with their grace counted from
  // now, so agents have a full grace period to reconnect after a server restart.
  Status Load();

  // --- user API ---
  // Validates (including the GPU label), persists, schedules. Returns the job as stored. A job
  // no registered node could ever run is refused with FailedPrecondition and the explanation,
  // unless `queue_unschedulable` (it then waits, with the reason, for such a node to join).
  Result<store::JobRecord> SubmitJob(const spec::JobSpec& spec, const std::string& workdir_blob,
                                     bool queue_unschedulable = false);
  // The same for an account. `replayed` (may be null) is set when an idempotency key matched an
  // earlier submission and that job is returned instead of a new one.
  Result<store::JobRecord> SubmitJob(const spec::JobSpec& spec, const std::string& workdir_blob,
                                     const SubmitOptions& options, bool* replayed = nullptr);
  // The offers a job could use, ranked by `objective` (issue 3 item 5): live agent offers and
  // catalog offers alike, each with its cost estimate. `hours` and `objective` override the
  // spec's.
  Result<EstimatePage> Estimate(const spec::JobSpec& spec, std::optional<double> hours,
                                std::optional<market::Objective> objective, size_t limit);
  std::vector<store::JobRecord> ListJobs(std::optional<store::JobState> state, size_t limit);
  // Newest first, only those `visible` accepts (a tenant's view), at most `limit`.
  std::vector<store::JobRecord> ListJobs(
      std::optional<store::JobState> state, size_t limit,
      const std::function<bool(const store::JobRecord&)>& visible);
  // The job's owner, team and the nodes its attempts ran on (for access checks); NotFound.
  struct JobAccess {
    std::string owner;
    std::string team;
    std::vector<std::string> node_owners;  // provider accounts of the nodes it ran on
  };
  Result<JobAccess> JobAccessOf(const std::string& id);
  // A node by id or name (NotFound, or InvalidArgument when a name is ambiguous).
  Result<store::NodeRecord> FindNode(const std::string& id_or_name);
  // Whether an attempt active on `node_id` needs blob `digest`: its job's workdir, the checkpoint
  // manifest it restores, or a chunk of that manifest.
  bool NodeNeedsBlob(const std::string& node_id, const std::string& digest);
  // Every blob something still needs: jobs' workdirs, kept checkpoint manifests and their chunks,
  // the manifests active attempts restore (server/upload_gc.h keeps these).
  std::set<std::string> ReferencedBlobs();
  // Jobs (not finished) of an account, for quotas.
  int ActiveJobsOf(const std::string& account_id);
  Result<JobDetail> GetJob(const std::string& id);
  Result<store::JobRecord> CancelJob(const std::string& id);
  // Deletes a finished job with its attempts, events, logs and checkpoints, and frees the blobs
  // nothing else uses. FailedPrecondition while it is not finished (cancel it first).
  Status DeleteJob(const std::string& id);
  std::vector<NodeView> ListNodes();
  // Every offer: connected nodes' (source agent) and imported catalogs' (source catalog).
  std::vector<market::Offer> ListOffers();
  // The offers matching `query`, ordered by `sort` (then id), at most `limit`.
  OfferPage SearchOffers(const market::Query& query, const std::vector<market::SortKey>& sort,
                         size_t limit);
  // Parses a cloud price catalog and replaces that provider's catalog offers atomically.
  Result<market::CatalogImport> ImportCatalog(const std::string& source_name,
                                              const std::string& csv);
  Result<std::vector<store::LogLine>> ReadLogs(const std::string& job_id, int64_t after_id,
                                               int limit);

  // Replays the job's stored events and/or logs, then delivers new ones live until the job
  // ends, when an {"type":"end"} item is sent and the subscription closes.
  Result<uint64_t> Subscribe(const std::string& job_id, bool events, bool logs, StreamSink sink);
  void Unsubscribe(uint64_t id);

  // --- agent channel ---
  // Registers or re-registers a node and reconciles what the agent says it runs with what the
  // store says. Returns the node id to put in `welcome`.
  // `who` is what the connection's token proved (issue 10 item 2): a join token enrols a new
  // node, owned by its provider account, and the welcome carries the node's new credential; a
  // node id already enrolled is only taken with that node's credential.
  Result<std::string> AgentHello(const std::shared_ptr<AgentLink>& link, const proto::Hello& hello,
                                 const AgentIdentity& who = {});
  // A message from a node that said hello on `link` (heartbeat, conformance, started, log,
  // checkpoint, preempt_notice, exited), queued behind the node's earlier ones. `done` gets its
  // outcome once handled: inline before this returns, or on the inbox thread (StartInbox). The
  // returned status refuses the message before it was queued (too many waiting from this node;
  // the server stopping), and then `done` is never called.
  Status PostAgentMessage(const std::string& node_id, const std::shared_ptr<AgentLink>& link,
                          proto::AgentMessage msg, std::function<void(const Status&)> done);
  // Runs `then` once every message the node posted before it is handled (the same refusals).
  Status PostAgentBarrier(const std::string& node_id, std::function<void()> then);
  // The connection closed: handled after the messages it brought.
  void PostAgentDisconnected(const std::string& node_id, const std::shared_ptr<AgentLink>& link);
  // A node proved by its credential is saying hello: a sign of life before the hello takes the
  // lock, so after a restart a node whose hello waits behind the reconnect storm is not declared
  // lost for the wait.
  void NoteAgentHello(const std::string& node_id) { inbox_.NoteHeard(node_id); }
  // Handles what agents posted, a batch at a time, then calls each entry's `done` (the inbox
  // thread's loop; inline after each post without one).
  void HandleWaitingAgentMessages();
  // The same, waiting for the outcome (tests; `link` must outlive the call).
  Status AgentMessage(const std::string& node_id, const AgentLink* link,
                      const proto::AgentMessage& msg);
  // The same, read from JSON first (InvalidArgument naming the bad field).
  Status AgentMessage(const std::string& node_id, const AgentLink* link, const Json& msg);
  void AgentDisconnected(const std::string& node_id, const AgentLink* link);

  // Marks nodes lost whose heartbeats stopped past the grace, and places jobs whose cooldown
  // on a preempting node ended. Called periodically.
  void Tick();

  // --- preemption (issue 4) ---
  // The provider takes back a node, or some of its GPUs (`gpus` empty: all): every attempt on
  // them is preempted (notice → SIGTERM → grace → SIGKILL → checkpoint → requeue). Returns the
  // preempted attempt ids. `node` is a node id or name.
  Result<std::vector<std::string>> ReclaimNode(const std::string& node,
                                               const std::vector<int>& gpus,
                                               const std::string& cause);

  // `sluice node resume`: a paused node (reclaimed, or noticed) takes work again now. A node not
  // paused is left as it is. `node` is a node id or name. Returns the node as stored.
  Result<store::NodeRecord> ResumeNode(const std::string& node);

  // --- trust (issue 5) ---
  // Asks the node's agent to run its conformance suite now (`sluice node verify`). The node
  // keeps its state until the report arrives. `node` is a node id or name.
  Result<store::NodeRecord> VerifyNode(const std::string& node);

  // --- node identity (issue 10 item 2; docs/design-notes.md "Node identity") ---
  // `sluice node revoke`: cuts a node off for good. Its credentials are revoked in the same
  // commit as the node (revoked, lost), its link is closed, its offers leave the market and its
  // running attempts are handled as a lost node's (requeued). Revoking a revoked node is a no-op.
  // `node` is a node id or name. Returns the node as stored.
  Result<store::NodeRecord> RevokeNode(const std::string& node);
  // Appends one entry to the audit log (API mutations; the caller removes secrets).
  Status RecordAudit(store::AuditEntry entry);
  Result<std::vector<store::AuditEntry>> ReadAudit(int64_t since_ms, int64_t after_id, int limit);
  // The signed audit bundle of a job (a .zip): environment-fingerprint.json,
  // hardware-inventory.json, conformance-log.txt, cost-statement.json, events.jsonl, job.json,
  // manifest.sha256 and
  // signature.p7s. FailedPrecondition without a signing identity.
  Result<std::string> AuditBundle(const std::string& job_id);
  void SetSigningIdentity(SigningIdentity identity) { signing_ = std::move(identity); }
  const std::string& SigningCertificate() const { return signing_.cert_pem; }

  // Where checkpoint manifests must exist before the server accepts them as complete.
  void SetBlobStore(store::BlobStore* blobs) { blobs_ = blobs; }
  // Where node credentials are minted and revoked (issue 10 item 2). Without it (unit tests),
  // hello trusts the node id as before.
  void SetAccounts(Accounts* accounts) { accounts_ = accounts; }

  // --- money (issue 14; core_billing.cc) ---
  // An account's balance in micro-dollars: the sum of its ledger entries.
  int64_t BalanceOf(const std::string& account_id);
  // `sluice account credit`: `amount` (micro-dollars, > 0) from the funding account to the
  // account, as one committed transaction. May let its waiting jobs run.
  Result<store::LedgerTxn> TopUp(const std::string& account_id, int64_t amount,
                                 const std::string& memo);
  Result<JobCost> CostOfJob(const std::string& job_id);
  Result<std::vector<store::CostRow>> Costs(const store::CostQuery& query);
  // Every transaction sums to zero, every balance in memory equals its entries' sum, and the
  // compute charged agrees three ways (entries, meters, cost totals). Holds the lock meanwhile.
  Result<LedgerReport> CheckLedger();
  // A credit limit changed: jobs waiting for credit are tried again, and jobs it stopped are
  // queued again when the account may spend.
  void CreditChanged(const std::string& account_id);
  // Sets a job's max_total_cost (nullopt: none). A job its budget stopped is queued again and
  // resumes from its checkpoint (issue 15 item 1); placement then says whether the new budget
  // leaves room to run.
  Result<store::JobRecord> SetJobBudget(const std::string& job_id,
                                        std::optional<double> max_total_cost);
  // Monthly budgets (issue 15 item 1): sets (nullopt: removes) the budget of `scope`
  // ("account:<id>" | "team:<name>") and where its alerts are POSTed; a raise queues again the
  // jobs it stopped. Every budget with this month's spend; alerts of this month and the last
  // (`undelivered`: only those whose webhook is still to be delivered); a delivery's outcome.
  Result<store::BudgetRecord> SetMonthlyBudget(const std::string& scope,
                                               std::optional<int64_t> monthly_micros,
                                               const std::string& webhook);
  std::vector<BudgetView> ListBudgets();
  Result<std::vector<store::BudgetAlert>> BudgetAlerts(bool undelivered);
  Status RecordAlertDelivery(const store::BudgetAlert& alert);
  // Stops, through the preemption path, running attempts whose job budget or account credit
  // would be passed within the grace period and final upload (the tick calls it every
  // budget_check_interval_ms).
  Status EnforceBudgets();
  // Settles every open meter up to now (the tick does it every settle_interval_ms).
  Status SettleMeters();

  const CoreOptions& options() const { return options_; }

  // Everything the core holds in memory that a state change can alter, as canonical JSON (maps
  // in key order). Tests compare dumps to prove a failed commit changed nothing (issue 12 item
  // 1). Reliability scores are left out: they are recomputed from the store, not changed by
  // commits.
  Json StateDump();
  // Failures nobody was waiting for (DegradedLocked), by kind; /v1/metrics exports them as
  // sluice_degraded_total{kind}.
  std::map<std::string, int64_t> DegradedCounts();
  // Placement passes committed (PlaceLocked), by how far they searched: every node for every
  // shape ("full"), or only the nodes changed since the last full one ("incremental"; a
  // submit's own pass included). /v1/metrics exports them as sluice_placement_passes_total.
  struct PassCounts {
    int64_t full = 0;
    int64_t incremental = 0;
  };
  PassCounts PlacementPasses();
  // The store's own work (WAL checkpoints); no lock: the store counts with atomics.
  store::StoreCounters StoreCounters() { return store_->Counters(); }

 private:
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
    // Storm-proof verification (issue 12 item 5; core_verification.cc). A requested run waits
    // here while the server already has its maximum of suites running; `awaiting_report` is set
    // for it all the same (it is under way, and jobs may wait for it).
    bool verify_queued = false;
    std::string verify_reason;         // the queued request's trigger
    int64_t verify_queue_order = 0;    // first come, first served (verify_queue_seq_)
    int64_t verify_admitted_mono = 0;  // when its `reverify` was sent
    int verify_failures = 0;           // failed verdicts in a row
    int64_t verify_retry_mono = 0;     // when to ask again after a failure; 0: not scheduled
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
    std::set<std::string> anomalies;  // attempts whose cost anomaly this edit raises
    std::set<std::string> alerts;     // budget alerts (scope|month|percent) this edit raises
    // Meters (issue 14) opened, settled or closed (nullopt: closed, it leaves the open set), and
    // what the edit's ledger transactions add to each account's balance.
    std::map<std::string, std::optional<store::MeterRecord>> meters;
    std::map<std::string, int64_t> balance_deltas;
    std::vector<std::pair<std::string, Json>> sends;  // to a node's agent, once applied
    std::vector<std::shared_ptr<AgentLink>> close;    // links to close, once applied
  };
  // The entry as the edit leaves it, copied from the live state on first use. A job or node not
  // in memory is staged default-constructed (it is inserted when the edit applies).
  JobState& StagedJobLocked(Edit& edit, const std::string& job_id);
  NodeState& StagedNodeLocked(Edit& edit, const std::string& node_id);
  // An active attempt (it must be active, live or staged).
  store::AttemptRecord& StagedAttemptLocked(Edit& edit, const std::string& attempt_id);
  std::vector<store::CheckpointRecord>& StagedCheckpointsLocked(Edit& edit,
                                                                const std::string& job_id);
  // Read-only: the staged entry if there is one, else the live one (null when neither).
  const JobState* ViewJobLocked(const Edit& edit, const std::string& job_id) const;
  const store::AttemptRecord* ViewAttemptLocked(const Edit& edit,
                                                const std::string& attempt_id) const;
  // Writes the edit's batch; only if that succeeds, applies the edit to memory, delivers the
  // batch to streams, collects dropped checkpoints' blobs and sends the edit's messages.
  Status CommitLocked(Edit& edit);
  void ApplyLocked(Edit& edit);
  // Files `job_id` in the queue index as jobs_ now holds it (or drops it, when gone).
  void IndexJobLocked(const std::string& job_id);
  // A failure nobody waits for (the tick, a disconnect): logged with `what` failed, and counted
  // under `kind` (a fixed name: schedule, node_loss, uptime, disconnect, audit), never silent.
  void DegradedLocked(const char* kind, const std::string& what, const Status& status);

  struct Subscriber {
    std::string job_id;
    bool events = false;
    bool logs = false;
    StreamSink sink;
  };

  // A node by id (which wins) or by name: NotFound, or InvalidArgument when a name is ambiguous.
  Result<NodeState*> NodeByIdOrNameLocked(const std::string& id_or_name);
  // Paused nodes (core_pause.cc; issue 15 item 5): stages the node paused for the cool-down,
  // with why; and, from the tick, lets nodes whose cool-down passed take work again.
  void PauseNodeLocked(Edit& edit, const std::string& node_id, const std::string& why);
  void EndPausesLocked();
  // Metering (core_billing.cc): opens a meter for each attempt the edit starts and closes (and
  // bills) the meter of each it ends, into the edit's own batch. Called by CommitLocked first.
  void MeterLocked(Edit& edit);
  // Bills `meter` up to `until_ms` into the edit (a ledger transaction and its cost delta).
  Status SettleMetersLocked();
  // `credit_micros` of it is credited back at once (an SLA credit, for `credit_reason`).
  store::MeterRecord SettleIntoLocked(Edit& edit, const store::MeterRecord& meter, int64_t until_ms,
                                      int64_t lost_micros, int64_t credit_micros = 0,
                                      const std::string& credit_reason = "");
  // SLA credits (issue 15 item 3): pays `amount` of what `m` charged (at most what it charged and
  // did not credit yet) back to its payer, as a ledger transaction with `reason`, a cost delta
  // and a job event; updates `m`'s credited_micros. The caller stages `m`.
  void CreditIntoLocked(Edit& edit, store::MeterRecord& m, int64_t amount,
                        const std::string& reason);
  // Credits an open attempt's meter in full from now on, and what it charged so far (its node
  // failed verification while running it).
  void CreditInFullLocked(Edit& edit, const std::string& attempt_id, const std::string& reason);
  // When the lease of the node's attempts runs out (wall ms): its last renewal plus the lease.
  // `fallback` when the server has not renewed it since it started.
  int64_t LeaseEndLocked(const std::string& node_id, int64_t fallback) const;
  // A lease was renewed for the node's attempts now (a heartbeat's reply, a hello).
  void NoteLeaseRenewedLocked(const std::string& node_id);
  // Whether the account may start more work: its balance is above minus its credit limit.
  // `edit`: counting the balance changes it stages.
  bool CanSpendLocked(const std::string& account_id, const Edit* edit = nullptr) const;
  // Why it may not (names the balance, the limit and the command that adds credit).
  std::string CreditRefusalLocked(const std::string& account_id) const;
  std::string PayerLocked(const std::string& owner) const;
  // Storage and transfer (issue 14): blob sizes from the blob store (0 without one), the blobs a
  // checkpoint is made of, and what a job keeps stored now (its workdir and kept checkpoints,
  // each blob once).
  int64_t BlobBytesLocked(const std::string& digest) const;
  std::set<std::string> CheckpointBlobsLocked(const std::string& manifest) const;
  int64_t StoredBytesLocked(const std::string& job_id);
  // Charges, into the edit, the bytes its started attempts downloaded (workdir, restored
  // checkpoint) and its new checkpoints uploaded, at options_.transfer_price_per_gb.
  void ChargeTransfersLocked(Edit& edit);
  void ChargeTransferLocked(Edit& edit, const std::string& job_id, const std::string& attempt_id,
                            const std::string& node_id, int64_t bytes, const std::string& what);
  // Bills each job's storage up to now, starting a new storage meter when what it keeps changed.
  void SettleStorageLocked(Edit& edit);
  std::string ProviderLocked(const std::string& node_id) const;
  // Budgets (core_budget.cc). What the job's attempts were charged (compute and transfer), as
  // committed; its budget in micro-dollars, if it has one; what a stop costs at `price` (the
  // grace period and the final checkpoint's upload), so a stop never overshoots.
  int64_t JobSpentLocked(const std::string& job_id) const;
  struct JobCharges;
  const JobCharges& JobChargesLocked(const std::string& job_id) const;
  // Anomalies (issue 15 item 2): a job whose charges (with this edit's) run 20 % over its current
  // attempt's estimate at placement gets a `cost-anomaly` event naming the cause: restarts, a
  // run longer than expected, storage, transfer. Called by MeterLocked.
  void NoteAnomaliesLocked(Edit& edit);
  std::optional<int64_t> BudgetMicrosLocked(const JobState& js) const;
  int64_t StopReserveLocked(const JobState& js, int64_t price_micros_per_hour) const;
  // What the edit stages as charged to the job on top of JobSpentLocked.
  int64_t StagedSpendLocked(const Edit& edit, const std::string& job_id) const;
  // The last wall ms `meter` may be billed to without its job's charges passing its budget (a
  // backstop: stops come earlier); INT64_MAX for a job without one.
  int64_t BudgetEndLocked(const Edit& edit, const store::MeterRecord& meter) const;
  // What of `amount` may still be charged to the job under its budget.
  int64_t WithinBudgetLocked(const Edit& edit, const std::string& job_id, int64_t amount) const;
  // Queues again the budget-exhausted jobs `which` accepts that may now run (their budget, their
  // account's credit and monthly budgets allow it).
  void RequeueExhaustedLocked(Edit& edit,
                              const std::function<bool(const store::JobRecord&)>& which);
  // Monthly budgets (core_monthly_budget.cc): this UTC month ("2026-12"); "account alice";
  // the budgeted scopes a charge of `payer` for a job of `team` counts against; what a scope was
  // charged this month (cached); why an owner's job may not start now ("" when it may); alerts
  // the edit's charges raise (called by MeterLocked); a new month requeues what budgets stopped.
  std::string MonthLocked() const;
  std::string ScopeNameLocked(const std::string& scope) const;
  std::vector<std::string> BudgetScopesLocked(const std::string& payer,
                                              const std::string& team) const;
  int64_t ScopeSpentLocked(const std::string& scope) const;
  std::string MonthlyRefusalLocked(const std::string& owner, const std::string& team) const;
  void NoteBudgetAlertsLocked(Edit& edit);
  void NewMonthLocked();
  Status EnforceBudgetsLocked();

  // Places what can be placed now (PlaceLocked); a failure is retried by the next tick.
  Status ScheduleLocked();
  // A pass is due because capacity or the queue changed: inline, or on the scheduler thread
  // when it runs (StartScheduler).
  Status RequestScheduleLocked();
  // A job just queued: places it alone when no pass is due (every earlier job was tried against
  // this very capacity by the last pass, so a pass over them would only repeat their answers),
  // else leaves it to the pass that is due.
  Status ScheduleNewJobLocked(const std::string& job_id);
  void SchedulerLoop();
  // The tick's work on the live state; takes mu_ itself. True when reliability is due a
  // refresh.
  bool TickState();
  // Places the queued jobs (`only`: just that one), committing the placements as one edit.
  Status PlaceLocked(const std::string* only = nullptr);
  // What placement reads of a job, built once and kept while it does not change.
  // The same, built afresh; `spent`: what the job was charged so far (for its budget).
  sched::JobRequest MakeRequestLocked(const std::string& id, const JobState& js,
                                      int64_t spent) const;
  std::shared_ptr<const sched::JobRequest> RequestLocked(const std::string& id,
                                                         const JobState& js) const;
  // Every node that can take work or may come back, as it stands: what placement searches.
  // Kept between calls and brought up to date from the nodes changed since (NodeChangedLocked),
  // so a submit at 10,000 nodes does not walk them all (docs/design-notes.md "Placement at
  // scale").
  const std::vector<std::shared_ptr<const sched::NodeCapacity>>& CapacityLocked() const;
  // Nodes each provider account holds (not revoked), for --max-nodes-per-provider without a walk
  // over every node per enrolment: a node's record is counted out before it is replaced and in
  // after (CountNodeLocked with -1, then +1).
  void CountNodeLocked(const NodeState& ns, int delta);
  int OwnedNodesLocked(const std::string& owner) const;
  // Node `id` as CapacityLocked shows it, or null when it takes no part in placement.
  std::shared_ptr<const sched::NodeCapacity> NodeCapacityLocked(const std::string& id,
                                                                const NodeState& ns,
                                                                int64_t wall) const;
  // Something CapacityLocked reads of the node changed in place (its link, its attempts, its
  // record, its verification flags): it is looked at again by the next CapacityLocked.
  void NodeChangedLocked(const std::string& id) const { capacity_dirty_.insert(id); }
  // How much a pass (or a submit's probe) may skip: see exhausted_shapes_.
  sched::ScheduleOptions IncrementalLocked() const;
  // The ids of the active attempts placed on the node (attempts_by_node_).
  const std::set<std::string>& AttemptsOnLocked(const std::string& node_id) const;
  // One offer per GPU label (or one CPU offer) for each online node, as free right now.
  std::vector<market::Offer> AgentOffersLocked() const;
  // starting -> running for the attempt and its job, with the `started` event.
  void MarkRunningLocked(const std::string& attempt_id, const std::string& node_name, Edit& edit);
  void ApplyExitLocked(const std::string& attempt_id, const proto::Exited& exited, Edit& edit);
  // Ends an active attempt (it leaves the active set) and moves its job on: requeued, or
  // finished.
  void FinishAttemptLocked(const std::string& attempt_id, store::AttemptState state,
                           std::optional<int> exit_code, const std::string& cause, Edit& edit);
  store::JobEvent EventLocked(const std::string& job_id, std::string type, std::string message);
  Status CommitLocked(store::WriteBatch& batch);
  void PublishLocked(const store::WriteBatch& batch);
  void SendLocked(const std::string& node_id, const Json& msg);
  Status LoseNodeLocked(const std::string& node_id, const std::string& why);
  // Closes the node's open uptime span at now (it went offline).
  void CloseUptimeLocked(NodeState& node, store::WriteBatch& batch);
  // Recomputes every node's reliability score from the store's 30-day window. The tick reads
  // the window without the lock (ReadReliabilityHistory) and applies it under it.
  struct ReliabilityHistory {
    int64_t now = 0;
    int64_t since = 0;
    std::vector<store::UptimeSpan> uptime;
    std::vector<store::AttemptRecord> attempts;
  };
  ReliabilityHistory ReadReliabilityHistory() const;  // store reads only; mu_ not needed
  // True when a node's score changed (its offers, and so placement, with it).
  bool ApplyReliabilityLocked(const ReliabilityHistory& history);
  // Applies a history read, and asks for another schedule pass when a score changed.
  void ApplyReliability(const ReliabilityHistory& history);
  void RefreshReliabilityLocked();
  // Asks the agent to run its conformance suite (`why`: registration, scheduled, on demand), or
  // queues the request while options_.max_concurrent_verifications suites already run.
  void RequestReportLocked(NodeState& node, const std::string& why);
  // Sends `reverify` for a request RequestReportLocked admitted.
  void SendReportRequestLocked(NodeState& node, const std::string& why);
  // After a verdict: a failure schedules a retry with backoff (up to options_.verify_retries);
  // a pass clears the count. Then admits queued requests.
  void AfterVerdictLocked(NodeState& node);
  // Sends queued requests, oldest first, while fewer than the maximum are running; asks again
  // for nodes whose retry is due. Called from Tick and after every verdict. O(admitted + due +
  // log nodes) through the indexes below, not a scan of every node: a fleet enrolling together
  // calls it once per hello and per verdict.
  void AdmitVerificationsLocked();
  // Files the node in the verification indexes its flags call for (verify_queued,
  // awaiting_report, verify_retry_mono). Called wherever those flags are set or a node entry is
  // replaced; entries that no longer hold are dropped when next met.
  void TrackVerificationLocked(const std::string& node_id, const NodeState& node);
#ifndef NDEBUG
  void CheckVerificationIndexesLocked(int64_t now, int running) const;
#endif
  // Node identity: the existing node a hello may speak for, "" to enrol a new node, or why it is
  // refused (PermissionDenied: an impersonation attempt). Changes nothing.
  Result<std::string> AdmitNodeLocked(const proto::Hello& hello, const AgentIdentity& who) const;
  // Whether `nonce` (a `conformance` message's) answers an outstanding request of `node`;
  // changes nothing. Otherwise audits the refusal and says why.
  Status CheckReportNonceLocked(const NodeState& node, const std::string& nonce);
  // Marks `nonce` (one CheckReportNonceLocked accepted) and every older one used, on the node
  // as an edit stages it.
  static void ConsumeReportNonce(NodeState& node, const std::string& nonce);
  // The agent channel's messages, one handler each (core_agent_channel.cc).
  Status OnHeartbeatLocked(NodeState& node, const proto::Heartbeat& m);
  Status OnConformanceLocked(NodeState& node, const proto::ConformanceMessage& m);
  // started, log, checkpoint, exited: about one attempt of this node, staged into `edit` (the
  // acknowledgements too, sent only once it is committed). True in `exited` for an exit.
  Status StageAttemptMessageLocked(const NodeState& node, const proto::AgentMessage& msg,
                                   Edit& edit, bool& exited);
  // preempt_notice: the node is going, and the agent already stops the attempt.
  Status OnPreemptNoticeLocked(const NodeState& node, const proto::PreemptNotice& m);
  // Whether a log batch would trim lines this edit holds uncommitted (the trim applies to the
  // store before the edit's lines are in it): then the edit is committed first.
  bool LogTrimNeedsCommitLocked(const Edit& edit, const proto::LogBatch& log) const;
  void DisconnectLocked(const std::string& node_id, const AgentLink* link);
  // The inbox (core_inbox.cc): handles the entries in order under one lock, committing the
  // attempt messages among them together, and returns each one's outcome.
  std::vector<Status> HandleEntriesLocked(const std::vector<InboxEntry>& entries);
  // After a post: handles it now unless the inbox thread (or a test) will.
  void HandleInlineUnlessQueued();
  // Posts `entry` and waits for its outcome (the blocking AgentMessage/AgentDisconnected).
  Status PostAndWait(InboxEntry entry);
  Json EndItemLocked(const store::JobRecord& job) const;
  // Keeps an attempt's stored log within options_.max_log_bytes_per_attempt: when the lines in
  // `batch` would pass it, the oldest lines (stored, then in the batch) are dropped with a marker
  // line, down to 3/4 of the quota. Returns the attempt's log bytes once `batch` is committed.
  // `held`: the attempt's log bytes as an edit already stages them (else the live count).
  Result<int64_t> EnforceLogQuotaLocked(const store::AttemptRecord& att, store::WriteBatch& batch,
                                        std::optional<int64_t> staged = std::nullopt);
  // Tells the agent to stop `att` for `cause`; the exit that follows ends it as preempted.
  // For interruptible-then-on-demand jobs: the reason to fall back to on-demand capacity now
  // (after N preemptions or T without interruptible capacity), or "" when not (yet).
  std::string FallbackReasonLocked(const JobState& js) const;
  // The QueueIndex group of a queued job: its owner, team, shape and the wording of its wait
  // (the fallback terms PlaceLocked words it with); empty for a job searched on its own every
  // pass (one with a total budget, whose budget left changes as it is charged).
  std::string QueueGroupLocked(const std::string& id, const JobState& js) const;
  // A job's reason and never-fits flag as jobs_ holds them (QueueIndex::Reasons).
  std::pair<std::string_view, bool> ReasonOfLocked(const std::string& id) const;
  // Aborts unless queue_index_ files exactly the queued jobs, each holding its group's answer
  // or listed as not holding it: for debug builds, after every pass.
  void CheckQueueIndexLocked() const;
  // `tell_agent` false: the agent reported the preemption itself and is already stopping it.
  Status PreemptLocked(const std::string& attempt_id, const std::string& cause,
                       bool tell_agent = true);
  // Accepts `manifest` as the job's latest complete checkpoint if its blob exists.
  void SaveCheckpointLocked(const store::AttemptRecord& att, const std::string& manifest,
                            Edit& edit);
  // Deletes from the blob store the given checkpoint manifests and their chunks, unless a kept
  // checkpoint or a job's workdir still uses them. Called after the store dropped them.
  void CollectBlobsLocked(const std::vector<std::string>& manifests);
  // Why a job cannot be submitted: the scheduler's reason, what the catalogs would offer, and
  // how to queue it anyway.
  std::string UnschedulableMessageLocked(const market::MarketRequest& market,
                                         const sched::Waiting& waiting) const;

  // Constant after construction.
  store::Store* const store_;
  const Clock* const clock_;
  const CoreOptions options_;

  std::mutex mu_;
  // Guarded by mu_.
  std::map<std::string, NodeState> nodes_;
  std::map<std::string, JobState> jobs_;
  // The queued jobs by id (IndexJobLocked keeps it): placement and the tick walk the queue, not
  // every job ever submitted. The pointers are into jobs_, whose entries stay put until erased.
  std::map<std::string, JobState*> queued_;
  // Those of them that may still fall back to on-demand capacity (interruptible-then-on-demand,
  // not fallen back yet; IndexJobLocked keeps it too): the tick asks only these, not the queue.
  std::map<std::string, JobState*> may_fall_back_;
  std::map<std::string, store::AttemptRecord> active_attempts_;  // starting/running only
  // The same attempts' ids by node (kept with active_attempts_ by ApplyLocked and Load): a
  // heartbeat, hello or node loss touches its node's attempts, not every attempt.
  std::map<std::string, std::set<std::string>> attempts_by_node_;
  // Incremental placement (sched::ScheduleOptions): the last full pass's exhausted shapes, the
  // nodes whose attempts changed since, and whether any node's offers or presence changed since
  // (then the next pass searches every node for every shape).
  std::set<std::string> exhausted_shapes_;
  std::set<std::string> changed_nodes_;
  bool nodes_changed_ = true;
  int64_t last_full_search_mono_ = 0;
  // The tick asked the scheduler thread for a full search before the last one grows too old for
  // incremental passes (TickState), so a submit's own pass never falls back to every node.
  bool full_search_due_ = false;
  PassCounts passes_;
  // A pass's queue, kept between passes for their capacity (PlaceLocked): a deep queue's
  // vectors allocated and freed per pass cost more in the kernel than the pass itself.
  std::vector<const JobState*> pass_states_;
  std::vector<const sched::JobRequest*> pass_queue_;
  std::vector<std::shared_ptr<const sched::JobRequest>> pass_copies_;  // not cached in a job
  std::vector<int> pass_tails_;  // per position: its group's entry in the pass's tails, or -1
  // The queued jobs in groups that wait alike (IndexJobLocked keeps it, with queued_).
  QueueIndex queue_index_;
  std::map<std::string, int64_t> max_log_seq_;  // per active attempt
  std::map<std::string, int64_t> log_bytes_;    // stored log bytes per active attempt (lazy)
  std::map<uint64_t, Subscriber> subscribers_;
  std::map<std::string, std::vector<market::Offer>> catalog_offers_;  // by provider
  // The same catalog offers, indexed for queries (DESIGN.md §8: the store is the source of
  // truth, the index the fast path). Agent offers change with every placement and are few, so
  // they are filtered directly.
  market::OfferIndex catalog_index_;
  // Job id → node id → monotonic ms until which the job avoids that node after it was preempted
  // or lost there.
  std::map<std::string, std::map<std::string, int64_t>> avoid_;
  store::BlobStore* blobs_ = nullptr;
  Accounts* accounts_ = nullptr;
  // Money (issue 14): open meters by attempt id, balances by account (micro-dollars), when each
  // node's lease was last renewed (monotonic ms), the last settlement.
  std::map<std::string, store::MeterRecord> open_meters_;
  std::map<std::string, int64_t> balances_;
  std::map<std::string, int64_t> lease_renewed_mono_;
  int64_t last_settle_mono_ = 0;
  int64_t last_budget_check_mono_ = 0;
  // What each job was charged, by kind (JobChargesLocked's cache, filled from the store on first
  // use and kept with committed charges).
  struct JobCharges {
    int64_t compute = 0, transfer = 0, storage = 0;
  };
  mutable std::map<std::string, JobCharges> job_charges_;
  // Attempts whose cost anomaly was already raised (NoteAnomaliesLocked): once per attempt.
  std::set<std::string> anomalies_raised_;
  // Monthly budgets by scope; each scope's spend this month (month, micro-dollars; a cache kept
  // with committed charges); the alerts raised this month (scope|month|percent); the month the
  // tick last saw.
  std::map<std::string, store::BudgetRecord> budgets_;
  mutable std::map<std::string, std::pair<std::string, int64_t>> month_spent_;
  std::set<std::string> alerts_raised_;
  std::string budget_month_;
  // StoredBytesLocked's cache: job -> (what it keeps, as a key; bytes). Derived, not state.
  std::map<std::string, std::pair<std::string, int64_t>> stored_bytes_;
  // Kept checkpoints per job, oldest first (the store's `checkpoints` table).
  std::map<std::string, std::vector<store::CheckpointRecord>> checkpoints_;
  uint64_t next_subscriber_ = 1;
  int64_t next_order_ = 1;
  int64_t reliability_refreshed_mono_ = 0;
  int64_t loaded_mono_ = 0;       // when Load ran
  int64_t last_hello_mono_ = 0;   // the last hello applied
  int64_t last_tick_mono_ = 0;    // for CoreOptions::stall_credit_after_ms
  int64_t verify_queue_seq_ = 0;  // NodeState::verify_queue_order
  // CapacityLocked's view: the nodes in it in id order, each one's place, the nodes changed
  // since it was brought up to date, whether it is to be built afresh, and the earliest pause
  // in it that ends (a pause is read against the clock: past its end, all is built afresh).
  std::unordered_map<std::string, int> owned_nodes_;  // CountNodeLocked
  mutable std::vector<std::shared_ptr<const sched::NodeCapacity>> capacity_;
  mutable std::unordered_map<std::string, size_t> capacity_slot_;
  mutable std::unordered_set<std::string> capacity_dirty_;
  mutable bool capacity_stale_ = true;
  mutable int64_t capacity_pause_ends_ms_ = 0;
  // The view's sched::FleetFacts, kept with it so a pass need not read every node for them: how
  // many of its nodes have an interruptible or preempting attempt, and its paused nodes' places.
  mutable size_t capacity_preemptible_ = 0;
  mutable std::set<size_t> capacity_paused_;
  mutable int64_t capacity_free_gpus_ = 0;
  mutable int64_t capacity_free_cpus_ = 0;
  mutable sched::FleetFacts capacity_facts_;
  // The verification indexes (TrackVerificationLocked): supersets of the nodes queued for a
  // suite (by queue order), admitted and maybe running, and waiting for a retry (by due time).
  // An entry is checked against the node's own flags when met, so a stale one does no harm.
  std::set<std::pair<int64_t, std::string>> verify_queue_;
  std::set<std::string> verify_admitted_;
  std::set<std::pair<int64_t, std::string>> verify_retries_;
  std::map<std::string, int64_t> degraded_;  // DegradedLocked: failures by kind
  bool schedule_again_ = false;              // the last scheduling pass failed
  // The scheduler thread (StartScheduler): a pass is due; the thread is to stop.
  bool schedule_due_ = false;
  bool scheduler_stop_ = false;
  std::condition_variable scheduler_wake_;
  std::thread scheduler_;
  AgentInbox inbox_;
  std::thread inbox_thread_;
  // The background read (CoreOptions::reliability_in_background); touched only by Tick's caller.
  std::future<ReliabilityHistory> reliability_read_;
  SigningIdentity signing_;
};

// The chunk digests a checkpoint manifest refers to; empty when it cannot be read.
std::vector<std::string> ManifestChunks(const store::BlobStore& blobs, const std::string& manifest);

// JSON views shared by the API handlers.
Json JobToJson(const store::JobRecord& job);
Json AttemptToJson(const store::AttemptRecord& att);
Json EventToJson(const store::JobEvent& ev);
Json LogToJson(const store::LogLine& line);
Json NodeToJson(const NodeView& node);

}  // namespace sluice::server
