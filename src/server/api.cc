#include "server/api.h"

#include <atomic>

#include "common/text.h"
#include "market/explain.h"
#include "market/offer.h"
#include "market/query.h"
#include "market/ranking.h"
#include "server/audit_trail.h"
#include "spec/job_spec.h"

namespace sluice::server {
namespace {

Result<int64_t> QueryInt(const HttpRequest& req, const char* key, int64_t fallback, int64_t lo,
                         int64_t hi) {
  auto it = req.query.find(key);
  if (it == req.query.end() || it->second.empty()) return fallback;
  try {
    size_t used = 0;
    long long v = std::stoll(it->second, &used);
    if (used != it->second.size() || v < lo || v > hi) throw std::out_of_range("range");
    return static_cast<int64_t>(v);
  } catch (...) {
    return Status::InvalidArgument(std::string("query parameter `") + key + "`: expected an " +
                                   "integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                   "], got `" + it->second + "`");
  }
}

std::string QueryParam(const HttpRequest& req, const char* key) {
  auto it = req.query.find(key);
  return it == req.query.end() ? std::string() : it->second;
}

bool QueryFlag(const HttpRequest& req, const char* key, bool fallback) {
  auto it = req.query.find(key);
  if (it == req.query.end()) return fallback;
  return it->second != "0" && it->second != "false";
}

// The agent's end of the WebSocket as the core sees it.
class WsLink final : public AgentLink {
 public:
  explicit WsLink(std::shared_ptr<WsConnection> conn) : conn_(std::move(conn)) {}
  void Send(const Json& message) override { conn_->Send(DumpJson(message)); }
  void Close() override { conn_->Close(); }

