// Small request helpers shared by the API's handler files (api.cc, api_accounts.cc).
#pragma once

#include <cstdint>
#include <string>

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

}  // namespace sluice::server
