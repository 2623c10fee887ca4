#include "server/audit_trail.h"

#include <algorithm>
#include <cctype>

#include "common/crypto.h"
#include "common/text.h"

namespace sluice::server {
namespace {

constexpr size_t kMaxRecordedBody = 64 * 1024;
const char* const kRedacted = "[redacted]";

bool NamesSecret(std::string key) {
  std::transform(key.begin(), key.end(), key.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* word : {"token", "secret", "password", "passwd", "credential", "api_key",
                           "apikey", "private_key", "authorization"}) {
    if (key.find(word) != std::string::npos) return true;
  }
  return false;
}

Json Redact(const Json& j, bool under_env) {
  if (j.is_object()) {
    Json out = Json::object();
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (under_env || NamesSecret(it.key())) {
        out[it.key()] = kRedacted;
      } else {
        out[it.key()] = Redact(it.value(), it.key() == "env");
      }
    }
    return out;
  }
  if (j.is_array()) {
    Json out = Json::array();
    for (const auto& x : j) out.push_back(Redact(x, under_env));
    return out;
  }
  return under_env ? Json(kRedacted) : j;
}

std::string Csv(const std::string& field) {
  if (field.find_first_of(",\"\n\r") == std::string::npos) return field;
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace

bool IsAuditedMutation(const HttpRequest& req) {
  if (req.method != "POST" && req.method != "PUT" && req.method != "DELETE") return false;
  if (req.path.rfind("/v1/", 0) != 0) return false;
  return req.path != "/v1/estimate" && req.path != "/v1/blobs/missing" &&
         req.path.rfind("/v1/conformance/", 0) != 0;
}

Json RedactSecrets(const Json& json) { return Redact(json, false); }

store::AuditEntry AuditEntryFor(const HttpRequest& req, int status,
                                const std::string& response_body, const std::string& actor) {
  store::AuditEntry e;
  e.actor = actor.empty() ? "anonymous" : actor;
  e.source = req.remote_addr;
  e.action = req.method + " " + req.path;
  std::vector<std::string> parts = Split(req.path, '/');  // "", "v1", coll, id, ...
  if (parts.size() >= 4) e.target = parts[3];
  e.status = status;
  Json params = Json::object();
  for (const auto& [k, v] : req.query) params["query"][k] = NamesSecret(k) ? kRedacted : v;
  if (!req.body.empty() && req.path.rfind("/v1/blobs/", 0) == 0) {
    // Content-addressed: the digest in the path already names the bytes.
    params["body_bytes"] = req.body.size();
  } else if (!req.body.empty()) {
    auto body = req.body.size() <= kMaxRecordedBody ? ParseJson(req.body) : Result<Json>(Json());
    if (body.ok() && body->is_object()) {
      params["body"] = RedactSecrets(*body);
    } else {
      params["body_bytes"] = req.body.size();
      params["body_sha256"] = Sha256Hex(req.body);
    }
  }
  e.params = std::move(params);
  // A created job is named in the answer, not the path.
  if (e.target.empty() && status / 100 == 2) {
    auto answer = ParseJson(response_body);
    if (answer.ok() && answer->is_object() && answer->contains("job") &&
        (*answer)["job"].is_object()) {
      e.target = (*answer)["job"].value("id", "");
    }
  }
  return e;
}

std::string AuditCsvHeader() { return "id,ts_ms,actor,source,action,target,status,params"; }

std::string AuditCsvLine(const store::AuditEntry& e) {
  return std::to_string(e.id) + "," + std::to_string(e.ts_ms) + "," + Csv(e.actor) + "," +
         Csv(e.source) + "," + Csv(e.action) + "," + Csv(e.target) + "," +
         std::to_string(e.status) + "," + Csv(DumpJson(e.params));
}

Json ToJson(const store::AuditEntry& e) {
  return Json{{"id", e.id},         {"ts_ms", e.ts_ms},   {"actor", e.actor},
              {"source", e.source}, {"action", e.action}, {"target", e.target},
              {"params", e.params}, {"status", e.status}};
}

}  // namespace sluice::server
