// The server's side of trust (issue 5 item 3): what it does with a node's probe and conformance
// report. The agent reports facts and measurements; these functions decide, by the server's own
// rules (audit/verification.h), whether the node and its offers are verified, and keep the
// fingerprints that say when they must be verified again. Pure: no I/O, no clock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "audit/verification.h"
#include "common/agent_protocol.h"
#include "common/conformance.h"
#include "common/inventory.h"
#include "common/status.h"
#include "store/records.h"

namespace sluice::server {

inline constexpr std::string_view kVerified = "verified";
inline constexpr std::string_view kUnverified = "unverified";
inline constexpr std::string_view kDeverified = "deverified";

// A provider's claims against the probe: FailedPrecondition naming the claim and what the probe
// found when a claimed GPU is not there (more claimed than probed, or an unknown label).
Status CheckClaims(const std::vector<proto::GpuClaim>& claims, const Inventory& probed);

// What a hello changed. Fingerprints are recomputed from the probed inventory; when either
// differs from the record's, a verified node becomes deverified until a new report passes, and
// the agent is asked to run its suite again.
struct HelloTrust {
  bool changed = false;  // a fingerprint differs from the one on record
  std::string what;      // "software changed (driver 535.104.05 -> 550.54.15)", or ""
};
HelloTrust ApplyHelloTrust(store::NodeRecord& node, const Inventory& previous,
                           const Inventory& probed);

// The server's verdict on `report`: audit::Evaluate with each GPU's spec speed (its label from
// market::IdentifyGpu, its figures from data/gpu_specs.csv) for judging gpu-perf.N.
audit::Verdict JudgeReport(const Inventory& inv, const conformance::Report& report,
                           const audit::VerificationRules& rules);

// Evaluates `report` for `node` (whose inventory is current) and records the verdict, the
// report and `now_ms`. Returns the verdict.
audit::Verdict ApplyReport(store::NodeRecord& node, const Inventory& inv,
                           const conformance::Report& report, const audit::VerificationRules& rules,
                           int64_t now_ms);

// What an attempt ran on, for audit bundles: JSON text of the node's name, id, inventory,
// fingerprints, verification state and reasons, and the last conformance report with the time
// it was evaluated. Its SHA-256 is the snapshot's digest.
store::NodeSnapshot Snapshot(const store::NodeRecord& node);

}  // namespace sluice::server