 private:
  std::shared_ptr<WsConnection> conn_;
};

// One agent connection: the first message must be `hello`; later ones go to the core.
struct AgentSession {
  std::shared_ptr<WsLink> link;
  std::string node_id;  // set by hello; touched only from this connection's handler
  int errors = 0;
};

}  // namespace

HttpResponse ErrorResponse(const Status& status) {
  return JsonResponse(
      HttpStatusFor(status.code()),
      Json{{"error", {{"code", StatusCodeName(status.code())}, {"message", status.message()}}}});
}

HttpResponse JsonResponse(int http_status, const Json& body) {
  HttpResponse r;
  r.status = http_status;
  r.body = DumpJson(body) + "\n";
  return r;
}

Api::Api(ServerCore* core, store::BlobStore* blobs, const TokenAuth* auth)
    : core_(core), blobs_(blobs), auth_(auth) {}

size_t Api::BodyLimit(const HttpRequest& head) const {
  if (head.method == "PUT" && head.path.rfind("/v1/blobs/", 0) == 0) return kMaxBlobBody;
  if (head.method == "POST" && head.path == "/v1/catalogs") return kMaxCatalogBody;
  if (head.method == "POST" && head.path == "/v1/conformance/payload") return 64u << 20;
  return kMaxJsonBody;
}

void Api::Handle(HttpRequest req, std::shared_ptr<ResponseWriter> w) {
  bool streaming = false;
  HttpResponse resp = Route(req, w, &streaming);
  if (IsAuditedMutation(req)) {
    std::string actor;
    auth_->Authenticate(req.Header("authorization"), &actor);
    // Best effort by design: the mutation itself is already durable, and a failed audit write
    // must not turn its success into an error the client would retry.
    (void)core_->RecordAudit(AuditEntryFor(req, resp.status, resp.body, actor));
  }
  if (!streaming) w->Send(std::move(resp));
}

HttpResponse Api::Route(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& w,
                        bool* streaming) {
  if (req.path == "/v1/audit/certificate") {
    // Public on purpose: anyone holding a bundle must be able to check who signed it.
    if (req.method != "GET") return ErrorResponse(Status::InvalidArgument("use GET"));
    if (core_->SigningCertificate().empty()) {
      return ErrorResponse(Status::FailedPrecondition("this server has no audit signing key"));
    }
    HttpResponse r;
    r.content_type = "application/x-pem-file";
    r.body = core_->SigningCertificate();
    return r;
  }
  Role role = auth_->Authenticate(req.Header("authorization"));
  if (role == Role::kNone) {
    HttpResponse r = ErrorResponse(Status::Unauthenticated(
        "missing or invalid bearer token (set SLUICE_TOKEN or pass --token)"));
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return r;
  }
  std::vector<std::string> parts = Split(req.path, '/');
  // "/v1/jobs/ID/cancel" -> ["", "v1", "jobs", "ID", "cancel"]
  if (parts.size() < 3 || parts[0] != "" || parts[1] != "v1") {
    return ErrorResponse(Status::NotFound("no such endpoint: " + req.path));
  }
  if (!parts.empty() && parts.back().empty()) parts.pop_back();  // trailing slash
  const std::string& coll = parts[2];
  const std::string& m = req.method;
  auto method_not_allowed = [&]() {
    return JsonResponse(405, Json{{"error",
                                   {{"code", "METHOD_NOT_ALLOWED"},
                                    {"message", m + " is not allowed on " + req.path}}}});
  };

  if (coll == "blobs" && parts.size() == 4 && parts[3] == "missing") {
    // Which of these blobs the server lacks, so a checkpoint upload sends only what changed.
    if (m != "POST") return method_not_allowed();
    auto body = ParseJson(req.body);
    if (!body.ok()) return ErrorResponse(body.status());
    if (!body->is_object() || !body->contains("digests") || !(*body)["digests"].is_array() ||
        (*body)["digests"].size() > 10000) {
      return ErrorResponse(
          Status::InvalidArgument("digests: expected an array of at most 10000 digests"));
    }
    Json missing = Json::array();
    for (const auto& d : (*body)["digests"]) {
      if (!d.is_string() || !store::BlobStore::IsValidDigest(d.get<std::string>())) {
        return ErrorResponse(
            Status::InvalidArgument("digests: each must be 64 lowercase hex characters"));
      }
      if (!blobs_->Has(d.get<std::string>())) missing.push_back(d);
    }
    return JsonResponse(200, Json{{"missing", missing}});
  }
  if (coll == "blobs" && parts.size() == 4) {
    const std::string& digest = parts[3];
    if (!store::BlobStore::IsValidDigest(digest)) {
      return ErrorResponse(
          Status::InvalidArgument("blob digest must be 64 lowercase hex characters"));
    }
    if (m == "GET") {
      auto data = blobs_->Get(digest);
      if (!data.ok()) return ErrorResponse(data.status());
      HttpResponse r;
      r.content_type = "application/octet-stream";
      r.body = std::move(*data);
      return r;
    }
    // Users upload workdirs; agents upload checkpoints.
    if (m == "PUT") {
      Status s = blobs_->PutVerified(digest, req.body);
      if (!s.ok()) return ErrorResponse(s);
      return JsonResponse(201, Json{{"digest", digest}, {"size", req.body.size()}});
    }
    return method_not_allowed();
  }
  if (coll == "conformance" && parts.size() == 4 && parts[3] == "payload") {
    // The agent's link check: round trips with bytes=0, then a timed download and upload.
    if (m == "POST") return JsonResponse(200, Json{{"received", req.body.size()}});
    if (m != "GET") return method_not_allowed();
    auto bytes = QueryInt(req, "bytes", 0, 0, 64 << 20);
    if (!bytes.ok()) return ErrorResponse(bytes.status());
    HttpResponse r;
    r.content_type = "application/octet-stream";
    r.body.assign(static_cast<size_t>(*bytes), 'x');
    return r;
  }
  if (role != Role::kAdmin) {
    return ErrorResponse(Status::PermissionDenied("this endpoint needs the admin token"));
  }
  if (coll == "health" && parts.size() == 3) {
    if (m != "GET") return method_not_allowed();
    return JsonResponse(200, Json{{"status", "ok"}});
  }
  if (coll == "agent") {
    return ErrorResponse(Status::InvalidArgument(
        "the agent channel needs a WebSocket upgrade (sluice agent opens it)"));
  }
  if (coll == "offers" && parts.size() == 3) {
    if (m != "GET") return method_not_allowed();
    auto query = market::ParseQuery(QueryParam(req, "q"));
    if (!query.ok()) return ErrorResponse(query.status());
    std::string sort_text = QueryParam(req, "sort");
    auto sort = market::ParseSortKeys(sort_text.empty() ? "price" : sort_text);
    if (!sort.ok()) return ErrorResponse(sort.status());
    auto limit = QueryInt(req, "limit", 50, 1, 100000);
    if (!limit.ok()) return ErrorResponse(limit.status());
    OfferPage page = core_->SearchOffers(*query, *sort, static_cast<size_t>(*limit));
    Json arr = Json::array();
    for (const auto& o : page.offers) arr.push_back(market::ToJson(o));
    Json body{{"offers", arr}, {"matched", page.matched}};
    if (page.explanation) body["explain"] = market::ToJson(*page.explanation);
    return JsonResponse(200, body);
  }
  if (coll == "estimate" && parts.size() == 3) {
    if (m != "POST") return method_not_allowed();
    return Estimate(req);
  }
  if (coll == "catalogs" && parts.size() == 3) {
    if (m != "POST") return method_not_allowed();
    std::string name = QueryParam(req, "name");
    if (name.empty()) name = "catalog.csv";
    auto imported = core_->ImportCatalog(name, req.body);
    if (!imported.ok()) return ErrorResponse(imported.status());
    return JsonResponse(200, Json{{"provider", imported->provider},
                                  {"offers", imported->offers.size()},
                                  {"unmapped_gpu_names", imported->unmapped_gpu_names},
                                  {"warnings", imported->warnings}});
  }
  if (coll == "nodes" && parts.size() == 5 && parts[4] == "reclaim") {
    if (m != "POST") return method_not_allowed();
    auto body = ParseJson(req.body.empty() ? "{}" : req.body);
    if (!body.ok()) return ErrorResponse(body.status());
    if (!body->is_object()) return ErrorResponse(Status::InvalidArgument("expected an object"));
    std::vector<int> gpus;
    if (body->contains("gpus")) {
      const Json& g = (*body)["gpus"];
      if (!g.is_array() || g.size() > 1024) {
        return ErrorResponse(Status::InvalidArgument("gpus: expected an array of GPU indices"));
      }
      for (const auto& i : g) {
        if (!i.is_number_integer() || i.get<int64_t>() < 0 || i.get<int64_t>() > 1023) {
          return ErrorResponse(Status::InvalidArgument("gpus: expected GPU indices 0..1023"));
        }
        gpus.push_back(i.get<int>());
      }
    }
    auto cause = GetStringOr(*body, "cause", "reclaimed by the provider");
    if (!cause.ok()) return ErrorResponse(cause.status());
    if (cause->size() > 200) return ErrorResponse(Status::InvalidArgument("cause: too long"));
    auto preempted = core_->ReclaimNode(parts[3], gpus, *cause);
    if (!preempted.ok()) return ErrorResponse(preempted.status());
    return JsonResponse(200, Json{{"preempted", *preempted}});
  }
  if (coll == "nodes" && parts.size() == 5 && parts[4] == "verify") {
    if (m != "POST") return method_not_allowed();
    auto node = core_->VerifyNode(parts[3]);
    if (!node.ok()) return ErrorResponse(node.status());
    return JsonResponse(202, Json{{"node_id", node->id},
                                  {"name", node->name},
                                  {"verification", node->verification},
                                  {"requested", true}});
  }
  if (coll == "audit-log" && parts.size() == 3) {
    if (m != "GET") return method_not_allowed();
    return AuditLog(req);
  }
  if (coll == "nodes" && parts.size() == 3) {
    if (m != "GET") return method_not_allowed();
    Json arr = Json::array();
    for (const auto& n : core_->ListNodes()) arr.push_back(NodeToJson(n));
    return JsonResponse(200, Json{{"nodes", arr}});
  }
  if (coll != "jobs") return ErrorResponse(Status::NotFound("no such endpoint: " + req.path));

  if (parts.size() == 3) {
    if (m == "POST") return SubmitJob(req);
    if (m != "GET") return method_not_allowed();
    std::optional<store::JobState> state;
    auto it = req.query.find("state");
    if (it != req.query.end() && !it->second.empty()) {
      auto s = store::ParseJobState(it->second);
      if (!s.ok()) {
        return ErrorResponse(Status::InvalidArgument(
            "query parameter `state`: unknown state `" + it->second +
            "` (queued, starting, running, succeeded, failed, cancelled, lost)"));
      }
      state = *s;
    }
    auto limit = QueryInt(req, "limit", 100, 1, 10000);
    if (!limit.ok()) return ErrorResponse(limit.status());
    Json arr = Json::array();
    for (const auto& j : core_->ListJobs(state, static_cast<size_t>(*limit))) {
      arr.push_back(JobToJson(j));
    }
    return JsonResponse(200, Json{{"jobs", arr}});
  }
  const std::string& id = parts[3];
  if (parts.size() == 4 && m == "DELETE") {
    Status s = core_->DeleteJob(id);
    if (!s.ok()) return ErrorResponse(s);
    return JsonResponse(200, Json{{"deleted", id}});
  }
  if (parts.size() == 4) {
    if (m != "GET") return method_not_allowed();
    auto d = core_->GetJob(id);
    if (!d.ok()) return ErrorResponse(d.status());
    Json attempts = Json::array(), events = Json::array();
    for (const auto& a : d->attempts) attempts.push_back(AttemptToJson(a));
    for (const auto& e : d->events) events.push_back(EventToJson(e));
    return JsonResponse(
        200, Json{{"job", JobToJson(d->job)}, {"attempts", attempts}, {"events", events}});
  }
  if (parts.size() != 5) return ErrorResponse(Status::NotFound("no such endpoint: " + req.path));
  const std::string& action = parts[4];
  if (action == "cancel") {
    if (m != "POST") return method_not_allowed();
    auto j = core_->CancelJob(id);
    if (!j.ok()) return ErrorResponse(j.status());
    return JsonResponse(200, Json{{"job", JobToJson(*j)}});
  }
  if (action == "logs") {
    if (m != "GET") return method_not_allowed();
    auto after = QueryInt(req, "after", 0, 0, INT64_MAX);
    if (!after.ok()) return ErrorResponse(after.status());
    auto limit = QueryInt(req, "limit", 1000, 1, 10000);
    if (!limit.ok()) return ErrorResponse(limit.status());
    auto lines = core_->ReadLogs(id, *after, static_cast<int>(*limit));
    if (!lines.ok()) return ErrorResponse(lines.status());
    Json arr = Json::array();
    int64_t next = *after;
    for (const auto& l : *lines) {
      arr.push_back(LogToJson(l));
      next = l.id;
    }
    return JsonResponse(200, Json{{"lines", arr}, {"next", next}});
  }
  if (action == "stream") {
    if (m != "GET") return method_not_allowed();
    return Stream(req, id, w, streaming);
  }
  if (action == "audit") {
    if (m != "GET") return method_not_allowed();
    auto zip = core_->AuditBundle(id);
    if (!zip.ok()) return ErrorResponse(zip.status());
    HttpResponse r;
    r.content_type = "application/zip";
    r.body = std::move(*zip);
    return r;
  }
  return ErrorResponse(Status::NotFound("no such endpoint: " + req.path));
}

HttpResponse Api::SubmitJob(const HttpRequest& req) {
  auto body = ParseJson(req.body);
  if (!body.ok()) return ErrorResponse(body.status());
  if (!body->is_object() || !body->contains("spec")) {
    return ErrorResponse(Status::InvalidArgument("spec: required field is missing"));
  }
  for (auto it = body->begin(); it != body->end(); ++it) {
    if (it.key() != "spec" && it.key() != "workdir_blob" && it.key() != "queue") {
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
    if (!store::BlobStore::IsValidDigest(*blob) || !blobs_->Has(*blob)) {
      return ErrorResponse(Status::InvalidArgument("workdir_blob: no uploaded blob " + *blob +
                                                   " (PUT /v1/blobs/<sha256> first)"));
    }
  }
  const Json& queue = body->contains("queue") ? (*body)["queue"] : Json(false);
  if (!queue.is_boolean()) {
    return ErrorResponse(Status::InvalidArgument("queue: expected true or false"));
  }
  auto job = core_->SubmitJob(*spec, *blob, queue.get<bool>());
  if (!job.ok()) return ErrorResponse(job.status());
  return JsonResponse(201, Json{{"job", JobToJson(*job)}});
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
  const MarketRequest& r = page->request;
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

HttpResponse Api::Stream(const HttpRequest& req, const std::string& id,
                         const std::shared_ptr<ResponseWriter>& w, bool* streaming) {
  // Fail fast with a normal error response for an unknown job.
  if (!core_->GetJob(id).ok()) return ErrorResponse(Status::NotFound("no job " + id));
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
    if (!writer->WriteChunk(DumpJson(item) + "\n")) return false;
    if (item.value("type", "") == "end") {
      writer->EndStream();
      return false;
    }
    return true;
  };
  auto sub = core_->Subscribe(id, QueryFlag(req, "events", true), QueryFlag(req, "logs", true),
                              std::move(sink));
  if (!sub.ok()) {
    w->WriteChunk(DumpJson(Json{{"type", "error"}, {"message", sub.status().message()}}) + "\n");
    w->EndStream();
  }
  return HttpResponse{};
}

Result<WsHandler> Api::Upgrade(const HttpRequest& req, const std::shared_ptr<WsConnection>& conn) {
  if (req.path != "/v1/agent/connect") {
    return Status::NotFound("no WebSocket endpoint at " + req.path);
  }
  if (auth_->Authenticate(req.Header("authorization")) != Role::kAgent) {
    return Status::Unauthenticated("the agent channel needs the provider join token");
  }
  auto session = std::make_shared<AgentSession>();
  session->link = std::make_shared<WsLink>(conn);
  WsHandler h;
  ServerCore* core = core_;
  h.on_message = [core, session](const std::shared_ptr<WsConnection>& c, std::string_view text) {
    auto fail = [&](const Status& s, bool fatal) {
      c->Send(DumpJson(Json{{"type", "error"},
                            {"code", std::string(StatusCodeName(s.code()))},
                            {"message", s.message()}}));
      if (fatal || ++session->errors > 100) c->Close();
    };
    auto msg = ParseJson(text);
    if (!msg.ok() || !msg->is_object()) {
      fail(msg.ok() ? Status::InvalidArgument("expected a JSON object") : msg.status(), true);
      return;
    }
    auto type = GetString(*msg, "type");
    if (!type.ok()) return fail(type.status(), true);
    if (session->node_id.empty()) {
      if (*type != "hello") return fail(Status::FailedPrecondition("say hello first"), true);
      auto hello = proto::HelloFromJson(*msg);
      if (!hello.ok()) return fail(hello.status(), true);
      auto node = core->AgentHello(session->link, *hello);
      store::AuditEntry entry;
      entry.actor = node.ok() ? "agent:" + *node : "agent:" + hello->name;
      entry.source = c->remote_addr();
      entry.action = "agent.hello";
      entry.target = node.ok() ? *node : hello->node_id;
      entry.params = Json{{"name", hello->name},
                          {"claims", ToJson(*hello)["claims"]},
                          {"gpus", hello->inventory.gpus.size()},
                          {"driver", hello->inventory.driver_version},
                          {"agent_version", hello->agent_version}};
      if (!node.ok()) entry.params["refused"] = node.status().message();
      entry.status = node.ok() ? 200 : HttpStatusFor(node.status().code());
      (void)core->RecordAudit(std::move(entry));
      if (!node.ok()) return fail(node.status(), true);
      session->node_id = *node;
      return;
    }
    Status s = core->AgentMessage(session->node_id, session->link.get(), *msg);
    if (!s.ok()) fail(s, s.code() == StatusCode::kFailedPrecondition);
  };
  h.on_close = [core, session](const std::shared_ptr<WsConnection>&) {
    if (!session->node_id.empty()) core->AgentDisconnected(session->node_id, session->link.get());
  };
  return h;
}

}  // namespace sluice::server
