// ServerCore: the marketplace's live state and the rules that change it. The HTTP handlers and
// the agent channel call into it; it writes every change to the Store before acknowledging
// (DESIGN.md §7), asks the pure scheduler for a plan after every event that can change
// placement (submit, capacity change) and pushes work to agents through AgentLink.
//
// Thread safety: every public method takes mu_; callbacks (AgentLink::Send, stream sinks) are
// invoked with mu_ held and must not block or call back into the core.
#pragma once

#include <atomic>
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
#include <utility>
#include <vector>

#include "audit/signing_key.h"
#include "common/agent_protocol.h"
#include "common/clock.h"
#include "common/status.h"
#include "common/timed_mutex.h"
#include "market/catalog.h"
#include "market/explain.h"
#include "market/offer.h"
#include "market/offer_index.h"
#include "market/query.h"
#include "server/agent_inbox.h"
#include "server/blob_refs.h"
#include "server/core_state.h"  // with the types its entries are made of
#include "server/job_charges.h"
#include "server/job_streams.h"
#include "server/lease_renewals.h"
#include "server/live_job_index.h"
#include "server/monthly_budgets.h"
#include "server/queue_index.h"
#include "server/reliability_history.h"
#include "server/time_ordered_ids.h"
#include "server/verification_queue.h"
#include "store/blob_store.h"

namespace sluice::server {

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
  // Newest submission first (submitted_ms, then id), at most `limit`, within `scope` unless it is
  // null (an admin's). Live jobs in scope come from an index, finished ones from the store,
  // outside the lock (docs/design-notes.md "The job list").
  Result<std::vector<store::JobRecord>> ListJobs(std::optional<store::JobState> state, size_t limit,
                                                 const store::JobScope* scope = nullptr);
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
  // Jobs (not finished) of an account, for quotas: the count IndexJobLocked keeps.
  int ActiveJobsOf(const std::string& account_id);
  // How many jobs are in each state, finished ones included (the sluice_jobs gauge).
  std::map<store::JobState, int64_t> JobCounts();
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

  // Replays the job's stored events and/or logs past `from` (a reader resuming after the ids it
  // got), then delivers new ones live until the job ends, when an {"type":"end"} item is sent
  // and the subscription closes. The replay runs without the core's lock; `sink` is called from
  // the caller's thread until Subscribe returns, then from whichever thread commits.
  Result<uint64_t> Subscribe(const std::string& job_id, bool events, bool logs, StreamSink sink,
                             StreamCursor from = {});
  // Replay rounds without the lock before the rest is read under it (core_streams.cc).
  static constexpr int kStreamReplayRounds = 8;
  void Unsubscribe(uint64_t id);

  // --- agent channel ---
  // Registers or re-registers a node and reconciles what the agent says it runs with what the
  // store says; returns the node id for `welcome`. `who` is what the connection's token proved
  // (issue 10 item 2): a join token enrols a new node, owned by its provider account, and the
  // welcome carries the node's new credential; an enrolled node id needs that node's credential.
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
  // A job's signed audit bundle (a .zip): environment-fingerprint.json, hardware-inventory.json,
  // conformance-log.txt, cost-statement.json, events.jsonl, job.json, manifest.sha256 and
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

  // Everything in memory a state change can alter, as canonical JSON (maps in key order): tests
  // compare dumps to prove a failed commit changed nothing (issue 12 item 1). Reliability scores
  // are left out: they are recomputed from the store, not changed by commits.
  Json StateDump();
  // Failures nobody was waiting for (DegradedLocked), by kind; /v1/metrics exports them as
  // sluice_degraded_total{kind}.
  std::map<std::string, int64_t> DegradedCounts();
  // Placement passes committed (PlaceLocked), by how far they searched: every node for every
  // shape ("full"), or only the nodes changed since the last full one ("incremental"; a
  // submit's own pass included). /v1/metrics exports them as sluice_placement_passes_total.
  using PassCounts = PlacementPassCounts;  // core_types.h
  PassCounts PlacementPasses();
  // How long callers waited for the core's lock, and how long each holder kept it (request,
  // agent_messages, placement, tick, heartbeat); no lock: the histograms are read with atomics.
  // /v1/metrics exports them as sluice_core_lock_wait_seconds and sluice_core_lock_hold_seconds.
  DurationHistogram::Snapshot LockWaits() const { return mu_.Waits(); }
  DurationHistogram::Snapshot LockHolds() const { return mu_.Holds(); }
  std::vector<std::pair<std::string, DurationHistogram::Snapshot>> LockHoldsByHolder() const;
  // The store's own work (WAL checkpoints); no lock: the store counts with atomics.
  store::StoreCounters StoreCounters() { return store_->Counters(); }

