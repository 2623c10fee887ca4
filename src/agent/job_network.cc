#include "agent/job_network.h"

namespace sluice {

std::string JobNetworkRules::Chain() const { return "SLUICE-JOBS-" + std::to_string(first_uid); }

namespace {

// One family's commands: `tool` is iptables or ip6tables, `metadata` the metadata address.
std::string FamilyInstall(const JobNetworkRules& r, const std::string& tool,
                          const std::string& metadata) {
  const std::string t = tool + " -w ";
  const std::string c = r.Chain();
  const std::string owner =
      "-m owner --uid-owner " + std::to_string(r.first_uid) + "-" + std::to_string(r.last_uid);
  std::string s = "{ " + t + "-N " + c + " 2>/dev/null || true; } && " + t + "-F " + c + " && " +
                  t + "-A " + c + " -d " + metadata + " -j REJECT";
  for (int port : r.local_ports) {
    s += " && " + t + "-A " + c + " -o lo -p tcp --dport " + std::to_string(port) +
         " -j REJECT --reject-with tcp-reset";
  }
  s += " && { " + t + "-C OUTPUT " + owner + " -j " + c + " 2>/dev/null || " + t + "-I OUTPUT " +
       owner + " -j " + c + "; }";
  return s;
}

std::string FamilyRemove(const JobNetworkRules& r, const std::string& tool) {
  const std::string t = tool + " -w ";
  const std::string c = r.Chain();
  const std::string owner =
      "-m owner --uid-owner " + std::to_string(r.first_uid) + "-" + std::to_string(r.last_uid);
  return "while " + t + "-D OUTPUT " + owner + " -j " + c + " 2>/dev/null; do :; done; " + t +
         "-F " + c + " 2>/dev/null; " + t + "-X " + c + " 2>/dev/null; true";
}

}  // namespace

std::string InstallScript(const JobNetworkRules& rules) {
  // IPv6 where the host has it; a host without ip6tables support still gets the IPv4 rules.
  return "set -o pipefail; " + FamilyInstall(rules, "iptables", "169.254.169.254/32") +
         " && { ! ip6tables -w -L -n >/dev/null 2>&1 || { " +
         FamilyInstall(rules, "ip6tables", "fd00:ec2::254/128") + "; }; }";
}

std::string RemoveScript(const JobNetworkRules& rules) {
  return FamilyRemove(rules, "iptables") + "; " + FamilyRemove(rules, "ip6tables");
}

}  // namespace sluice
