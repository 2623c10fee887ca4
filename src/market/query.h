// The offer query language (issue 3, item 4): `sluice offers 'gpu=a100 gpus>=4 price<2.5'`.
//
// A query is whitespace-separated terms, all ANDed. A term is `FIELD OP VALUE` with OP one of
// `= != < <= > >=` (`==` is accepted as `=`), or `FIELD in [a,b]` / `FIELD notin [a,b]`. A
// value may be quoted with '...' or "..." to hold spaces, commas or brackets.
//
// Fields are typed (see FieldType) and have aliases (`ram` = `memory`, `spot_price` =
// `interruptible`, ...; QueryFieldNames() lists the canonical names). Semantics:
//   - Strings compare case-insensitively; `=`/`!=`/in/notin values may be globs (`*`, `?`).
//   - `gpu` values are resolved through ResolveGpuLabel at parse time: `gpu=a100` matches every
//     label a100 covers. A glob value (`gpu=a100*`) matches labels directly.
//   - Sizes (vram, memory, disk) are in GB; a value may carry a unit: GB/G/GiB (the same:
//     GPU memory is sold in binary GB, an "80GB" card reports 81920 MiB), MB/M/MiB (/1024),
//     TB/T/TiB (*1024). Prices may be written `$2.5`; reliability may be written `99%`.
//   - Versions (cc, driver, cuda, toolkit, torch, python) compare in version order like
//     sluice::CompareVersions (`535.104.05 > 535.86.05`). A value without `+` ignores a local
//     suffix on the offer's side, so `torch=2.1.0` matches the build `2.1.0+cu121`.
//   - `python` compares at the precision the value is written: the offer's version is cut to
//     as many dotted parts first, so `python=3.10` matches 3.10.12 (not 3.1.x or 3.11),
//     `python<=3.10` holds for 3.10.12 and `python>3.10` means 3.11 and later.
//   - List fields (toolkit, torch): `= < <= > >= in` hold when ANY element satisfies them;
//     `!=`/notin hold when NO element equals / is listed (the negation of `=`/in).
//   - Unknown values are like SQL NULL and satisfy no term, not even `!=`: an offer without
//     interruptible capacity (spot price 0) or with an unknown driver/cuda/cc (empty string).
//   - `gpus` is the number of GPUs available now (Offer::gpus_available), because that is
//     what a job can get.
//
// Errors are InvalidArgument messages that name the 1-based column of the offending token and
// end with the query and a caret line under that token.
//
// Thread safety: everything here is a pure function; a Query is immutable after parsing and
// may be evaluated from many threads at once.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "market/offer.h"

namespace sluice::market {

enum class Field {
  kGpu,        // gpu_label (label set)
  kModel,      // gpu_model
  kGpus,       // gpus_available
  kVram,       // vram_gb
  kPrice,      // price_per_gpu_hour
  kSpotPrice,  // interruptible_price_per_gpu_hour, 0 = not offered (NULL)
  kProvider,
  kNode,
  kRegion,
  kZone,
  kForm,  // form_factor
  kInterconnect,
  kCc,       // compute_capability
  kDriver,   // driver_version
  kCuda,     // cuda_version
  kToolkit,  // toolkits (any-of)
  kTorch,    // torch_builds (any-of)
  kPython,   // python_version, compared at the precision of the value
  kCpus,
  kMemory,  // memory_gb
  kDisk,    // disk_gb
  kReliability,
  kHealth,    // health_score
  kPerf,      // perf_score
  kVerified,  // verified | unverified | deverified
  kSource,    // agent | catalog
  kId,
};

enum class FieldType {
  kString,       // case-insensitive, globs on = != in notin
  kLabel,        // gpu: values resolved to canonical label sets
  kInt,          // whole numbers
  kNumber,       // doubles, units resolved at parse time
  kVersion,      // version order
  kVersionList,  // any-of over a list of versions
  kEnum,         // one of a fixed set of names
};

enum class Op { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

// One compiled term. Which members are meaningful depends on the field's type:
//   values  — always: the canonical value texts (lowercased strings, shortest-form numbers in
//             base units, gpu values as written, lowercased); one entry unless op is in/notin.
//   numbers — kInt/kNumber: the values as numbers in base units (GB, $/GPU-h, 0..1);
//             kEnum: the enum's integer value (static_cast<int>(VerifiedState/OfferSource)).
//   labels  — kLabel: sorted, deduplicated union of the canonical labels the non-glob values
//             cover (what the market index looks up).
//   glob    — some entry of `values` contains `*` or `?` and is matched as a pattern.
struct Term {
  Field field = Field::kGpu;
  Op op = Op::kEq;
  std::vector<std::string> values;
  std::vector<double> numbers;
  std::vector<std::string> labels;
  bool glob = false;
  int column = 0;  // 1-based column of the term in the query text; 0 when not parsed

