#include "server/api.h"

#include <atomic>

#include "common/crypto.h"
#include "common/text.h"
#include "market/explain.h"
#include "market/offer.h"
#include "market/query.h"
#include "market/ranking.h"
#include "server/api_util.h"
#include "server/audit_trail.h"
#include "spec/job_spec.h"

namespace sluice::server {

const std::vector<Api::RouteSpec>& Api::Routes() {
  // Order matters only where a literal segment and a placeholder could both match: literals
  // first (blobs/missing before blobs/{blob}).
  static const std::vector<RouteSpec> kRoutes = {
      {"GET", "/v1/health", Access::kAccount, true},
      {"GET", "/v1/metrics", Access::kMetrics, true},
      {"GET", "/v1/whoami", Access::kAccount, true},
      {"GET", "/v1/audit/certificate", Access::kPublic, true},
      {"GET", "/v1/offers", Access::kAccount, true},
      {"POST", "/v1/estimate", Access::kAccount, true},
      {"POST", "/v1/catalogs", Access::kAdmin, false},
      {"GET", "/v1/nodes", Access::kAccount, true},
      {"POST", "/v1/nodes/{node}/reclaim", Access::kNodeOwner, false},
      {"POST", "/v1/nodes/{node}/verify", Access::kNodeOwner, false},
      {"POST", "/v1/nodes/{node}/resume", Access::kNodeOwner, false},
      {"POST", "/v1/nodes/{node}/revoke", Access::kNodeOwner, false},
      {"GET", "/v1/audit-log", Access::kAdmin, true},
      {"POST", "/v1/jobs", Access::kSubmitter, false},
      {"GET", "/v1/jobs", Access::kAccount, true},
      {"GET", "/v1/jobs/{job}", Access::kJobViewer, true},
      {"DELETE", "/v1/jobs/{job}", Access::kJobOwner, false},
      {"POST", "/v1/jobs/{job}/cancel", Access::kJobOwner, false},
      {"POST", "/v1/jobs/{job}/budget", Access::kJobOwner, false},
      {"GET", "/v1/jobs/{job}/logs", Access::kJobOwner, true},
      {"GET", "/v1/jobs/{job}/stream", Access::kJobOwner, true},
      {"GET", "/v1/jobs/{job}/audit", Access::kJobOwner, true},
      {"POST", "/v1/blobs/missing", Access::kNodeOrAccount, true},
      {"PUT", "/v1/blobs/{blob}", Access::kNodeOrAccount, false},
      {"GET", "/v1/blobs/{blob}", Access::kNodeOrAccount, true},
      {"GET", "/v1/conformance/payload", Access::kNode, true},
      {"POST", "/v1/conformance/payload", Access::kNode, true},
      {"GET", "/v1/accounts", Access::kAdmin, true},
      {"POST", "/v1/accounts", Access::kAdmin, false},
      {"POST", "/v1/accounts/{account}/disable", Access::kAdmin, false},
      {"POST", "/v1/accounts/{account}/enable", Access::kAdmin, false},
      {"POST", "/v1/accounts/{account}/credit", Access::kAdmin, false},
      {"GET", "/v1/accounts/{account}/balance", Access::kAccount, true},
      {"GET", "/v1/ledger/check", Access::kAdmin, true},
      {"GET", "/v1/costs", Access::kAccount, true},
      {"GET", "/v1/budgets", Access::kAccount, true},
      {"POST", "/v1/budgets", Access::kAccount, false},
      {"GET", "/v1/budget-alerts", Access::kAccount, true},
      {"GET", "/v1/tokens", Access::kAccount, true},
      {"POST", "/v1/tokens", Access::kAccount, false},
      {"POST", "/v1/tokens/{token}/revoke", Access::kAccount, false},
      {"GET", "/v1/teams", Access::kAccount, true},
      {"POST", "/v1/teams/{team}/members", Access::kAdmin, false},
      {"DELETE", "/v1/teams/{team}/members/{account}", Access::kAdmin, false},
      {"GET", "/v1/agent/connect", Access::kAgentChannel, true},
  };
  return kRoutes;
}

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

Json RedactJobEnv(Json job) {
  if (job.contains("spec") && job["spec"].is_object() && job["spec"].contains("env") &&
      job["spec"]["env"].is_object()) {
    for (auto& [k, v] : job["spec"]["env"].items()) v = "[redacted]";
  }
  return job;
}

Api::Api(ServerCore* core, store::BlobStore* blobs, Accounts* accounts, const Clock* clock,
         ApiOptions options)
    : core_(core),
      blobs_(blobs),
      accounts_(accounts),
      clock_(clock),
      options_(options),
      limiter_(clock, options.refusals) {}

size_t Api::BodyLimit(const HttpRequest& head) const {
  if (head.method == "PUT" && head.path.rfind("/v1/blobs/", 0) == 0) return kMaxBlobBody;
  if (head.method == "POST" && head.path == "/v1/catalogs") return kMaxCatalogBody;
  if (head.method == "POST" && head.path == "/v1/conformance/payload") return 64u << 20;
  return kMaxJsonBody;
}

void Api::CountRefusal(const HttpRequest& req) {
  (void)req;
  refused_.fetch_add(1);
}

void Api::Handle(HttpRequest req, std::shared_ptr<ResponseWriter> w) {
  bool streaming = false;
  Principal who;
  HttpResponse resp = Route(req, w, &streaming, &who);
  // Only authorized mutations are audited: a refused request is a counter, never a row (issue 10
  // item 5: 10,000 bad requests must not grow the database).
  bool refused = resp.status == 401 || resp.status == 403 || resp.status == 429;
  if (who.authenticated() && !refused && IsAuditedMutation(req)) {
    // Best effort by design: the mutation itself is already durable, and a failed audit write
    // must not turn its success into an error the client would retry.
    (void)core_->RecordAudit(AuditEntryFor(req, resp.status, resp.body, who.Actor()));
  }
  if (!streaming) w->Send(std::move(resp));
}

namespace {

// Matches `path` segments against a route pattern; fills placeholders.
bool MatchPattern(std::string_view pattern, const std::vector<std::string>& parts,
                  std::map<std::string, std::string>* params) {
  std::vector<std::string> pat = Split(std::string(pattern), '/');
  if (pat.size() != parts.size()) return false;
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < pat.size(); ++i) {
    if (pat[i].size() > 2 && pat[i].front() == '{' && pat[i].back() == '}') {
      if (parts[i].empty()) return false;
      out[pat[i].substr(1, pat[i].size() - 2)] = parts[i];
    } else if (pat[i] != parts[i]) {
      return false;
    }
  }
  *params = std::move(out);
  return true;
}

bool ScopeAllows(const Principal& who, const Api::RouteSpec& route) {
  switch (who.scope) {
    case Scope::kFull:
      return true;
    case Scope::kRead:
      return route.read_only;
    case Scope::kMetrics:
      return route.access == Access::kMetrics || std::string_view(route.pattern) == "/v1/health";
    case Scope::kJoin:
      return route.access == Access::kAgentChannel;
    case Scope::kNode:
      return route.access == Access::kNode || route.access == Access::kNodeOrAccount ||
             route.access == Access::kAgentChannel;
  }
  return false;
}

// Whether the principal's role may use a route of this access class at all. Object checks (is
// it this account's job or node) follow in Dispatch.
bool RoleAllows(const Principal& who, Access access) {
  const bool account =
      who.role == Role::kAdmin || who.role == Role::kUser || who.role == Role::kProvider;
  switch (access) {
    case Access::kPublic:
      return true;
    case Access::kAccount:
    case Access::kJobViewer:
      return account;
    case Access::kJobOwner:
      return who.role == Role::kAdmin || who.role == Role::kUser;
    case Access::kAdmin:
    case Access::kMetrics:
      return who.role == Role::kAdmin;
    case Access::kSubmitter:
      return who.role == Role::kAdmin || who.role == Role::kUser;
    case Access::kNodeOwner:
      return who.role == Role::kAdmin || who.role == Role::kProvider;
    case Access::kNode:
      return who.role == Role::kNode || who.role == Role::kAdmin;
    case Access::kNodeOrAccount:
      return who.role == Role::kNode || who.role == Role::kAdmin || who.role == Role::kUser;
    case Access::kAgentChannel:
      return who.role == Role::kNode || who.scope == Scope::kJoin;
  }
  return false;
}

}  // namespace

