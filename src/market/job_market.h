// How a job spec becomes a market request: the query its resources compile to, the workload the
// cost model estimates and the objective it is ranked by. `sluice offers`, `sluice estimate`,
// submission and the scheduler all go through here, so they can never disagree.
#pragma once

#include <optional>

#include "common/status.h"
#include "market/query.h"
#include "market/ranking.h"
#include "spec/job_spec.h"

namespace sluice::market {

// The work assumed when neither the spec (`expected_hours`) nor the caller says.
inline constexpr double kDefaultExpectedHours = 1.0;

struct MarketRequest {
  market::Query query;
  market::Workload work;
  market::Objective objective = market::Objective::kCost;
  std::optional<double> max_price_per_hour;  // the whole job's budget
  bool hours_assumed = false;                // work.hours is kDefaultExpectedHours
};

// The spec's runtime contract as offer-query terms, one per fact, in the order cuda, driver,
// torch, python, so an explanation names the fact an offer lacks (`driver>=535 rules out 3`):
//   cuda "12.1"          → cuda>=12.1          (operators as written: cuda=12.1, cuda<12.4)
//   driver ">=535"       → driver>=535         (every operator as written)
//   driver "535.104"     → driver in [535.104,535.104.*]   (bare or `=`: a prefix on dotted
//                                                           parts)
//   torch "2.1.0+cu121"  → torch=2.1.0+cu121   (bare "2.1.0" matches any 2.1.0+local build)
//   python "3.10"        → python=3.10         (at the precision written: 3.10.12 matches)
// InvalidArgument naming runtime.<fact> should a value not compile (the spec parser already
// rejects what would not).
Result<market::Query> CompileRuntime(const spec::RuntimeContract& runtime);

// `hours` overrides the spec's expected_hours (`sluice estimate --hours`), `objective` the
// spec's objective. An unknown GPU label is an InvalidArgument error naming resources.gpu, with
// suggestions. The query is the resources' terms followed by CompileRuntime's.
Result<MarketRequest> CompileJob(const spec::JobSpec& spec, std::optional<double> hours = {},
                                 std::optional<market::Objective> objective = {});

}  // namespace sluice::market
