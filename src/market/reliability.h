// Reliability score of an agent node (issue 5 item 5), published so providers can see how it is
// computed and what to improve. Pure: the server gathers the inputs from its store.
//
//   window    the last 30 days, or since the node registered if that is later
//   uptime    U = time online (connected, heartbeating) ÷ window length
//   starts    S = attempts placed on the node in the window
//   failed    F = of those, attempts that never started (start failures)
//   preempted P = of those, attempts that started and ended preempted or lost with the node
//   score     R = U × (S − F + 1)/(S + 1) × (S − P + 1)/(S + 1)
//
// The +1s (Laplace smoothing) keep a new node at 1 rather than dividing by zero, and let one bad
// start on a node with little history count less than on a node with much.
#pragma once

#include <cstdint>
#include <string>

#include "common/json.h"

namespace sluice::market {

inline constexpr int64_t kReliabilityWindowMs = 30LL * 24 * 3600 * 1000;

struct ReliabilityInputs {
  int64_t window_ms = 0;  // length of the window actually observed (> 0)
  int64_t online_ms = 0;  // time online within it
  int starts = 0;
  int start_failures = 0;
  int preemptions = 0;
};

struct Reliability {
  double score = 1;  // 0..1
  double uptime = 1;
  double start_success = 1;    // (S − F + 1)/(S + 1)
  double preemption_free = 1;  // (S − P + 1)/(S + 1)
  ReliabilityInputs inputs;
};

Reliability ComputeReliability(const ReliabilityInputs& in);

// "0.93 = uptime 97.0% × starts 9/10 ok × 10/10 not preempted (30d window)".
std::string Explain(const Reliability& r);
Json ToJson(const Reliability& r);

}  // namespace sluice::market