HttpResponse Api::Route(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& w,
                        bool* streaming, Principal* who) {
  std::vector<std::string> parts = Split(req.path, '/');
  if (parts.size() > 3 && parts.back().empty()) parts.pop_back();  // trailing slash
  Call call;
  bool path_known = false;
  for (const auto& r : Routes()) {
    std::map<std::string, std::string> params;
    if (!MatchPattern(r.pattern, parts, &params)) continue;
    path_known = true;
    if (req.method != r.method) continue;
    call.route = &r;
    call.params = std::move(params);
    break;
  }
  const bool is_public = call.route != nullptr && call.route->access == Access::kPublic;
  if (!is_public) {
    // Authenticated before anything else, so an anonymous caller learns nothing, not even
    // which paths exist.
    call.who = accounts_->Authenticate(req.Header("authorization"));
  }
  auto unknown_route = [&]() -> std::optional<HttpResponse> {
    if (call.route != nullptr) return std::nullopt;
    if (!path_known) return ErrorResponse(Status::NotFound("no such endpoint: " + req.path));
    return JsonResponse(405, Json{{"error",
                                   {{"code", "METHOD_NOT_ALLOWED"},
                                    {"message", req.method + " is not allowed on " + req.path}}}});
  };
  if (is_public || call.who.authenticated()) {
    if (auto r = unknown_route()) return *r;
  }
  if (!is_public) {
    auto refuse = [&](const Status& s) {
      CountRefusal(req);
      if (!limiter_.Allow(req.remote_addr)) {
        HttpResponse r = ErrorResponse(
            Status::ResourceExhausted("too many refused requests from this address; slow down"));
        r.headers.emplace_back("Retry-After", "1");
        return r;
      }
      HttpResponse r = ErrorResponse(s);
      if (s.code() == StatusCode::kUnauthenticated) {
        r.headers.emplace_back("WWW-Authenticate", "Bearer");
      }
      return r;
    };
    if (!call.who.authenticated()) {
      std::string why = call.who.refusal == "missing"
                            ? "missing bearer token (set SLUICE_TOKEN or pass --token)"
                            : "invalid bearer token (" + call.who.refusal + ")";
      return refuse(Status::Unauthenticated(why));
    }
    if (!ScopeAllows(call.who, *call.route) && call.who.scope == Scope::kJoin) {
      return refuse(Status::PermissionDenied(
          "this is a join token: it only enrols nodes (sluice agent --join-token-file); use an "
          "account token for " +
          req.method + " " + req.path + " (admin.token, or one from `sluice token create`)"));
    }
    if (!ScopeAllows(call.who, *call.route)) {
      return refuse(Status::PermissionDenied("this token's scope (" +
                                             std::string(Name(call.who.scope)) +
                                             ") does not allow " + req.method + " " + req.path));
    }
    if (!RoleAllows(call.who, call.route->access)) {
      return refuse(Status::PermissionDenied(std::string(Name(call.who.role)) +
                                             " accounts may not " + req.method + " " + req.path));
    }
    // Object-level checks: a job another tenant cannot see is 404, a node of another provider
    // 403 (nodes are listed publicly).
    if (call.params.count("job")) {
      bool owner_only = call.route->access == Access::kJobOwner;
      Status s = CheckJob(call.who, call.params["job"], owner_only, nullptr);
      if (!s.ok()) {
        if (s.code() == StatusCode::kNotFound) CountRefusal(req);
        return ErrorResponse(s);
      }
    }
    if (call.params.count("node")) {
      Status s = CheckNode(call.who, call.params["node"]);
      if (!s.ok()) {
        if (s.code() == StatusCode::kPermissionDenied) return refuse(s);
        return ErrorResponse(s);
      }
    }
  }
  *who = call.who;
  return Dispatch(call, req, w, streaming);
}

