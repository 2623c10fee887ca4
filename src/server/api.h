// The HTTP face of the server: REST/JSON under /v1 and the agent WebSocket at
// /v1/agent/connect. Handlers parse and authorize, then call ServerCore; they never schedule.
//
// Every route is a row of one table (Api::Routes()) naming who may call it; the isolation test
// matrix is generated from that table (docs/design-notes.md "Accounts and tenancy"). Jobs are
// visible to their owner, the members of the team they were submitted for, and admins; a
// provider sees the jobs placed on its nodes without their `env` values. Another tenant's job is
// 404, never 403, so ids reveal nothing.
//
// Requests without a valid token are counted and rate-limited per client address, never stored;
// every authorized POST/PUT/DELETE that changes state is appended to the audit log
// (server/audit_trail.h).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "net/http_server.h"
#include "server/accounts.h"
#include "server/refusal_limiter.h"
#include "server/server_core.h"
#include "store/blob_store.h"

namespace sluice::server {

inline constexpr size_t kMaxJsonBody = 1 << 20;
inline constexpr size_t kMaxBlobBody = 256u << 20;
inline constexpr size_t kMaxCatalogBody = 64u << 20;

// Who may call a route.
enum class Access {
  kPublic,         // no token
  kAccount,        // any account token (user, provider, admin)
  kAdmin,          // admin accounts
  kSubmitter,      // users and admins
  kJobViewer,      // the job's owner, its team, admins; providers of nodes it ran on (redacted)
  kJobOwner,       // the job's owner, its team, admins
  kNodeOwner,      // the node's provider account, admins
  kNode,           // an enrolled node's credential (and admins)
  kNodeOrAccount,  // a node credential or a user/admin account (uploads)
  kMetrics,        // admin accounts, including their metrics-scoped tokens
  kAgentChannel,   // join token or node credential, WebSocket only
};

struct ApiOptions {
  size_t max_blob_bytes_per_account = 50ull << 30;  // workdirs and checkpoints (0: no limit)
  RefusalLimiter::Options refusals;
  // Budget alert webhooks may point at loopback, link-local or private addresses (tests; a
  // deployment that sends alerts to an internal service on purpose).
  bool allow_private_webhooks = false;
};

class Api {
 public:
  // Placeholders in a route's pattern: {job}, {node}, {blob}, {token}, {account}, {team}.
  struct RouteSpec {
    const char* method;
    const char* pattern;
    Access access;
    bool read_only;  // allowed with a read-scoped token
  };
  static const std::vector<RouteSpec>& Routes();

  Api(ServerCore* core, store::BlobStore* blobs, Accounts* accounts, const Clock* clock,
      ApiOptions options = {});

  void Handle(HttpRequest req, std::shared_ptr<ResponseWriter> w);
  Result<WsHandler> Upgrade(const HttpRequest& req, const std::shared_ptr<WsConnection>& conn);
  size_t BodyLimit(const HttpRequest& head) const;

  // Requests refused for want of a valid token or a permission (the refusal counter).
  uint64_t refused() const { return refused_.load(); }
  uint64_t rate_limited() const { return limiter_.limited(); }

 private:
  // One request being served: who asks, the route it matched, the path's placeholders.
  struct Call {
    Principal who;
    const RouteSpec* route = nullptr;
    std::map<std::string, std::string> params;  // {job} -> "job-1a2b", ...
  };
  HttpResponse Route(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& w,
                     bool* streaming, Principal* who);
  HttpResponse Dispatch(const Call& call, const HttpRequest& req,
                        const std::shared_ptr<ResponseWriter>& w, bool* streaming);
  // Access to one job for `who`; NotFound when it may not see it. `redacted` (may be null) is
  // set when it may see it only without env values.
  Status CheckJob(const Principal& who, const std::string& job_id, bool owner_only, bool* redacted);
  Status CheckNode(const Principal& who, const std::string& node);
  bool MayReadBlob(const Principal& who, const std::string& digest);
  void CountRefusal(const HttpRequest& req);

  HttpResponse SubmitJob(const HttpRequest& req, const Principal& who);
  HttpResponse ListJobs(const HttpRequest& req, const Principal& who);
  HttpResponse GetJob(const std::string& id, bool redacted);
  HttpResponse Estimate(const HttpRequest& req);
  HttpResponse AuditLog(const HttpRequest& req);
  HttpResponse PutBlob(const HttpRequest& req, const Principal& who, const std::string& digest);
  HttpResponse Stream(const HttpRequest& req, const std::string& id,
                      const std::shared_ptr<ResponseWriter>& w, bool* streaming);
  HttpResponse Metrics();
  // api_accounts.cc: accounts, tokens, teams, whoami.
  HttpResponse AccountsRoute(const Call& call, const HttpRequest& req);
  // api_money.cc: balances, top-ups and credit limits, the ledger check, costs and earnings.
  HttpResponse MoneyRoute(const Call& call, const HttpRequest& req);
  // POST /v1/budgets: an account's monthly budget (its own, or an admin's any), a team's
  // (admins).
  HttpResponse SetBudget(const Principal& who, const HttpRequest& req);
  Json AccountMoneyJson(const store::AccountRecord& account);

  ServerCore* const core_;
  store::BlobStore* const blobs_;
  Accounts* const accounts_;
  const Clock* const clock_;
  const ApiOptions options_;
  RefusalLimiter limiter_;
  std::atomic<uint64_t> refused_{0};
};

// {"error": {"code": "...", "message": "..."}} with the HTTP status that fits the code.
HttpResponse ErrorResponse(const Status& status);
HttpResponse JsonResponse(int http_status, const Json& body);
// The job as a provider may see it: every `env` value replaced by "[redacted]".
Json RedactJobEnv(Json job);

}  // namespace sluice::server
