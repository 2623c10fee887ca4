// Small request helpers shared by the API's handler files (api.cc, api_accounts.cc).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "common/json.h"
#include "common/status.h"
#include "net/http_types.h"

namespace sluice::server {

// An integer query parameter in [lo, hi], `fallback` when absent; an error names the parameter.
Result<int64_t> QueryInt(const HttpRequest& req, const char* key, int64_t fallback, int64_t lo,
                         int64_t hi);
// The query parameter's value, "" when absent.
std::string QueryParam(const HttpRequest& req, const char* key);
// "0" and "false" are false; anything else present is true.
bool QueryFlag(const HttpRequest& req, const char* key, bool fallback);
// The request's body as a JSON object ("{}" when empty).
Result<Json> ObjectBody(const HttpRequest& req);
// InvalidArgument naming the first field of `body` not in `allowed`.
Status OnlyFields(const Json& body, std::initializer_list<const char*> allowed);

}  // namespace sluice::server
