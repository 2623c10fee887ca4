#include "sched/requeue_policy.h"

namespace sluice::sched {

RequeueDecision AfterAttempt(AttemptEnd end, bool cancel_requested, int restarts, int max_restarts,
                             int64_t now_ms, int64_t cooldown_ms) {
  RequeueDecision d;
  const bool not_its_fault = end == AttemptEnd::kLost || end == AttemptEnd::kPreempted;
  if (!not_its_fault || cancel_requested) return d;
  if (restarts >= max_restarts) {
    d.exhausted = true;
    return d;
  }
  d.requeue = true;
  d.avoid_until = now_ms + cooldown_ms;
  return d;
}

std::string FallbackReason(const FallbackRule& rule, int preemptions, int64_t waited_ms) {
  if (!rule.applies) return "";
  if (preemptions >= rule.after_preemptions) {
    return "preempted " + std::to_string(preemptions) + " times (fallback_after_preemptions " +
           std::to_string(rule.after_preemptions) + ")";
  }
  if (waited_ms >= rule.after_ms) {
    return "no interruptible capacity for " + std::to_string(rule.after_ms / 1000) +
           "s (fallback_after)";
  }
  return "";
}

}  // namespace sluice::sched