  // Equal meaning; `column` is where it was written, not what it means, so it is ignored.
  bool operator==(const Term& o) const {
    return field == o.field && op == o.op && values == o.values && numbers == o.numbers &&
           labels == o.labels && glob == o.glob;
  }
};

// A compiled predicate: the conjunction of `terms`, in the order written.
struct Query {
  std::vector<Term> terms;

  bool operator==(const Query&) const = default;
};

Result<Query> ParseQuery(std::string_view text);

// One term built from a field, an operator and raw value texts (one unless op is in/notin),
// exactly as the parser would compile `field op value`: for callers that build queries from
// structured input (market/job_market.h). InvalidArgument naming the field on a bad value.
Result<Term> MakeTerm(Field field, Op op, const std::vector<std::string>& values);

// True when `offer` satisfies every term. An empty query matches everything.
bool Matches(const Query& query, const Offer& offer);
// True when `offer` satisfies this one term (for explanations: which term eliminated what).
bool MatchesTerm(const Term& term, const Offer& offer);

// The first term on `field` with operator `op`, or nullptr; for the index's access paths
// (the `gpu` label set, a `price<` bound, a `gpus>=` bound).
const Term* FindTerm(const Query& query, Field field, Op op);

// Canonical text form: `field op value` terms joined by single spaces, values quoted when
// needed. ParseQuery(ToString(q)) yields a Query equal to q.
std::string ToString(const Query& query);
std::string_view FieldName(Field field);  // canonical name, e.g. "spot_price"
std::string_view OpName(Op op);           // "=", "!=", ..., "in", "notin"
FieldType TypeOf(Field field);
// Canonical name or alias (case-insensitive) → field.
std::optional<Field> FieldFromName(std::string_view name);
// Canonical field names, sorted (aliases are not listed).
std::vector<std::string> QueryFieldNames();

// Which per-GPU price a job's budget bounds (the spec's lifecycle.capacity).
enum class PriceBasis {
  kOnDemand,       // `price<=`
  kInterruptible,  // `spot_price<=` (or `spot_price>0` without a budget): offers must sell it;
                   // CPU-only jobs get no term (spot_price is per GPU), the caller checks
  kEither,         // no price term: either price may apply, so the caller checks the budget
                   // against the price the ranking picks
};

// A job's resources compiled to the same predicate `sluice offers` uses, so the two can never
// disagree. `gpu_labels` may hold short forms (resolved as in the query; an unknown label is
// an InvalidArgument error with suggestions); empty = any GPU. `min_vram_gb`, `gpus`,
// `cpus`, `memory_gb` ≤ 0 add no term. `max_price_per_hour` is for the whole job; the per-GPU
// bound is max / gpus and is inclusive (`price<=`). CPU-only jobs (gpus ≤ 0) get no price term:
// offers are priced per GPU, so their budget is checked on the allocation price instead.
Result<Query> QueryFromResources(const std::vector<std::string>& gpu_labels,
                                 std::optional<double> min_vram_gb, int gpus, int cpus,
                                 double memory_gb, std::optional<double> max_price_per_hour,
                                 PriceBasis basis = PriceBasis::kOnDemand);

// Sort order for `-o price,-perf`: a comma-separated list of field names, `-` for descending
// (`+` or nothing for ascending). Only orderable fields (every type except the version lists).
struct SortKey {
  Field field = Field::kPrice;
  bool descending = false;

  bool operator==(const SortKey&) const = default;
};

Result<std::vector<SortKey>> ParseSortKeys(std::string_view text);

// Strict weak order over offers by `keys`, then by offer id ascending so results are
// deterministic. Unknown values (NULL, see above) sort last in either direction.
bool OfferLess(const std::vector<SortKey>& keys, const Offer& a, const Offer& b);

}  // namespace sluice::market
