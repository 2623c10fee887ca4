// What a sandboxed job may not reach over the network (issue 11 item 3; docs/design-notes.md
// "Job sandbox"). Jobs share the host's network (a training job downloads data, and a later
// multi-node job must reach its peers on their real addresses), so the filter is in the host's
// netfilter, keyed on the jobs' uids, which only sandboxed jobs have:
//   - the cloud instance-metadata address (169.254.169.254, fd00:ec2::254), which hands out the
//     provider's cloud credentials;
//   - the given TCP ports on this machine (the server's, when it runs here; the agent itself
//     listens on none), whatever local address is used (all local traffic leaves through `lo`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace sluice {

struct JobNetworkRules {
  int64_t first_uid = 0;  // the jobs' uid range, inclusive
  int64_t last_uid = 0;
  std::vector<int> local_ports;  // TCP ports on this machine jobs may not connect to
  std::string Chain() const;     // "SLUICE-JOBS-<first_uid>": one per agent uid range
};

// The iptables and ip6tables commands that install the rules, as one bash script: idempotent
// (a restarted agent replaces its chain's rules), `iptables -w` so concurrent agents wait.
std::string InstallScript(const JobNetworkRules& rules);
// Removes the chain and the OUTPUT rule that jumps to it.
std::string RemoveScript(const JobNetworkRules& rules);

}  // namespace sluice
