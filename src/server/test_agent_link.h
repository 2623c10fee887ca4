// Test helper: an AgentLink that records what the server would send to an agent, so tests drive
// the agent channel through ServerCore without a WebSocket.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "common/json.h"
#include "server/server_core.h"

namespace sluice::server::testing {

class RecordingLink : public AgentLink {
 public:
  // Send may come from the core's scheduler thread while a test reads: both lock.
  void Send(const Json& m) override {
    std::lock_guard<std::mutex> lock(mu);
    sent.push_back(m);
  }
  void Close() override { closed = true; }
  std::vector<Json> OfType(const std::string& type) const {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<Json> out;
    for (const auto& m : sent) {
      if (m.value("type", "") == type) out.push_back(m);
    }
    return out;
  }
  // `field` of the newest message of `type`, or "".
  std::string Last(const std::string& type, const std::string& field) const {
    std::lock_guard<std::mutex> lock(mu);
    for (auto it = sent.rbegin(); it != sent.rend(); ++it) {
      if (it->value("type", "") == type) return it->value(field, "");
    }
    return "";
  }
  // The newest `reverify` request's nonce, which a conformance report must echo.
  std::string Nonce() const { return Last("reverify", "nonce"); }
  mutable std::mutex mu;
  std::vector<Json> sent;  // read directly only where no scheduler thread runs
  bool closed = false;
};

}  // namespace sluice::server::testing
