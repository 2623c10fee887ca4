// Test helpers for net_test: a raw loopback socket (to send bytes no well-behaved client would)
// and a one-shot latch with a deadline. Plain POSIX so tests do not pay for Beast compile time.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

namespace sluice::testing {

class RawSocket {
 public:
  // `source`: the local IPv4 address to connect from (any of 127.0.0.0/8 works on loopback),
  // so tests can play several clients; empty: the kernel's choice.
  explicit RawSocket(uint16_t port, const std::string& source = "") {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (!source.empty()) {
      sockaddr_in local{};
      local.sin_family = AF_INET;
      ::inet_pton(AF_INET, source.c_str(), &local.sin_addr);
      if (::bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) return;
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~RawSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }

  bool Write(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }

  // Reads until the peer closes, `until` appears, or the deadline passes.
  std::string Read(std::chrono::milliseconds deadline, const std::string& until = "") {
    std::string out;
    auto end = std::chrono::steady_clock::now() + deadline;
    for (;;) {
      if (!until.empty() && out.find(until) != std::string::npos) return out;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return out;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return out;
      char buf[4096];
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) {
        peer_closed_ = true;
        return out;
      }
      out.append(buf, static_cast<size_t>(n));
    }
  }
  // True when the peer closed (or reset) the connection within the deadline.
  bool WaitClosed(std::chrono::milliseconds deadline) {
    Read(deadline);
    return peer_closed_;
  }
  bool peer_closed() const { return peer_closed_; }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool peer_closed_ = false;
};

// Polls `cond` every few milliseconds until it holds (true) or `deadline` passes (false).
template <typename Cond>
bool WaitFor(Cond cond, std::chrono::milliseconds deadline) {
  auto end = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    if (cond()) return true;
    if (std::chrono::steady_clock::now() >= end) return false;
    ::usleep(5000);
  }
}

// Set once; waited on with a deadline.
class Latch {
 public:
  void Set() {
    std::lock_guard<std::mutex> lock(mu_);
    set_ = true;
    cv_.notify_all();
  }
  bool Wait(std::chrono::milliseconds deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, deadline, [&] { return set_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool set_ = false;
};

}  // namespace sluice::testing
