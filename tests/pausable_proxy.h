// A TCP proxy on loopback that a test can pause: a network partition between an agent and its
// server without touching either process. While paused, connections stay open (and new ones
// are accepted) but no byte moves in either direction, as when a link silently drops packets.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sluice::testing {

class PausableProxy {
 public:
  // Listens on 127.0.0.1:0 and forwards every connection to 127.0.0.1:target_port.
  explicit PausableProxy(uint16_t target_port);
  ~PausableProxy();
  PausableProxy(const PausableProxy&) = delete;
  PausableProxy& operator=(const PausableProxy&) = delete;

  uint16_t port() const { return port_; }
  void Pause() { paused_ = true; }
  void Resume() { paused_ = false; }
  // Closes every connection open now (the link healed, but the peers must reconnect: as after a
  // NAT or a load balancer forgot them). Later connections are untouched.
  void Sever() { ++severed_before_; }

 private:
  void AcceptLoop();
  void Pump(int client, int server, int generation);

  uint16_t target_port_;
  uint16_t port_ = 0;
  int listen_fd_ = -1;
  std::atomic<bool> paused_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<int> severed_before_{0};  // connections of an older generation are closed
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> pumps_;  // guarded by mu_
};

}  // namespace sluice::testing
