#include "common/timed_mutex.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace sluice {

uint64_t DurationHistogram::Snapshot::count() const {
  uint64_t n = 0;
  for (uint64_t b : buckets) n += b;
  return n;
}

void DurationHistogram::Snapshot::Merge(const Snapshot& other) {
  for (size_t i = 0; i < kBuckets; ++i) buckets[i] += other.buckets[i];
  sum_micros += other.sum_micros;
}

void DurationHistogram::Add(int64_t micros) {
  micros = std::max<int64_t>(micros, 0);  // a clock that stepped back counts as no time
  const size_t i = static_cast<size_t>(
      std::lower_bound(kBoundsMicros.begin(), kBoundsMicros.end(), micros) - kBoundsMicros.begin());
  // One writer at a time: a plain read and write, atomic only so that readers see whole values.
  buckets_[i].store(buckets_[i].load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  sum_micros_.store(sum_micros_.load(std::memory_order_relaxed) + micros,
                    std::memory_order_relaxed);
}

DurationHistogram::Snapshot DurationHistogram::Read() const {
  Snapshot s;
  for (size_t i = 0; i < kBuckets; ++i) s.buckets[i] = buckets_[i].load(std::memory_order_relaxed);
  s.sum_micros = sum_micros_.load(std::memory_order_relaxed);
  return s;
}

namespace {

std::string Seconds(int64_t micros) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", static_cast<double>(micros) / 1e6);
  return buf;
}

}  // namespace

std::string PrometheusHistogram(
    const char* name, const char* help,
    const std::vector<std::pair<std::string, DurationHistogram::Snapshot>>& series) {
  const std::string n = name;
  std::string out = "# HELP " + n + " " + help + "\n# TYPE " + n + " histogram\n";
  for (const auto& [label, s] : series) {
    const std::string braces = label.empty() ? "" : "{" + label + "}";
    const std::string prefix = label.empty() ? "{" : "{" + label + ",";
    uint64_t cumulative = 0;
    for (size_t i = 0; i < DurationHistogram::kBuckets; ++i) {
      cumulative += s.buckets[i];
      const std::string le = i < DurationHistogram::kBoundsMicros.size()
                                 ? Seconds(DurationHistogram::kBoundsMicros[i])
                                 : std::string("+Inf");
      out += n + "_bucket" + prefix + "le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
    }
    out += n + "_sum" + braces + " " + Seconds(s.sum_micros) + "\n";
    out += n + "_count" + braces + " " + std::to_string(cumulative) + "\n";
  }
  return out;
}

TimedMutex::TimedMutex(const Clock* clock, std::vector<std::string> holders)
    : clock_(clock), names_(holders.empty() ? std::vector<std::string>{"other"} : holders) {
  for (size_t i = 0; i < names_.size(); ++i) {
    holds_.push_back(std::make_unique<DurationHistogram>());
  }
}

DurationHistogram::Snapshot TimedMutex::Holds() const {
  DurationHistogram::Snapshot all;
  for (const auto& h : holds_) all.Merge(h->Read());
  return all;
}

void TimedMutex::lock() {
  const int64_t asked = clock_->MonotonicMicros();
  mu_.lock();
  held_since_micros_ = clock_->MonotonicMicros();
  waits_.Add(held_since_micros_ - asked);
}

bool TimedMutex::try_lock() {
  if (!mu_.try_lock()) return false;
  held_since_micros_ = clock_->MonotonicMicros();
  return true;
}

void TimedMutex::unlock() {
  holds_[holder_]->Add(clock_->MonotonicMicros() - held_since_micros_);
  holder_ = 0;
  mu_.unlock();
}

}  // namespace sluice