 private:
  // The live state's entries and a staged change of them (server/core_state.h).
  using NodeState = core_state::NodeState;
  using JobState = core_state::JobState;
  using Edit = core_state::Edit;
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
  // Files `job_id` in the queue index and the unfinished counts as jobs_ now holds it (or drops
  // it, when gone).
  void IndexJobLocked(const std::string& job_id);
  int ActiveJobsOfLocked(const std::string& account_id) const;
#ifndef NDEBUG
  void CheckListIndexLocked(const store::JobScope* scope) const;  // aborts on a mismatch
#endif
  // Finished jobs (core_finished.cc): finished with no attempt active; out of jobs_ (by the
  // tick: no walk of jobs_ is then under way); a record from jobs_ or the store (nullopt: no
  // such job); every job's workdir and (`checkpoints`) latest checkpoint, finished ones' too.
  bool RetirableLocked(const std::string& id, const JobState& js) const;
  void RetireFinishedLocked();
  Result<std::optional<store::JobRecord>> JobRecordLocked(const std::string& id);
  // A job not finished, in jobs_: else NotFound, or FailedPrecondition "job J already S".
  Result<JobState*> UnfinishedJobLocked(const std::string& id);
  void LatestCheckpointsLocked(std::set<std::string>& manifests) const;  // every job's latest
  // A failure nobody waits for (the tick, a disconnect): logged with `what` failed, and counted
  // under `kind` (a fixed name: schedule, node_loss, uptime, disconnect, audit), never silent.
  void DegradedLocked(const char* kind, const std::string& what, const Status& status);

