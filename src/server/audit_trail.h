// The audit log's view of an API call (issue 5 item 6): which calls are mutations, and what of
// them is recorded. Parameters are kept so an auditor can see what was asked, but secrets never
// enter the log: values under keys that name a secret, and every job environment value (jobs
// pass API keys there), are replaced by "[redacted]"; bodies that are not small JSON are
// recorded by size and SHA-256 only.
#pragma once

#include <string>

#include "common/json.h"
#include "net/http_types.h"
#include "store/records.h"

namespace sluice::server {

// POST, PUT and DELETE under /v1, except calls that only read (estimate, blobs/missing) or
// measure (conformance/payload).
bool IsAuditedMutation(const HttpRequest& req);

// `json` with secrets replaced, recursively.
Json RedactSecrets(const Json& json);

// The entry for one answered mutation. `actor` is the token id (or "anonymous").
store::AuditEntry AuditEntryFor(const HttpRequest& req, int status,
                                const std::string& response_body, const std::string& actor);

// One CSV line (RFC 4180 quoting) and its header, for `sluice audit-log --csv`.
std::string AuditCsvHeader();
std::string AuditCsvLine(const store::AuditEntry& e);
Json ToJson(const store::AuditEntry& e);

}  // namespace sluice::server
