// RuntimeContract: the software a job needs from the node it runs on, the `runtime:` block of a
// job spec. Every key is optional:
//
//   runtime: {cuda: "12.1", driver: ">=535", torch: "2.1.0+cu121", python: "3.10"}
//
// Each value is a version, optionally preceded by an operator (>=, >, <=, <, = or ==). The facts
// are matched against an offer's verified software (market/job_market.h compiles them into
// offer-query terms, so `sluice offers`, `sluice estimate`, placement and `sluice run
// --dry-run` agree):
//   cuda    the highest CUDA the node's driver supports (Offer::cuda_version). A bare version
//           means at least that: "12.1" is `cuda>=12.1`, because a driver runs every older CUDA.
//   driver  the NVIDIA driver (Offer::driver_version). A bare version (or `=`) is a prefix match
//           on dotted components: "535" matches 535.x, "535.104" matches 535.104 and 535.104.05,
//           not 535.1040. Operators compare in version order with missing parts as 0
//           (">=535" holds for 535.54.03 and 550.54.15; "<550" excludes 550.54.15).
//   torch   an installed PyTorch build (any of Offer::torch_builds). A bare version without `+`
//           matches any local build of it ("2.1.0" matches 2.1.0+cu121); with `+` it is exact.
//   python  the node's Python (Offer::python_version), compared at the precision written:
//           "3.10" stands for the 3.10 series (3.10.12 matches, 3.1.x and 3.11 do not), also with
//           an operator (">=3.10" holds for 3.10.4 and 3.12.1, "<=3.10" for 3.10.12).
// Versions are digits and dots (torch also takes letters, `+`, `-`, `_`: "2.1.0a0+git1234"), at
// most 64 bytes, and compare case-insensitively. An unknown fact on an offer satisfies nothing.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/json.h"
#include "common/status.h"
#include "spec/spec_value.h"

namespace sluice::spec {

inline constexpr size_t kMaxRuntimeVersionBytes = 64;

enum class RuntimeFact { kCuda, kDriver, kTorch, kPython };
// Every fact, in the order specs, fingerprints and the dry run list them.
inline constexpr RuntimeFact kRuntimeFacts[] = {RuntimeFact::kCuda, RuntimeFact::kDriver,
                                                RuntimeFact::kTorch, RuntimeFact::kPython};
// The key in the spec: "cuda", "driver", "torch", "python".
std::string_view Name(RuntimeFact fact);

enum class VersionOp { kEq, kGe, kGt, kLe, kLt };
std::string_view Name(VersionOp op);  // "=", ">=", ">", "<=", "<"

struct VersionConstraint {
  VersionOp op = VersionOp::kEq;
  std::string version;  // lowercase, e.g. "12.1" or "2.1.0+cu121"

  bool operator==(const VersionConstraint&) const = default;
};

struct RuntimeContract {
  std::optional<VersionConstraint> cuda;
  std::optional<VersionConstraint> driver;
  std::optional<VersionConstraint> torch;
  std::optional<VersionConstraint> python;

  const std::optional<VersionConstraint>& Get(RuntimeFact fact) const;
  std::optional<VersionConstraint>& Get(RuntimeFact fact);
  bool empty() const { return !cuda && !driver && !torch && !python; }
  bool operator==(const RuntimeContract&) const = default;
};

// What a bare version means for `fact`: >= for cuda, = (prefix or build match) for the others.
VersionOp DefaultOp(RuntimeFact fact);

// "12.1", ">=12.1", "== 535.104" (spaces around the operator are allowed). InvalidArgument with
// a message naming the expected form and the text, without a field prefix.
Result<VersionConstraint> ParseVersionConstraint(RuntimeFact fact, std::string_view text);

// Canonical text: the operator is left out when it is the fact's default, so "12.1" and
// ">=12.1" for cuda both read "12.1"; ParseVersionConstraint(fact, ToString(...)) round-trips.
std::string ToString(RuntimeFact fact, const VersionConstraint& c);

// Formats a validation error: "job.yaml:L:C: runtime.cuda: message" for YAML, "runtime.cuda:
// message" for JSON. job_spec.cc passes its own so every spec error reads the same.
using SpecErrorFn =
    std::function<Status(SpecPos pos, std::string_view field, std::string_view message)>;

// Validates the `runtime` value of a spec (a mapping; null = no contract). Unknown keys are
// errors with a suggestion, as elsewhere in the spec. `json`: the API form, where a version must
// be a string (a JSON number has lost its spelling: 3.10 arrives as 3.1); YAML keeps a number's
// spelling, so `python: 3.10` is "3.10" there.
Result<RuntimeContract> RuntimeContractFromSpec(const SpecValue& value, bool json,
                                                const SpecErrorFn& error);

// {"cuda": "12.1", "driver": ">=535", ...}: canonical texts, unset facts left out.
Json ToJson(const RuntimeContract& contract);

// The identity of the environment a spec asks for: the contract's canonical JSON (keys sorted,
// no whitespace, canonical values) and its SHA-256. Two specs that ask for the same runtime have
// the same fingerprint however their YAML is written; `printf '%s' JSON | sha256sum` checks it.
struct Fingerprint {
  std::string canonical_json;
  std::string sha256;  // lowercase hex of SHA-256(canonical_json)
};
Fingerprint EnvironmentFingerprint(const RuntimeContract& contract);

}  // namespace sluice::spec
