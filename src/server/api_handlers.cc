// The handlers of the job, blob, metrics, estimate, audit-log and stream routes (members of
// Api; routing and access checks are in api.cc).
#include <map>

#include "common/crypto.h"
#include "common/text.h"
#include "common/timed_mutex.h"
#include "market/explain.h"
#include "market/offer.h"
#include "market/query.h"
#include "market/ranking.h"
#include "server/api.h"
#include "server/api_util.h"
#include "server/audit_trail.h"
#include "spec/job_spec.h"

namespace sluice::server {

HttpResponse Api::GetJob(const std::string& id, bool redacted) {
  auto d = core_->GetJob(id);
  if (!d.ok()) return ErrorResponse(d.status());
  Json attempts = Json::array(), events = Json::array();
  for (const auto& a : d->attempts) attempts.push_back(AttemptToJson(a));
  for (const auto& e : d->events) events.push_back(EventToJson(e));
  Json job = JobToJson(d->job);
  if (redacted) job = RedactJobEnv(std::move(job));
  return JsonResponse(200, Json{{"job", job}, {"attempts", attempts}, {"events", events}});
}

HttpResponse Api::ListJobs(const HttpRequest& req, const Principal& who) {
  std::optional<store::JobState> state;
  auto it = req.query.find("state");
  if (it != req.query.end() && !it->second.empty()) {
    auto s = store::ParseJobState(it->second);
    if (!s.ok()) {
      return ErrorResponse(Status::InvalidArgument(
          "query parameter `state`: unknown state `" + it->second +
          "` (queued, starting, running, succeeded, failed, cancelled, lost, "
          "budget-exhausted)"));
    }
    state = *s;
  }
  auto limit = QueryInt(req, "limit", 100, 1, 10000);
  if (!limit.ok()) return ErrorResponse(limit.status());
  // Admins see every job; users their own and their teams'; providers their own. (Providers
  // look at the jobs on their nodes one by one: GET /v1/jobs/ID.) A job with no owner is from
  // before accounts: the admin's.
  std::optional<store::JobScope> scope;
  if (who.role != Role::kAdmin) {
    scope.emplace();
    if (!who.account_id.empty()) scope->owners.push_back(who.account_id);
    if (who.account_id == accounts_->admin_account_id()) scope->owners.push_back("");
    if (who.role == Role::kUser) scope->teams = accounts_->TeamsOf(who.account_id);
  }
  auto jobs = core_->ListJobs(state, static_cast<size_t>(*limit), scope ? &*scope : nullptr);
  if (!jobs.ok()) return ErrorResponse(jobs.status());
  Json arr = Json::array();
  for (const auto& j : *jobs) arr.push_back(JobToJson(j));
  return JsonResponse(200, Json{{"jobs", arr}});
}

HttpResponse Api::SubmitJob(const HttpRequest& req, const Principal& who) {
  auto body = ParseJson(req.body);
  if (!body.ok()) return ErrorResponse(body.status());
  if (!body->is_object() || !body->contains("spec")) {
    return ErrorResponse(Status::InvalidArgument("spec: required field is missing"));
  }
  for (auto it = body->begin(); it != body->end(); ++it) {
    if (it.key() != "spec" && it.key() != "workdir_blob" && it.key() != "queue" &&
        it.key() != "team") {
      return ErrorResponse(Status::InvalidArgument("unknown field `" + it.key() + "`"));
    }
  }
  auto spec = spec::JobSpecFromJson((*body)["spec"]);
  if (!spec.ok()) {
    return ErrorResponse(Status::InvalidArgument("spec." + spec.status().message()));
  }
  auto blob = GetStringOr(*body, "workdir_blob", "");
  if (!blob.ok()) return ErrorResponse(blob.status());
  if (!blob->empty()) {
    // Only a workdir this account uploaded: another tenant's digest must not be reusable.
    if (!store::BlobStore::IsValidDigest(*blob) || !blobs_->Has(*blob) ||
        !MayReadBlob(who, *blob)) {
      return ErrorResponse(Status::InvalidArgument("workdir_blob: no uploaded blob " + *blob +
                                                   " (PUT /v1/blobs/<sha256> first)"));
    }
  }
  const Json& queue = body->contains("queue") ? (*body)["queue"] : Json(false);
  if (!queue.is_boolean()) {
    return ErrorResponse(Status::InvalidArgument("queue: expected true or false"));
  }
  auto team = GetStringOr(*body, "team", "");
  if (!team.ok()) return ErrorResponse(team.status());
  if (!team->empty() && !accounts_->IsTeamMember(*team, who.account_id)) {
    return ErrorResponse(
        Status::PermissionDenied("team: this account is not a member of team `" + *team + "`"));
  }
  SubmitOptions opts;
  opts.owner = who.account_id;
  opts.team = *team;
  opts.queue_unschedulable = queue.get<bool>();
  opts.exempt_from_quota = who.role == Role::kAdmin;
  opts.idempotency_key = req.Header("idempotency-key");
  if (opts.idempotency_key.size() > 200) {
    return ErrorResponse(Status::InvalidArgument("Idempotency-Key: at most 200 characters"));
  }
  opts.body_sha256 = Sha256Hex(req.body);
  bool replayed = false;
  auto job = core_->SubmitJob(*spec, *blob, opts, &replayed);
  if (!job.ok()) {
    if (job.status().code() == StatusCode::kAlreadyExists) {
      HttpResponse r = ErrorResponse(job.status());
      r.status = 422;  // same key, different body (issue 10 item 3)
      return r;
    }
    return ErrorResponse(job.status());
  }
  HttpResponse r = JsonResponse(replayed ? 200 : 201, Json{{"job", JobToJson(*job)}});
  if (replayed) r.headers.emplace_back("Idempotent-Replayed", "true");
  return r;
}

HttpResponse Api::PutBlob(const HttpRequest& req, const Principal& who, const std::string& digest) {
  // Users upload workdirs; nodes upload checkpoints. Each upload counts against who sent it: an
  // account, or a node ("node:<id>"), so one node cannot fill the disk for its whole provider.
  std::string owner = who.role == Role::kNode ? "node:" + who.node_id : who.account_id;
  if (options_.max_blob_bytes_per_account > 0 && who.role != Role::kAdmin) {
    uint64_t held = accounts_->BlobBytesOf(owner);
    if (held + req.body.size() > options_.max_blob_bytes_per_account) {
      HttpResponse r = ErrorResponse(Status::ResourceExhausted(
          "quota: this account stores " + std::to_string(held) + " bytes of uploads; " +
          std::to_string(req.body.size()) + " more would pass its limit of " +
          std::to_string(options_.max_blob_bytes_per_account) + " bytes"));
      r.status = 413;
      return r;
    }
  }
  Status s = blobs_->PutVerified(digest, req.body);
  if (!s.ok()) return ErrorResponse(s);
  s = accounts_->RecordBlobOwner(
      {digest, owner, static_cast<int64_t>(req.body.size()), clock_->NowMillis()});
  if (!s.ok()) return ErrorResponse(s);
  return JsonResponse(201, Json{{"digest", digest}, {"size", req.body.size()}});
}

HttpResponse Api::Metrics() {
  // Prometheus text exposition format.
  std::string out;
  auto metric = [&](const char* type, const char* name, const char* help, uint64_t v) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
           name + " " + std::to_string(v) + "\n";
  };
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    metric("counter", name, help, v);
  };
  counter("sluice_refused_requests_total",
          "Requests refused for a missing or invalid token or a missing permission.", refused());
  counter("sluice_rate_limited_requests_total",
          "Refused requests answered 429 because their address was over its limit.",
          rate_limited());
  out +=
      "# HELP sluice_degraded_total Failures no request waited for (a tick, a disconnect), "
      "by kind; each also logged (read_lag: ticks that held a node's loss back while the io "
      "threads read late, logged every 5 s at most).\n# TYPE sluice_degraded_total counter\n";
  for (const auto& [kind, n] : core_->DegradedCounts()) {
    out += "sluice_degraded_total{kind=\"" + kind + "\"} " + std::to_string(n) + "\n";
  }
  const ServerCore::PassCounts passes = core_->PlacementPasses();
  out +=
      "# HELP sluice_placement_passes_total Placement passes, by search: every node for every "
      "waiting shape (full), or only the nodes changed since the last full one (incremental).\n"
      "# TYPE sluice_placement_passes_total counter\n"
      "sluice_placement_passes_total{search=\"full\"} " +
      std::to_string(passes.full) + "\nsluice_placement_passes_total{search=\"incremental\"} " +
      std::to_string(passes.incremental) + "\n";
  out +=
      "# HELP sluice_placement_rechecked_nodes_total Nodes incremental passes searched again for "
      "shapes nothing fitted before (changed since the pass before).\n"
      "# TYPE sluice_placement_rechecked_nodes_total counter\n"
      "sluice_placement_rechecked_nodes_total " +
      std::to_string(passes.rechecked_nodes) + "\n";
  out += PrometheusHistogram(
      "sluice_core_lock_wait_seconds",
      "Time a request, agent message batch, placement pass or tick waited for the core's lock.",
      {{"", core_->LockWaits()}});
  auto holds = core_->LockHoldsByHolder();
  for (auto& [holder, snapshot] : holds) holder = "holder=\"" + holder + "\"";
  out += PrometheusHistogram(
      "sluice_core_lock_hold_seconds",
      "Time one holder kept the core's lock (everything else waits meanwhile), by holder: "
      "request, agent_messages, placement, tick, heartbeat.",
      holds);
  const store::StoreCounters sc = core_->StoreCounters();
  out +=
      "# HELP sluice_store_wal_checkpoints_total SQLite WAL checkpoints, by where they ran: "
      "background (their own thread) or inline (in a commit, the WAL past its bound).\n"
      "# TYPE sluice_store_wal_checkpoints_total counter\n"
      "sluice_store_wal_checkpoints_total{where=\"background\"} " +
      std::to_string(sc.background_checkpoints) +
      "\nsluice_store_wal_checkpoints_total{where=\"inline\"} " +
      std::to_string(sc.inline_checkpoints) + "\n";
  counter("sluice_store_wal_checkpoint_failures_total",
          "WAL checkpoints that copied nothing for an error (the first is logged).",
          static_cast<uint64_t>(sc.checkpoint_failures));
  counter("sluice_store_commits_total", "Batches of state changes committed to the store.",
          static_cast<uint64_t>(sc.commits));
  counter("sluice_store_failed_commits_total",
          "Batches the store refused or rolled back (memory left unchanged).",
          static_cast<uint64_t>(sc.failed_commits));
  counter("sluice_store_pages_written_total",
          "Database pages the store's commits wrote (to the WAL); per commit, their I/O.",
          static_cast<uint64_t>(sc.pages_written));
  counter("sluice_store_pages_read_total",
          "Database pages the store's writing connection read back, not finding them in its "
          "page cache (--db-cache-mib).",
          static_cast<uint64_t>(sc.pages_read));
  metric("gauge", "sluice_store_page_cache_bytes",
         "The writing connection's page cache limit in effect, read back from SQLite "
         "(--db-cache-mib).",
         static_cast<uint64_t>(sc.page_cache_bytes));
  metric("gauge", "sluice_store_wal_checkpoint_pages",
         "WAL pages that wake the background checkpoint, in effect (--wal-checkpoint-pages); 0: "
         "no background checkpoint.",
         static_cast<uint64_t>(sc.wal_checkpoint_pages));
  std::map<std::string, int64_t> jobs;
  for (const auto& [state, n] : core_->JobCounts()) jobs[std::string(store::Name(state))] = n;
  out += "# HELP sluice_jobs Jobs by state.\n# TYPE sluice_jobs gauge\n";
  for (const auto& [state, n] : jobs) {
    out += "sluice_jobs{state=\"" + state + "\"} " + std::to_string(n) + "\n";
  }
  std::map<std::string, int> nodes;
  for (const auto& n : core_->ListNodes()) ++nodes[std::string(store::Name(n.node.state))];
  out += "# HELP sluice_nodes Nodes by state.\n# TYPE sluice_nodes gauge\n";
  for (const auto& [state, n] : nodes) {
    out += "sluice_nodes{state=\"" + state + "\"} " + std::to_string(n) + "\n";
  }
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4";
  r.body = std::move(out);
  return r;
}

