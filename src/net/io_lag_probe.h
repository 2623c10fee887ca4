// How late an io_context runs what is ready: a timer due every `period` notes how long after it
// was due its handler ran. The server's io threads read what agents send; when they fall behind
// (starved of CPU on a busy or stalled host, or flooded), a heartbeat is read that much after it
// arrived, and the node loss rules must not hold that delay against the node
// (docs/design-notes.md "Read lag").
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>

namespace sluice::net_internal {

class IoLagProbe {
 public:
  IoLagProbe(boost::asio::io_context& ioc, std::chrono::milliseconds period);

  // Arms the first timer; each one arms the next when it runs. Call once, before or after the
  // io threads start.
  void Start();
  // Cancels the pending timer (on the io context: safe from any thread).
  void Stop();
  // The lateness of the last timer that ran, or of the one due and not yet run if that is more:
  // a stall shows while it lasts, not only once it ends. Any thread.
  std::chrono::milliseconds Lag() const;

 private:
  void Arm();

  boost::asio::steady_timer timer_;
  const std::chrono::milliseconds period_;
  std::atomic<int64_t> due_ns_{0};   // steady_clock: when the pending timer is due (0: none)
  std::atomic<int64_t> late_ns_{0};  // how late the last timer ran
};

}  // namespace sluice::net_internal
