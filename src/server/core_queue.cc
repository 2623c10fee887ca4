// The queue as placement reads it: each queued job's scheduler request, its group in the
// QueueIndex, and when an interruptible job may fall back to on-demand capacity. Members of
// ServerCore.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "ledger/metering.h"
#include "sched/requeue_policy.h"
#include "server/core_internal.h"
#include "server/server_core.h"

namespace sluice::server {

using namespace core;  // NOLINT: the core's own helpers (core_internal.h)

sched::JobRequest ServerCore::MakeRequestLocked(const std::string& id, const JobState& js,
                                                int64_t spent) const {
  const bool fallback =
      js.spec.lifecycle.capacity == spec::Capacity::kInterruptibleThenOnDemand && js.fell_back;
  sched::JobRequest r;
  r.job_id = id;
  r.priority = js.record.priority;
  r.order = js.order;
  r.gpus = js.spec.resources.gpus;
  r.cpus = js.spec.resources.cpus;
  r.memory_gb = js.spec.resources.memory_gb;
  r.query = js.market.query;
  r.max_price_per_hour = js.market.max_price_per_hour;
  r.work = js.market.work;
  r.objective = js.market.objective;
  if (js.spec.lifecycle.capacity == spec::Capacity::kInterruptibleThenOnDemand) {
    r.work.fallback_on_demand = fallback;
  }
  // The budget left changes as the job is charged; a job resuming from a checkpoint needs only
  // room to run a while and stop safely (its remaining work is unknown).
  if (const auto budget = BudgetMicros(js.spec)) {
    r.budget_left = static_cast<double>(std::max<int64_t>(0, *budget - spent)) / 1e6;
    if (!js.record.checkpoint.empty()) {
      const int64_t min_s = std::max<int64_t>(js.spec.lifecycle.checkpoint_interval_s.value_or(600),
                                              2 * options_.budget_margin_ms / 1000);
      r.budget_min_hours = static_cast<double>(min_s) / 3600;
    }
    // The stop's reserve: the grace period (and the check's margin) in hours of the price, and
    // the final checkpoint's upload.
    r.budget_reserve_hours =
        static_cast<double>(js.spec.lifecycle.grace_period_s * 1000 + options_.budget_margin_ms) /
        3.6e6;
    r.budget_reserve = static_cast<double>(ledger::TransferCharge(
                           static_cast<int64_t>(js.spec.lifecycle.checkpoint_size_gb * 1e9),
                           ledger::PricePerHourMicros(options_.transfer_price_per_gb))) /
                       1e6;
  }
  if (!fallback) r.bid = js.spec.lifecycle.max_bid_per_hour;  // on-demand is sold at its price
  r.shape = sched::ShapeKey(r);
  return r;
}

std::shared_ptr<const sched::JobRequest> ServerCore::RequestLocked(const std::string& id,
                                                                   const JobState& js) const {
  const bool fallback =
      js.spec.lifecycle.capacity == spec::Capacity::kInterruptibleThenOnDemand && js.fell_back;
  const auto budget = BudgetMicros(js.spec);
  const int64_t spent = budget ? charges_.Budgeted(id) : 0;
  const double left = budget ? static_cast<double>(std::max<int64_t>(0, *budget - spent)) / 1e6 : 0;
  // Rebuilt when an input that changes while a job is queued did: fell_back, the budget left,
  // a checkpoint saved (MakeRequestLocked).
  if (!js.request || js.request->work.fallback_on_demand != fallback ||
      js.request->budget_left.has_value() != budget.has_value() ||
      js.request->budget_left.value_or(0) != left ||
      js.request->budget_min_hours.has_value() != (budget && !js.record.checkpoint.empty())) {
    js.request = std::make_shared<sched::JobRequest>(MakeRequestLocked(id, js, spent));
  }
  auto avoid = avoid_.find(id);
  if (avoid == avoid_.end()) return js.request;
  // Cooldowns change by the second: a copy for this pass, never cached, searched on its own.
  auto r = std::make_shared<sched::JobRequest>(*js.request);
  r->shape.reset();
  for (const auto& [node, until] : avoid->second) {
    if (until > clock_->MonotonicMillis()) r->avoid_nodes.push_back(node);
  }
  return r;
}

std::string ServerCore::QueueGroupLocked(const std::string& id, const JobState& js) const {
  // A budget left changes as the job is charged, outside any change to the job.
  if (js.spec.max_total_cost) return "";
  RequestLocked(id, js);  // its cached request, without a cooldown's copy
  if (!js.request || !js.request->shape || js.request->shape->empty()) return "";
  // Everything the pass's answer and its wording read besides the shape.
  const auto& lc = js.spec.lifecycle;
  std::string wording = "-";
  if (lc.capacity == spec::Capacity::kInterruptibleThenOnDemand && !js.fell_back) {
    wording =
        std::to_string(lc.fallback_after_preemptions) + "," + std::to_string(lc.fallback_after_s);
  }
  return js.record.owner + '\n' + js.record.team + '\n' + wording + '\n' + *js.request->shape;
}

std::pair<std::string_view, bool> ServerCore::ReasonOfLocked(const std::string& id) const {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return {std::string_view(), false};
  return {it->second.record.reason, it->second.never_fits};
}

void ServerCore::CheckQueueIndexLocked() const {
  if (queue_index_.size() != queued_.size()) {
    std::fprintf(stderr, "queue index: %zu jobs, %zu queued\n", queue_index_.size(),
                 queued_.size());
    std::abort();
  }
  for (const auto& [id, js] : queued_) {
    if (!queue_index_.Has(id)) {
      std::fprintf(stderr, "queue index: queued job %s is not filed\n", id.c_str());
      std::abort();
    }
  }
  for (const auto& [key, group] : queue_index_.groups()) {
    for (const auto& [order, member] : group.members) {
      auto job = queued_.find(member.id);
      if (job == queued_.end() || member.job != job->second) {
        std::fprintf(stderr, "queue index: job %s's handle is out of date\n", member.id.c_str());
        std::abort();
      }
    }
  }
  if (auto astray =
          queue_index_.FirstAstray([this](const std::string& id) { return ReasonOfLocked(id); })) {
    std::fprintf(stderr, "queue index: job %s does not hold its group's answer\n", astray->c_str());
    std::abort();
  }
}

std::string ServerCore::FallbackReasonLocked(const JobState& js) const {
  const auto& lc = js.spec.lifecycle;
  sched::FallbackRule rule{lc.capacity == spec::Capacity::kInterruptibleThenOnDemand,
                           lc.fallback_after_preemptions, lc.fallback_after_s * 1000};
  return sched::FallbackReason(rule, js.record.preemptions,
                               clock_->MonotonicMillis() - js.queued_since_mono);
}

}  // namespace sluice::server