HttpResponse Api::Estimate(const HttpRequest& req) {
  auto body = ParseJson(req.body);
  if (!body.ok()) return ErrorResponse(body.status());
  if (!body->is_object() || !body->contains("spec")) {
    return ErrorResponse(Status::InvalidArgument("spec: required field is missing"));
  }
  for (auto it = body->begin(); it != body->end(); ++it) {
    if (it.key() != "spec" && it.key() != "hours" && it.key() != "objective" &&
        it.key() != "limit") {
      return ErrorResponse(Status::InvalidArgument("unknown field `" + it.key() + "`"));
    }
  }
  auto spec = spec::JobSpecFromJson((*body)["spec"]);
  if (!spec.ok()) {
    return ErrorResponse(Status::InvalidArgument("spec." + spec.status().message()));
  }
  std::optional<double> hours;
  if (body->contains("hours")) {
    const Json& h = (*body)["hours"];
    if (!h.is_number() || !(h.get<double>() > 0) || h.get<double>() > 100000) {
      return ErrorResponse(
          Status::InvalidArgument("hours: expected a number of hours in (0, 100000]"));
    }
    hours = h.get<double>();
  }
  std::optional<market::Objective> objective;
  if (body->contains("objective")) {
    const Json& o = (*body)["objective"];
    auto parsed = o.is_string() ? market::ObjectiveFromName(o.get<std::string>()) : std::nullopt;
    if (!parsed) {
      return ErrorResponse(Status::InvalidArgument("objective: expected cost, time or price"));
    }
    objective = *parsed;
  }
  size_t limit = 10;
  if (body->contains("limit")) {
    const Json& l = (*body)["limit"];
    if (!l.is_number_integer() || l.get<int64_t>() < 1 || l.get<int64_t>() > 1000) {
      return ErrorResponse(Status::InvalidArgument("limit: expected an integer in [1, 1000]"));
    }
    limit = l.get<size_t>();
  }
  auto page = core_->Estimate(*spec, hours, objective, limit);
  if (!page.ok()) return ErrorResponse(page.status());
  const market::MarketRequest& r = page->request;
  Json ranked = Json::array();
  for (const auto& x : page->ranked) {
    ranked.push_back({{"offer", market::ToJson(x.offer)},
                      {"estimate", market::ToJson(x.estimate)},
                      {"why", market::Why(x.estimate, r.work)},
                      {"launchable", x.offer.source == market::OfferSource::kAgent}});
  }
  Json body_out{{"query", market::ToString(r.query)},
                {"objective", std::string(market::Name(r.objective))},
                {"hours", r.work.hours},
                {"hours_assumed", r.hours_assumed},
                {"matched", page->matched},
                {"over_budget", page->over_budget},
                {"offers", ranked}};
  if (page->explanation) body_out["explain"] = market::ToJson(*page->explanation);
  return JsonResponse(200, body_out);
}

