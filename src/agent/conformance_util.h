// Helpers shared by the conformance checks (conformance.cc, gpu_checks.cc): timing, check
// construction, seeds and patterns. Internal to the agent.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <system_error>

#include "common/clock.h"
#include "common/conformance.h"

namespace sluice::conformance_internal {

using conformance::Check;
using conformance::Outcome;

inline constexpr uint64_t kMiB = uint64_t{1} << 20;

// Throughputs need sub-millisecond resolution, which the Clock (whole milliseconds) lacks. Only
// measurements use this; every time limit a check enforces reads the Clock.
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double Millis() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
        .count();
  }
  double Seconds() const { return std::max(Millis(), 0.001) / 1000.0; }

 private:
  std::chrono::steady_clock::time_point start_;
};

class Deadline {
 public:
  Deadline(const Clock& clock, int budget_ms)
      : clock_(clock), end_(clock.MonotonicMillis() + std::max(budget_ms, 0)), ms_(budget_ms) {}
  bool Passed() const { return clock_.MonotonicMillis() >= end_; }
  std::string Text() const { return "did not finish within " + std::to_string(ms_) + " ms"; }

 private:
  const Clock& clock_;
  int64_t end_;
  int ms_;
};

inline Check Make(std::string_view name) {
  Check c;
  c.name = std::string(name);
  return c;
}

inline Check& Set(Check& c, Outcome o, std::string reason) {
  c.outcome = o;
  c.reason = std::move(reason);
  return c;
}

inline std::string Fixed(double v, int decimals = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

inline std::string ErrnoText(int err) { return std::generic_category().message(err); }

// A seed that changes every run, so a result cannot be canned in advance.
inline uint64_t RunSeed(const Clock& clock) {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(clock.NowMillis());
}

inline uint64_t PatternWord(uint64_t index, uint64_t seed) {
  return (index * 0x9e3779b97f4a7c15ull) ^ seed;
}

// Turns anything thrown below (std::bad_alloc, std::system_error) into a failed check, so one
// check can never take the suite or the agent down with it.
inline Check Guarded(std::string_view name, const std::function<Check()>& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    Check c = Make(name);
    return Set(c, Outcome::kFail, std::string("internal error: ") + e.what());
  } catch (...) {
    Check c = Make(name);
    return Set(c, Outcome::kFail, "internal error");
  }
}

}  // namespace sluice::conformance_internal
