// What the benches time with: milliseconds of a steady-clock duration, and the median of a
// run's samples. Header-only, bench-only.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace sluice::bench {

inline double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// The upper median (the middle sample, or the higher of the two middle ones); 0 when empty.
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace sluice::bench
