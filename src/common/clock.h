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
};

// The process's real clock. Thread-safe.
class RealClock final : public Clock {
 public:
  int64_t NowMillis() const override;
  int64_t MonotonicMillis() const override;
  static RealClock* Get();
};

// A clock that moves only when told. Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_millis = 1'700'000'000'000) : now_(start_millis) {}
  int64_t NowMillis() const override { return now_.load(); }
  int64_t MonotonicMillis() const override { return now_.load(); }
  void Advance(int64_t millis) { now_ += millis; }
  void Set(int64_t millis) { now_ = millis; }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace sluice