HttpResponse Api::AuditLog(const HttpRequest& req) {
  auto since = QueryInt(req, "since", 0, 0, INT64_MAX);
  if (!since.ok()) return ErrorResponse(since.status());
  auto after = QueryInt(req, "after", 0, 0, INT64_MAX);
  if (!after.ok()) return ErrorResponse(after.status());
  auto limit = QueryInt(req, "limit", 1000, 1, 10000);
  if (!limit.ok()) return ErrorResponse(limit.status());
  std::string format = QueryParam(req, "format");
  if (!format.empty() && format != "json" && format != "csv") {
    return ErrorResponse(Status::InvalidArgument(
        "query parameter `format`: expected json or csv, got `" + format + "`"));
  }
  auto entries = core_->ReadAudit(*since, *after, static_cast<int>(*limit));
  if (!entries.ok()) return ErrorResponse(entries.status());
  int64_t next = *after;
  for (const auto& e : *entries) next = e.id;
  if (format == "csv") {
    HttpResponse r;
    r.content_type = "text/csv";
    r.body = AuditCsvHeader() + "\n";
    for (const auto& e : *entries) r.body += AuditCsvLine(e) + "\n";
    r.headers.emplace_back("X-Sluice-Next", std::to_string(next));
    return r;
  }
  Json arr = Json::array();
  for (const auto& e : *entries) arr.push_back(ToJson(e));
  return JsonResponse(200, Json{{"entries", arr}, {"next", next}});
}