Status Api::CheckJob(const Principal& who, const std::string& job_id, bool owner_only,
                     bool* redacted) {
  if (redacted != nullptr) *redacted = false;
  auto access = core_->JobAccessOf(job_id);
  if (!access.ok()) return access.status();
  if (who.role == Role::kAdmin) return Status::Ok();
  const bool owner = access->owner.empty() ? who.account_id == accounts_->admin_account_id()
                                           : access->owner == who.account_id;
  if (owner) return Status::Ok();
  if (!access->team.empty() && who.role == Role::kUser &&
      accounts_->IsTeamMember(access->team, who.account_id)) {
    return Status::Ok();
  }
  if (!owner_only && who.role == Role::kProvider &&
      std::find(access->node_owners.begin(), access->node_owners.end(), who.account_id) !=
          access->node_owners.end()) {
    if (redacted != nullptr) *redacted = true;
    return Status::Ok();
  }
  return Status::NotFound("no job " + job_id);
}

Status Api::CheckNode(const Principal& who, const std::string& node) {
  auto rec = core_->FindNode(node);
  if (!rec.ok()) return rec.status();
  if (who.role == Role::kAdmin) return Status::Ok();
  std::string owner = rec->owner.empty() ? accounts_->builtin_provider_id() : rec->owner;
  if (who.role == Role::kProvider && owner == who.account_id) return Status::Ok();
  return Status::PermissionDenied("node " + node + " belongs to another provider");
}

