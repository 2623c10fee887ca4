// What happens to a job after one of its attempts ends, and when an interruptible job may fall
// back to on-demand capacity (issue 12 item 2: scheduling policy lives in sched/ and is pure;
// DESIGN.md §6, §7). No I/O, no clock: the caller passes the times.
#pragma once

#include <cstdint>
#include <string>

namespace sluice::sched {

// How an attempt ended, as far as its job is concerned.
enum class AttemptEnd {
  kSucceeded,
  kFailed,     // the job's own fault (a non-zero exit, a signal, out of memory, a failed start)
  kCancelled,  // the user cancelled the job
  kLost,       // its node went away
  kPreempted,  // its capacity was taken back
};

struct RequeueDecision {
  bool requeue = false;     // run it again elsewhere, from its last complete checkpoint
  bool exhausted = false;   // it would have been requeued, but its restarts are used up
  int64_t avoid_until = 0;  // with requeue: the node it ran on is avoided until then (ms)
};

// Capacity that went away under a job (lost, preempted) is not its fault: it runs again, unless
// the user asked to cancel it or its `max_restarts` are used up. `restarts` is how many it had
// so far; `now_ms` and `cooldown_ms` give how long it avoids the node it left.
RequeueDecision AfterAttempt(AttemptEnd end, bool cancel_requested, int restarts, int max_restarts,
                             int64_t now_ms, int64_t cooldown_ms);

// An interruptible-then-on-demand job's fallback rule (spec `lifecycle`).
struct FallbackRule {
  bool applies = false;  // the job's capacity is interruptible-then-on-demand
  int after_preemptions = 2;
  int64_t after_ms = 600000;
};
// Why the job may use on-demand capacity now (preempted often enough, or waited long enough for
// interruptible capacity), or "" when not (yet).
std::string FallbackReason(const FallbackRule& rule, int preemptions, int64_t waited_ms);

}  // namespace sluice::sched
