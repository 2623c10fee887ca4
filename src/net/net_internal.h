// Helpers shared by the transport's .cc files; not part of the public interface.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/system/error_code.hpp>
#include <cstdint>
#include <string>

namespace sluice::net_internal {

// "1.2.3.4:80" or "[::1]:80".
inline std::string FormatEndpoint(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

// Runs one asynchronous operation to completion on the calling thread, for the synchronous
// clients: `start(done)` begins it; the stream's expiry turns a hang into a timeout error.
template <typename Start>
boost::system::error_code RunToCompletion(boost::asio::io_context& ioc, Start&& start) {
  boost::system::error_code result;
  ioc.restart();
  start([&result](boost::system::error_code ec, auto&&...) { result = ec; });
  ioc.run();
  return result;
}

}  // namespace sluice::net_internal
