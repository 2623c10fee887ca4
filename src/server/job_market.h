// How a job spec becomes a market request: the query its resources compile to, the workload the
// cost model estimates and the objective it is ranked by. `sluice offers`, `sluice estimate`,
// submission and the scheduler all go through here, so they can never disagree.
#pragma once

#include <optional>

#include "common/status.h"
#include "market/query.h"
#include "market/ranking.h"
#include "spec/job_spec.h"

namespace sluice::server {

// The work assumed when neither the spec (`expected_hours`) nor the caller says.
inline constexpr double kDefaultExpectedHours = 1.0;

struct MarketRequest {
  market::Query query;
  market::Workload work;
  market::Objective objective = market::Objective::kCost;
  std::optional<double> max_price_per_hour;  // the whole job's budget
  bool hours_assumed = false;                // work.hours is kDefaultExpectedHours
};

// `hours` overrides the spec's expected_hours (`sluice estimate --hours`), `objective` the
// spec's objective. An unknown GPU label is an InvalidArgument error naming resources.gpu, with
// suggestions.
Result<MarketRequest> CompileJob(const spec::JobSpec& spec, std::optional<double> hours = {},
                                 std::optional<market::Objective> objective = {});

}  // namespace sluice::server
