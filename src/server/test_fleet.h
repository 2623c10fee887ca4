// Test and bench support: nodes enrolled and jobs started the way agents do it, through the
// core's own calls (hello, the conformance report the server asks for, `started`). Test-only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/server_core.h"
#include "server/test_agent_link.h"
#include "server/test_reports.h"

namespace sluice::server::testing {

// Hello, then, when the server asks for one (a node verified and unchanged is not asked), the
// conformance report that gets it verified. Returns the node's id.
inline Result<std::string> EnrolNode(ServerCore& core, const std::shared_ptr<RecordingLink>& link,
                                     const proto::Hello& h) {
  auto node = core.AgentHello(link, h);
  if (!node.ok() || link->Nonce().empty()) return node;
  Status s = core.AgentMessage(*node, link.get(),
                               Json{{"type", "conformance"},
                                    {"report", conformance::ToJson(PassingReport(h.inventory))},
                                    {"nonce", link->Nonce()}});
  if (!s.ok()) return s;
  return node;
}

// The attempts assigned on `link` since the last call, oldest first; what the link recorded is
// dropped (a bench's 60,000 assignments kept would measure the link, not the core).
inline std::vector<std::string> TakeAssigned(RecordingLink& link) {
  std::lock_guard<std::mutex> lock(link.mu);
  std::vector<std::string> out;
  for (const auto& m : link.sent) {
    if (m.value("type", "") == "assign") out.push_back(m.value("attempt_id", ""));
  }
  link.sent.clear();
  return out;
}

}  // namespace sluice::server::testing
