// Clock: the one seam for time. Logic that times out (heartbeat grace, cancel grace) reads a
// Clock so tests can drive it with FakeClock instead of sleeping.
#pragma once

#include <atomic>
#include <cstdint>

namespace sluice {

class Clock {
 public:
  virtual ~Clock() = default;
  // Milliseconds since the Unix epoch (wall time; used for timestamps shown to people).
  virtual int64_t NowMillis() const = 0;
  // Milliseconds on a monotonic clock (used for timeouts and latency).
  virtual int64_t MonotonicMillis() const = 0;
  // The same monotonic clock in microseconds, for durations shorter than a millisecond (how long
  // a lock was held). A clock without the resolution answers in whole milliseconds.
  virtual int64_t MonotonicMicros() const { return MonotonicMillis() * 1000; }
};

// The process's real clock. Thread-safe.
class RealClock final : public Clock {
 public:
  int64_t NowMillis() const override;
  int64_t MonotonicMillis() const override;
  int64_t MonotonicMicros() const override;
  static RealClock* Get();
};

// A clock that moves only when told. Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_millis = 1'700'000'000'000) : now_(start_millis) {}
  int64_t NowMillis() const override { return now_.load(); }
  int64_t MonotonicMillis() const override { return now_.load(); }
  // Counted: only timers read it (the core's lock, common/timed_mutex.h), so a test can see
  // that a thread has asked for a lock before it lets the holder go. The count moves only after
  // the time is read: a test that sees it move and then advances the clock cannot have its
  // advance land in the read it waited for (CI once saw exactly that race under ASan).
  int64_t MonotonicMicros() const override {
    const int64_t micros = now_.load() * 1000;
    ++micros_reads_;
    return micros;
  }
  void Advance(int64_t millis) { now_ += millis; }
  void Set(int64_t millis) { now_ = millis; }
  int64_t micros_reads() const { return micros_reads_.load(); }

 private:
  std::atomic<int64_t> now_;
  mutable std::atomic<int64_t> micros_reads_{0};
};

}  // namespace sluice