  // A node by id (which wins) or by name: NotFound, or InvalidArgument when a name is ambiguous.
  Result<NodeState*> NodeByIdOrNameLocked(const std::string& id_or_name);
  // Paused nodes (core_pause.cc; issue 15 item 5): stages the node paused for the cool-down,
  // with why; and, from the tick, lets nodes whose cool-down passed take work again.
  void PauseNodeLocked(Edit& edit, const std::string& node_id, const std::string& why);
  void EndPausesLocked();
  // Metering (core_billing.cc): opens a meter for each attempt the edit starts and closes (and
  // bills) the meter of each it ends, into the edit's own batch. Called by CommitLocked first.
  void MeterLocked(Edit& edit);
  // Settlement (core_billing.cc): every open meter in one commit (SettleMeters), ending any round;
  // the tick's round, settle_slice meters a tick; one slice from `from` (the next id, or none).
  Status SettleMetersLocked();
  Status SettleRoundStepLocked();
  Result<std::optional<std::string>> SettleSliceLocked(const std::string& from, size_t limit);
  // Bills `meter` up to `until_ms` into the edit (a ledger transaction and its cost delta).
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
  // Anomalies (issue 15 item 2): a job whose charges (with this edit's) run 20 % over its current
  // attempt's estimate at placement gets a `cost-anomaly` event naming the cause: restarts, a
  // run longer than expected, storage, transfer. Called by MeterLocked.
  void NoteAnomaliesLocked(Edit& edit);
  // Budgets (core_budget.cc; the arithmetic: server/job_charges.h). The last wall ms `meter` may
  // be billed to without its job's charges passing its budget (a backstop: stops come earlier);
  // INT64_MAX for a job without one.
  int64_t BudgetEndLocked(const Edit& edit, const store::MeterRecord& meter) const;
  // What of `amount` may still be charged to the job under its budget.
  int64_t WithinBudgetLocked(const Edit& edit, const std::string& job_id, int64_t amount) const;
  // Queues again the budget-exhausted jobs `which` accepts that may now run (their budget, their
  // account's credit and monthly budgets allow it).
  void RequeueExhaustedLocked(Edit& edit,
                              const std::function<bool(const store::JobRecord&)>& which);
  // Monthly budgets (core_monthly_budget.cc; the books are monthly_): why an owner's job may not
  // start now ("" when it may); alerts the edit's charges raise (called by MeterLocked); a new
  // month requeues what budgets stopped.
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
  // What placement reads of a job: built afresh (`spent`: what the job was charged so far, for
  // its budget), or kept while the job does not change.
  sched::JobRequest MakeRequestLocked(const std::string& id, const JobState& js,
                                      int64_t spent) const;
  std::shared_ptr<const sched::JobRequest> RequestLocked(const std::string& id,
                                                         const JobState& js) const;
  // Every node that can take work or may come back, as it stands: what placement searches. Kept
  // between calls and updated from the nodes changed since (NodeChangedLocked), so a submit at
  // 10,000 nodes does not walk them all (docs/design-notes.md "Placement at scale").
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
  void NodeChangedLocked(const std::string& id) const { view_.dirty.insert(id); }
  // How much a pass (or a submit's probe) may skip: see search_.exhausted_shapes.
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
  void SendLocked(const std::string& node_id, const Json& msg);
  Status LoseNodeLocked(const std::string& node_id, const std::string& why);
  // Closes the node's open uptime span at now (it went offline).
  void CloseUptimeLocked(NodeState& node, store::WriteBatch& batch);
  // The minute's round of stored uptime spans extended to now: one slice of uptime_slice online
  // nodes from uptime_next_, one commit; the round ends past the last node or on a failure.
  Status UptimeRoundStepLocked();
  // Recomputes every node's reliability score from the store's 30-day window. The tick reads
  // and summarizes the window without the lock (ReadReliabilityHistory) and applies it under it.
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
  // VerificationQueue::Admit with this core's nodes and limit (from Tick and every verdict).
  void AdmitVerificationsLocked();
  // Node identity: the existing node a hello may speak for, "" to enrol a new node, or why it is
  // refused (PermissionDenied: an impersonation attempt). Changes nothing.
  Result<std::string> AdmitNodeLocked(const proto::Hello& hello, const AgentIdentity& who) const;
  // Whether `nonce` (a `conformance` message's) answers an outstanding request of `node`;
  // changes nothing. Otherwise audits the refusal and says why.
  Status CheckReportNonceLocked(const NodeState& node, const std::string& nonce);
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
  // A heartbeat answered on the io thread that read it, without the inbox: only when the core's
  // lock is free at once and nothing of the node's waits or is being handled, so the answer
  // still follows everything the node sent before. False: post it as any other message.
  bool AnswerHeartbeatNow(const std::string& node_id, const AgentLink* link,
                          const proto::Heartbeat& hb,
                          const std::function<void(const Status&)>& done);
  // Posts `entry` and waits for its outcome (the blocking AgentMessage/AgentDisconnected).
  Status PostAndWait(InboxEntry entry);
  // Keeps an attempt's stored log within options_.max_log_bytes_per_attempt: when the lines in
  // `batch` would pass it, the oldest lines (stored, then in the batch) are dropped with a marker
  // line, down to 3/4 of the quota. Returns the attempt's log bytes once `batch` is committed.
  // `held`: the attempt's log bytes as an edit already stages them (else the live count).
  Result<int64_t> EnforceLogQuotaLocked(const store::AttemptRecord& att, store::WriteBatch& batch,
                                        std::optional<int64_t> staged = std::nullopt);
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
  // Deletes the given checkpoint manifests and their chunks from the blob store, unless a job
  // still uses them (blob_refs_). Called after the store dropped them.
  void CollectBlobsLocked(const std::vector<std::string>& manifests);
  // Tells blob_refs_ the job's workdir and kept checkpoints as memory now holds them.
  void NoteJobBlobsLocked(const std::string& job_id);
  // Why a job cannot be submitted: the scheduler's reason, what the catalogs would offer, and
  // how to queue it anyway.
  std::string UnschedulableMessageLocked(const market::MarketRequest& market,
                                         const sched::Waiting& waiting) const;

  // Constant after construction.
  store::Store* const store_;
  const Clock* const clock_;
  const CoreOptions options_;

