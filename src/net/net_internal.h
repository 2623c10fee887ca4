// Helpers shared by the transport's .cc files; not part of the public interface.
#pragma once

#include <cstdint>
#include <string>

namespace sluice::net_internal {

// "1.2.3.4:80" or "[::1]:80".
inline std::string FormatEndpoint(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

}  // namespace sluice::net_internal
