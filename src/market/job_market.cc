#include "market/job_market.h"

#include "market/gpu_labels.h"

namespace sluice::market {
namespace {

market::Op QueryOp(spec::VersionOp op) {
  switch (op) {
    case spec::VersionOp::kEq:
      return market::Op::kEq;
    case spec::VersionOp::kGe:
      return market::Op::kGe;
    case spec::VersionOp::kGt:
      return market::Op::kGt;
    case spec::VersionOp::kLe:
      return market::Op::kLe;
    case spec::VersionOp::kLt:
      return market::Op::kLt;
  }
  return market::Op::kEq;
}

market::Field QueryField(spec::RuntimeFact fact) {
  switch (fact) {
    case spec::RuntimeFact::kCuda:
      return market::Field::kCuda;
    case spec::RuntimeFact::kDriver:
      return market::Field::kDriver;
    case spec::RuntimeFact::kTorch:
      return market::Field::kTorch;
    case spec::RuntimeFact::kPython:
      return market::Field::kPython;
  }
  return market::Field::kCuda;
}

}  // namespace

Result<market::Query> CompileRuntime(const spec::RuntimeContract& runtime) {
  market::Query q;
  for (spec::RuntimeFact fact : spec::kRuntimeFacts) {
    const auto& c = runtime.Get(fact);
    if (!c) continue;
    market::Op op = QueryOp(c->op);
    std::vector<std::string> values = {c->version};
    if (fact == spec::RuntimeFact::kDriver && op == market::Op::kEq) {
      // The query's `driver=535.104` is exact (535.104.0); the contract's is the 535.104
      // series, which the version itself and the pattern for its longer forms cover.
      op = market::Op::kIn;
      values.push_back(c->version + ".*");
    }
    auto term = market::MakeTerm(QueryField(fact), op, values);
    if (!term.ok()) {
      return Status::InvalidArgument("runtime." + std::string(spec::Name(fact)) + ": " +
                                     term.status().message());
    }
    q.terms.push_back(*std::move(term));
  }
  return q;
}

Result<MarketRequest> CompileJob(const spec::JobSpec& spec, std::optional<double> hours,
                                 std::optional<market::Objective> objective) {
  MarketRequest req;
  const auto& res = spec.resources;
  std::vector<std::string> labels;
  if (!res.gpu.empty()) {
    auto resolved = market::ResolveGpuLabel(res.gpu);
    if (!resolved.ok()) {
      return Status::InvalidArgument("resources.gpu: " + resolved.status().message());
    }
    labels = resolved->labels;
  }
  market::PriceBasis basis = market::PriceBasis::kOnDemand;
  switch (spec.lifecycle.capacity) {
    case spec::Capacity::kOnDemand:
      break;
    case spec::Capacity::kInterruptible:
      basis = market::PriceBasis::kInterruptible;
      req.work.interruptible = true;
      break;
    case spec::Capacity::kInterruptibleThenOnDemand:
      basis = market::PriceBasis::kEither;
      req.work.interruptible = true;
      req.work.fallback_on_demand = true;
      break;
  }
  // The spec's defaults (1 CPU, 1 GB) add no condition: every machine has that much, and a
  // catalog row that does not list CPUs or memory must not be ruled out by a default the user
  // never wrote. The scheduler still accounts for them on the node.
  const int cpus = res.cpus > spec::Resources{}.cpus ? res.cpus : 0;
  const double memory_gb = res.memory_gb > spec::Resources{}.memory_gb ? res.memory_gb : 0;
  SLUICE_ASSIGN_OR_RETURN(
      req.query, market::QueryFromResources(labels, res.min_vram_gb, res.gpus, cpus, memory_gb,
                                            spec.max_price_per_hour, basis));
  SLUICE_ASSIGN_OR_RETURN(market::Query runtime, CompileRuntime(spec.runtime));
  for (auto& t : runtime.terms) req.query.terms.push_back(std::move(t));
  req.work.gpus = res.gpus;
  req.work.cpus = res.cpus;
  if (hours) {
    req.work.hours = *hours;
  } else if (spec.expected_hours) {
    req.work.hours = *spec.expected_hours;
  } else {
    req.work.hours = kDefaultExpectedHours;
    req.hours_assumed = true;
  }
  if (spec.lifecycle.checkpoint_interval_s) {
    req.work.checkpoint_interval_hours = *spec.lifecycle.checkpoint_interval_s / 3600.0;
  }
  req.work.checkpoint_size_gb = spec.lifecycle.checkpoint_size_gb;
  if (objective) {
    req.objective = *objective;
  } else if (!spec.objective.empty()) {
    auto named = market::ObjectiveFromName(spec.objective);
    if (!named) return Status::InvalidArgument("objective: expected cost, time or price");
    req.objective = *named;
  }
  req.max_price_per_hour = spec.max_price_per_hour;
  return req;
}

}  // namespace sluice::market
