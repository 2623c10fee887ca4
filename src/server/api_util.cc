#include "server/api_util.h"

#include <stdexcept>

namespace sluice::server {

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

Result<Json> ObjectBody(const HttpRequest& req) {
  auto body = ParseJson(req.body.empty() ? "{}" : req.body);
  if (!body.ok()) return body.status();
  if (!body->is_object()) return Status::InvalidArgument("expected a JSON object");
  return *std::move(body);
}

Status OnlyFields(const Json& body, std::initializer_list<const char*> allowed) {
  for (auto it = body.begin(); it != body.end(); ++it) {
    bool ok = false;
    for (const char* a : allowed) ok |= it.key() == a;
    if (!ok) return Status::InvalidArgument("unknown field `" + it.key() + "`");
  }
  return Status::Ok();
}

}  // namespace sluice::server