bool Api::MayReadBlob(const Principal& who, const std::string& digest) {
  if (who.role == Role::kAdmin) return true;
  if (who.role == Role::kNode) return core_->NodeNeedsBlob(who.node_id, digest);
  return accounts_->OwnsBlob(who.account_id, digest);
}

HttpResponse Api::Dispatch(const Call& call, const HttpRequest& req,
                           const std::shared_ptr<ResponseWriter>& w, bool* streaming) {
  const std::string pattern = call.route->pattern;
  const std::string& m = req.method;
  auto param = [&](const char* k) { return call.params.at(k); };

  if (pattern == "/v1/audit/certificate") {
    // Public on purpose: anyone holding a bundle must be able to check who signed it.
    if (core_->SigningCertificate().empty()) {
      return ErrorResponse(Status::FailedPrecondition("this server has no audit signing key"));
    }
    HttpResponse r;
    r.content_type = "application/x-pem-file";
    r.body = core_->SigningCertificate();
    return r;
  }
  if (pattern == "/v1/health") return JsonResponse(200, Json{{"status", "ok"}});
  if (pattern == "/v1/metrics") return Metrics();
  if (pattern == "/v1/agent/connect") {
    return ErrorResponse(Status::InvalidArgument(
        "the agent channel needs a WebSocket upgrade (sluice agent opens it)"));
  }
  if (pattern == "/v1/accounts/{account}/credit" || pattern == "/v1/accounts/{account}/balance" ||
      pattern == "/v1/ledger/check" || pattern == "/v1/costs" ||
      pattern == "/v1/jobs/{job}/budget" || pattern == "/v1/budgets" ||
      pattern == "/v1/budget-alerts") {
    return MoneyRoute(call, req);
  }
  if (pattern.rfind("/v1/accounts", 0) == 0 || pattern.rfind("/v1/tokens", 0) == 0 ||
      pattern.rfind("/v1/teams", 0) == 0 || pattern == "/v1/whoami") {
    return AccountsRoute(call, req);
  }
  if (pattern == "/v1/blobs/missing") {
    // Which of these blobs the server lacks, so a checkpoint upload sends only what changed.
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
      // A user learns nothing about uploads that are not its own: those read as missing (and
      // uploading the bytes proves having them). Nodes see every blob, so a job resumed on another
      // node does not upload its unchanged checkpoint chunks again.
      const std::string digest = d.get<std::string>();
      if (!blobs_->Has(digest) ||
          (call.who.role == Role::kUser && !MayReadBlob(call.who, digest))) {
        missing.push_back(d);
      }
    }
    return JsonResponse(200, Json{{"missing", missing}});
  }
  if (pattern == "/v1/blobs/{blob}") {
    const std::string digest = param("blob");
    if (!store::BlobStore::IsValidDigest(digest)) {
      return ErrorResponse(
          Status::InvalidArgument("blob digest must be 64 lowercase hex characters"));
    }
    if (m == "PUT") return PutBlob(req, call.who, digest);
    if (!MayReadBlob(call.who, digest)) {
      CountRefusal(req);
      return ErrorResponse(Status::NotFound("no blob " + digest));
    }
    auto data = blobs_->Get(digest);
    if (!data.ok()) return ErrorResponse(data.status());
    HttpResponse r;
    r.content_type = "application/octet-stream";
    r.body = std::move(*data);
    return r;
  }
  if (pattern == "/v1/conformance/payload") {
    // The agent's link check: round trips with bytes=0, then a timed download and upload.
    if (m == "POST") return JsonResponse(200, Json{{"received", req.body.size()}});
    auto bytes = QueryInt(req, "bytes", 0, 0, 64 << 20);
    if (!bytes.ok()) return ErrorResponse(bytes.status());
    HttpResponse r;
    r.content_type = "application/octet-stream";
    r.body.assign(static_cast<size_t>(*bytes), 'x');
    return r;
  }
  if (pattern == "/v1/offers") {
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
  if (pattern == "/v1/estimate") return Estimate(req);
  if (pattern == "/v1/catalogs") {
    std::string name = QueryParam(req, "name");
    if (name.empty()) name = "catalog.csv";
    if (name.size() > 128) return ErrorResponse(Status::InvalidArgument("name: too long"));
    auto imported = core_->ImportCatalog(name, req.body);
    if (!imported.ok()) return ErrorResponse(imported.status());
    return JsonResponse(200, Json{{"provider", imported->provider},
                                  {"offers", imported->offers.size()},
                                  {"unmapped_gpu_names", imported->unmapped_gpu_names},
                                  {"warnings", imported->warnings}});
  }
  if (pattern == "/v1/nodes/{node}/reclaim") {
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
    auto preempted = core_->ReclaimNode(param("node"), gpus, *cause);
    if (!preempted.ok()) return ErrorResponse(preempted.status());
    return JsonResponse(200, Json{{"preempted", *preempted}});
  }
  if (pattern == "/v1/nodes/{node}/resume") {
    auto node = core_->ResumeNode(param("node"));
    if (!node.ok()) return ErrorResponse(node.status());
    return JsonResponse(200, Json{{"node_id", node->id}, {"name", node->name}, {"paused", false}});
  }
  if (pattern == "/v1/nodes/{node}/verify") {
    auto node = core_->VerifyNode(param("node"));
    if (!node.ok()) return ErrorResponse(node.status());
    return JsonResponse(202, Json{{"node_id", node->id},
                                  {"name", node->name},
                                  {"verification", node->verification},
                                  {"requested", true}});
  }
  if (pattern == "/v1/nodes/{node}/revoke") {
    auto node = core_->RevokeNode(param("node"));
    if (!node.ok()) return ErrorResponse(node.status());
    return JsonResponse(200, Json{{"node_id", node->id}, {"name", node->name}, {"revoked", true}});
  }
  if (pattern == "/v1/audit-log") return AuditLog(req);
  if (pattern == "/v1/nodes") {
    Json arr = Json::array();
    for (const auto& n : core_->ListNodes()) {
      Json j = NodeToJson(n);
      auto owner = accounts_->FindAccount(n.node.owner.empty() ? accounts_->builtin_provider_id()
                                                               : n.node.owner);
      j["owner"] = owner ? owner->name : "";
      arr.push_back(std::move(j));
    }
    return JsonResponse(200, Json{{"nodes", arr}});
  }
  if (pattern == "/v1/jobs") {
    if (m == "POST") return SubmitJob(req, call.who);
    return ListJobs(req, call.who);
  }
  const std::string id = call.params.count("job") ? param("job") : "";
  if (pattern == "/v1/jobs/{job}" && m == "DELETE") {
    Status s = core_->DeleteJob(id);
    if (!s.ok()) return ErrorResponse(s);
    return JsonResponse(200, Json{{"deleted", id}});
  }
  if (pattern == "/v1/jobs/{job}") {
    bool redacted = false;
    Status s = CheckJob(call.who, id, false, &redacted);
    if (!s.ok()) return ErrorResponse(s);
    return GetJob(id, redacted);
  }
  if (pattern == "/v1/jobs/{job}/cancel") {
    auto j = core_->CancelJob(id);
    if (!j.ok()) return ErrorResponse(j.status());
    return JsonResponse(200, Json{{"job", JobToJson(*j)}});
  }
  if (pattern == "/v1/jobs/{job}/logs") {
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
  if (pattern == "/v1/jobs/{job}/stream") return Stream(req, id, w, streaming);
  if (pattern == "/v1/jobs/{job}/audit") {
    auto zip = core_->AuditBundle(id);
    if (!zip.ok()) return ErrorResponse(zip.status());
    HttpResponse r;
    r.content_type = "application/zip";
    r.body = std::move(*zip);
    return r;
  }
  return ErrorResponse(Status::Internal("route " + pattern + " has no handler"));
}

}  // namespace sluice::server
