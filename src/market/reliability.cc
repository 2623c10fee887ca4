#include "market/reliability.h"

#include <algorithm>
#include <cstdio>

namespace sluice::market {

Reliability ComputeReliability(const ReliabilityInputs& in) {
  Reliability r;
  r.inputs = in;
  r.uptime = in.window_ms > 0
                 ? std::clamp(static_cast<double>(in.online_ms) / in.window_ms, 0.0, 1.0)
                 : 1.0;
  int s = std::max(in.starts, 0);
  int f = std::clamp(in.start_failures, 0, s);
  int p = std::clamp(in.preemptions, 0, s);
  r.start_success = static_cast<double>(s - f + 1) / (s + 1);
  r.preemption_free = static_cast<double>(s - p + 1) / (s + 1);
  r.score = r.uptime * r.start_success * r.preemption_free;
  return r;
}

std::string Explain(const Reliability& r) {
  char buf[256];
  const auto& in = r.inputs;
  std::snprintf(buf, sizeof buf,
                "%.2f = uptime %.1f%% x starts %d/%d ok x %d/%d not preempted (%.1f-day window)",
                r.score, r.uptime * 100, in.starts - in.start_failures, in.starts,
                in.starts - in.preemptions, in.starts, in.window_ms / 86400000.0);
  return buf;
}

Json ToJson(const Reliability& r) {
  return Json{{"score", r.score},
              {"uptime", r.uptime},
              {"start_success", r.start_success},
              {"preemption_free", r.preemption_free},
              {"window_ms", r.inputs.window_ms},
              {"online_ms", r.inputs.online_ms},
              {"starts", r.inputs.starts},
              {"start_failures", r.inputs.start_failures},
              {"preemptions", r.inputs.preemptions},
              {"explain", Explain(r)}};
}

}  // namespace sluice::market