  // The one lock over the core's state; it keeps how long callers waited and holders held it
  // (LockWaits, LockHolds: /v1/metrics).
  // Its holds are kept per holder, named in the order of core_state::LockHolder.
  using enum core_state::LockHolder;
  TimedMutex mu_{clock_, {"request", "agent_messages", "placement", "tick", "heartbeat"}};
  // Guarded by mu_.
  TimeOrderedIds ids_{clock_};  // jobs' and attempts' ids
  std::map<std::string, NodeState> nodes_;
  // Not finished, or finished with an attempt active; hashed, walked in no order that matters.
  std::unordered_map<std::string, JobState> jobs_;
  core_state::FinishedState finished_;  // the rest (core_state.h)
  // The queued jobs by id (IndexJobLocked keeps it): placement and the tick walk the queue, not
  // every job ever submitted. The pointers are into jobs_, whose entries stay put until erased.
  std::map<std::string, JobState*> queued_;
  // Those of them that may still fall back to on-demand capacity (interruptible-then-on-demand,
  // not fallen back yet; IndexJobLocked keeps it too): the tick asks only these, not the queue.
  std::map<std::string, JobState*> may_fall_back_;
  std::map<std::string, store::AttemptRecord> active_attempts_;  // starting/running only
  // The same attempts' ids by node (kept with active_attempts_ by ApplyLocked and Load): a
  // heartbeat, hello or node loss touches its node's attempts, not every attempt.
  std::unordered_map<std::string, std::set<std::string>> attempts_by_node_;
  core_state::SearchState search_;  // what incremental passes search (core_state.h)
  PassCounts passes_;
  core_state::PassBuffers pass_;  // PlaceLocked's, kept between passes
  // The queued jobs in groups that wait alike (IndexJobLocked keeps it, with queued_).
  QueueIndex queue_index_;
  // jobs_ indexed for the submit quota, the job list and the jobs gauge (IndexJobLocked keeps it
  // too; server/live_job_index.h).
  LiveJobIndex live_index_;
  // Per active attempt: the last log line stored, and the stored log's bytes (lazy).
  std::unordered_map<std::string, int64_t> max_log_seq_, log_bytes_;
  JobFollowers followers_;  // job streams' live readers (server/job_streams.h)
  std::map<std::string, std::vector<market::Offer>> catalog_offers_;  // by provider
  // The same catalog offers, indexed for queries (DESIGN.md §8: the store is the source of
  // truth, the index the fast path). Agent offers change with every placement and are few, so
  // they are filtered directly.
  market::OfferIndex catalog_index_;
  // Job id → node id → monotonic ms until which the job avoids the node it was preempted/lost on.
  std::map<std::string, std::map<std::string, int64_t>> avoid_;
  store::BlobStore* blobs_ = nullptr;
  Accounts* accounts_ = nullptr;
  core_state::MoneyState money_;  // meters and balances (core_state.h)
  ChargesByJob charges_{store_};  // each job's committed charges (server/job_charges.h)
  LeaseRenewals leases_{clock_, options_.lease_ms};  // renewed by heartbeats' replies and hellos
  MonthlyBudgets monthly_;  // monthly budgets' books (server/monthly_budgets.h)
  // Kept checkpoints per job, oldest first (the store's `checkpoints` table).
  std::map<std::string, std::vector<store::CheckpointRecord>> checkpoints_;
  // The blobs jobs use, counted as jobs change (NoteJobBlobsLocked; server/blob_refs.h).
  BlobRefs blob_refs_{[this](const std::string& m) { return ReadManifestChunks(blobs_, m); }};
  int64_t next_order_ = 1;
  int64_t reliability_refreshed_mono_ = 0;
  std::optional<std::string> uptime_next_;  // an uptime round's next node (UptimeRoundStepLocked)
  int64_t loaded_mono_ = 0;                 // when Load ran
  int64_t last_hello_mono_ = 0;             // the last hello applied
  core_state::TickTimes tick_times_;        // TickState's (core_state.h)
  std::unordered_map<std::string, int> owned_nodes_;  // CountNodeLocked
  mutable core_state::CapacityView view_;             // CapacityLocked's
  VerificationQueue verification_;                    // whose conformance suites run now
  std::map<std::string, int64_t> degraded_;           // DegradedLocked: failures by kind
  bool schedule_again_ = false;                       // the last scheduling pass failed
  core_state::SchedulerThread scheduler_;             // StartScheduler's (core_state.h)
  AgentInbox inbox_;
  std::thread inbox_thread_;
  std::atomic<bool> inbox_running_{false};  // inbox_thread_ runs: io threads read this, not it
  // The background read (CoreOptions::reliability_in_background); touched only by Tick's caller.
  std::future<ReliabilityHistory> reliability_read_;
  SigningIdentity signing_;
};

}  // namespace sluice::server
