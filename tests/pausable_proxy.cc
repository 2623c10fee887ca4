#include "pausable_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>

namespace sluice::testing {

PausableProxy::PausableProxy(uint16_t target_port) : target_port_(target_port) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      ::listen(listen_fd_, 64) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw std::runtime_error("proxy: cannot listen on loopback");
  }
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

PausableProxy::~PausableProxy() {
  stopping_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  acceptor_.join();
  ::close(listen_fd_);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& t : pumps_) t.join();
}

void PausableProxy::AcceptLoop() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(target_port_);
    if (server < 0 || ::connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(client);
      if (server >= 0) ::close(server);
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    pumps_.emplace_back([this, client, server, generation = severed_before_.load()] {
      Pump(client, server, generation);
    });
  }
}

// Both directions on one thread; while paused nothing is read, so nothing is forwarded.
void PausableProxy::Pump(int client, int server, int generation) {
  char buf[16384];
  bool open = true;
  while (open && !stopping_ && generation >= severed_before_) {
    if (paused_) {
      ::usleep(20 * 1000);
      continue;
    }
    pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
    if (::poll(p, 2, 50) <= 0) continue;
    for (int i = 0; i < 2 && open; ++i) {
      if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::read(p[i].fd, buf, sizeof buf);
      if (n <= 0) {
        open = false;
        break;
      }
      int to = i == 0 ? server : client;
      for (ssize_t off = 0; off < n;) {
        ssize_t w = ::write(to, buf + off, static_cast<size_t>(n - off));
        if (w <= 0) {
          open = false;
          break;
        }
        off += w;
      }
    }
  }
  ::close(client);
  ::close(server);
}

}  // namespace sluice::testing
