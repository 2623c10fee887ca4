// The HTTP face of the server: REST/JSON under /v1 and the agent WebSocket at
// /v1/agent/connect. Handlers parse and authorize, then call ServerCore; they never schedule.
//
//   GET  /v1/health
//   POST /v1/jobs                 {"spec": {...}, "workdir_blob": "<sha256>"}
//   GET  /v1/jobs[?state=&limit=]
//   GET  /v1/jobs/ID              job + attempts + events
//   POST /v1/jobs/ID/cancel
//   GET  /v1/jobs/ID/logs[?after=&limit=]
//   GET  /v1/jobs/ID/stream[?logs=1&events=1]   chunked NDJSON until the job ends
//   GET  /v1/offers[?q=QUERY&sort=price,-perf&limit=50]   agent and catalog offers
//   POST /v1/catalogs?name=aws.csv  a cloud price catalog (CSV body); replaces that provider's
//   GET  /v1/nodes
//   PUT  /v1/blobs/SHA256         raw bytes (workdir archives)
//   GET  /v1/blobs/SHA256         admin or agent token
//   POST /v1/nodes/ID/verify      ask the node's agent to run its conformance suite now
//   GET  /v1/audit-log[?since=MS&after=ID&limit=N&format=csv]   API mutations, oldest first
//   GET  /v1/jobs/ID/audit        the job's signed audit bundle (.zip)
//   GET  /v1/audit/certificate    the audit signing certificate (PEM); needs no token
//   GET|POST /v1/conformance/payload[?bytes=N]   link measurement for agents (admin or agent)
// Every POST/PUT/DELETE that changes state is appended to the audit log (server/audit_trail.h).
#pragma once

#include <memory>

#include "net/http_server.h"
#include "server/auth.h"
#include "server/server_core.h"
#include "store/blob_store.h"

namespace sluice::server {

inline constexpr size_t kMaxJsonBody = 1 << 20;
inline constexpr size_t kMaxBlobBody = 256u << 20;
inline constexpr size_t kMaxCatalogBody = 64u << 20;

class Api {
 public:
  Api(ServerCore* core, store::BlobStore* blobs, const TokenAuth* auth);

  void Handle(HttpRequest req, std::shared_ptr<ResponseWriter> w);
  Result<WsHandler> Upgrade(const HttpRequest& req, const std::shared_ptr<WsConnection>& conn);
  size_t BodyLimit(const HttpRequest& head) const;

 private:
  HttpResponse Route(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& w,
                     bool* streaming);
  HttpResponse SubmitJob(const HttpRequest& req);
  HttpResponse Estimate(const HttpRequest& req);
  HttpResponse AuditLog(const HttpRequest& req);
  HttpResponse Stream(const HttpRequest& req, const std::string& id,
                      const std::shared_ptr<ResponseWriter>& w, bool* streaming);

  ServerCore* const core_;
  store::BlobStore* const blobs_;
  const TokenAuth* const auth_;
};

// {"error": {"code": "...", "message": "..."}} with the HTTP status that fits the code.
HttpResponse ErrorResponse(const Status& status);
HttpResponse JsonResponse(int http_status, const Json& body);

}  // namespace sluice::server