namespace {
constexpr const char* kBehind =
    "the server ended this stream: the reader fell too far behind it (more unread data than "
    "the server holds for one reader); a new request resumes it, and `sluice logs JOB` reads "
    "the stored log";
}  // namespace

HttpResponse Api::Stream(const HttpRequest& req, const std::string& id,
                         const std::shared_ptr<ResponseWriter>& w, bool* streaming) {
  // Fail fast with a normal error response for an unknown job or a bad cursor.
  if (!core_->GetJob(id).ok()) return ErrorResponse(Status::NotFound("no job " + id));
  // A reader resuming (the CLI after a lost connection) gets only what came after the last
  // event and log line it got, by their ids (docs/api.md "Stream items").
  auto after_event = QueryInt(req, "after_event", 0, 0, INT64_MAX);
  if (!after_event.ok()) return ErrorResponse(after_event.status());
  auto after_log = QueryInt(req, "after_log", 0, 0, INT64_MAX);
  if (!after_log.ok()) return ErrorResponse(after_log.status());
  if (!w->StartStream(200, "application/x-ndjson")) return HttpResponse{};
  *streaming = true;
  auto closed = std::make_shared<std::atomic<bool>>(false);
  // OnClose may run on an io thread while the core holds its lock; it only flips a flag and the
  // core drops the subscription at its next delivery.
  w->OnClose([closed] { closed->store(true); });
  // The sink owns the writer: the HTTP layer ends a response whose last owner lets go.
  std::shared_ptr<ResponseWriter> writer = w;
  auto sink = [writer, closed](const Json& item) -> bool {
    if (closed->load() || writer->closed()) return false;
    if (item.is_null()) return true;  // liveness probe from the core
    if (!writer->WriteChunk(DumpJson(item) + "\n")) {
      // A reader that fell too far behind (HttpServerOptions::max_queued_bytes) is told why the
      // stream ends; the CLI reconnects and goes on after what it has shown.
      if (writer->behind())
        writer->EndStream(DumpJson(Json{{"type", "error"}, {"message", kBehind}}) + "\n");
      return false;
    }
    if (item.value("type", "") == "end") {
      writer->EndStream();
      return false;
    }
    return true;
  };
  auto sub = core_->Subscribe(id, QueryFlag(req, "events", true), QueryFlag(req, "logs", true),
                              std::move(sink), StreamCursor{*after_event, *after_log});
  if (!sub.ok()) {
    w->WriteChunk(DumpJson(Json{{"type", "error"}, {"message", sub.status().message()}}) + "\n");
    w->EndStream();
  }
  return HttpResponse{};
}

}  // namespace sluice::server
