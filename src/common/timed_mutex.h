// TimedMutex: a mutex that keeps a histogram of how long callers waited for it and how long
// each holder kept it. The server core serializes every request, agent message, placement pass
// and tick on one lock (docs/design-notes.md "Lock times"), so one slow holder (a commit behind
// a slow disk, a pass over a deep queue) is felt by everything waiting behind it; these two
// histograms are how an operator sees that, on /v1/metrics, before a heartbeat grace runs out.
//
// Times are read from a Clock (microseconds of its monotonic time), so tests drive them with
// FakeClock. The histograms are written only by the lock's holder, while it holds the lock (no
// two writers), and read from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"

namespace sluice {

// A histogram of durations with fixed bounds, for the Prometheus text format.
class DurationHistogram {
 public:
  // Upper bounds of the buckets, in microseconds; a last bucket holds the rest (+Inf).
  static constexpr std::array<int64_t, 11> kBoundsMicros = {
      100,     1'000,   5'000,     10'000,    25'000,    50'000,
      100'000, 250'000, 1'000'000, 5'000'000, 15'000'000};
  static constexpr size_t kBuckets = kBoundsMicros.size() + 1;

  struct Snapshot {
    std::array<uint64_t, kBuckets> buckets{};  // per bucket, not cumulative
    int64_t sum_micros = 0;
    uint64_t count() const;
    void Merge(const Snapshot& other);
  };

  // One writer at a time (the caller serializes them); readers may run beside it.
  void Add(int64_t micros);
  Snapshot Read() const;

 private:
  std::array<std::atomic<uint64_t>, kBuckets> buckets_{};
  std::atomic<int64_t> sum_micros_{0};
};

// Prometheus text exposition of one histogram: HELP, TYPE, then per series (a label such as
// `holder="tick"`, or none) its cumulative buckets in seconds, sum and count (the count is the
// buckets' total, so the two always agree).
std::string PrometheusHistogram(
    const char* name, const char* help,
    const std::vector<std::pair<std::string, DurationHistogram::Snapshot>>& series);

// Meets the standard Lockable requirements: std::lock_guard, std::unique_lock and
// std::condition_variable_any work with it. A condition variable's wait is an unlock and a lock,
// so a holder that waits on one is measured up to the wait and again from the wake.
//
// Holds are kept per holder: the owner names what may hold the lock, every lock() holds as the
// first name until the holder says what it is (HoldingFor), so the long holds can be told apart
// (a placement pass from a tick).
class TimedMutex {
 public:
  explicit TimedMutex(const Clock* clock, std::vector<std::string> holders = {"other"});
  TimedMutex(const TimedMutex&) = delete;
  TimedMutex& operator=(const TimedMutex&) = delete;

  void lock();
  // A successful try waited for nothing and records no wait; its hold is measured.
  bool try_lock();
  void unlock();

  // Called by the holder, with the lock held: this hold is counted as `holder` (an index into
  // the names); the next lock() starts as the first name again.
  void HoldingFor(size_t holder) { holder_ = holder < holds_.size() ? holder : 0; }

  DurationHistogram::Snapshot Waits() const { return waits_.Read(); }
  // Every holder's holds together, and one holder's.
  DurationHistogram::Snapshot Holds() const;
  DurationHistogram::Snapshot Holds(size_t holder) const { return holds_[holder]->Read(); }
  const std::vector<std::string>& holders() const { return names_; }

 private:
  const Clock* const clock_;
  const std::vector<std::string> names_;
  std::mutex mu_;
  int64_t held_since_micros_ = 0;  // written by the holder only
  size_t holder_ = 0;              // written by the holder only
  DurationHistogram waits_;
  std::vector<std::unique_ptr<DurationHistogram>> holds_;  // one per name
};

}  // namespace sluice
