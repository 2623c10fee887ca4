#include "net/io_lag_probe.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>

namespace sluice::net_internal {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

IoLagProbe::IoLagProbe(boost::asio::io_context& ioc, std::chrono::milliseconds period)
    : timer_(ioc), period_(period) {}

void IoLagProbe::Start() { Arm(); }

void IoLagProbe::Stop() {
  boost::asio::post(timer_.get_executor(), [this] {
    due_ns_.store(0, std::memory_order_relaxed);
    timer_.cancel();
  });
}

void IoLagProbe::Arm() {
  const auto due = std::chrono::steady_clock::now() + period_;
  due_ns_.store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(due.time_since_epoch()).count(),
      std::memory_order_relaxed);
  timer_.expires_at(due);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;  // cancelled: stopping
    const int64_t due_ns = due_ns_.load(std::memory_order_relaxed);
    late_ns_.store(std::max<int64_t>(0, NowNs() - due_ns), std::memory_order_relaxed);
    Arm();
  });
}

std::chrono::milliseconds IoLagProbe::Lag() const {
  const int64_t due_ns = due_ns_.load(std::memory_order_relaxed);
  int64_t late = late_ns_.load(std::memory_order_relaxed);
  if (due_ns > 0) late = std::max(late, NowNs() - due_ns);
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::nanoseconds(late));
}

}  // namespace sluice::net_internal
