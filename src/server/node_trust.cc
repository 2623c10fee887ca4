#include "server/node_trust.h"

#include <map>
#include <set>

#include "audit/fingerprint.h"
#include "common/crypto.h"
#include "market/gpu_identity.h"
#include "market/gpu_labels.h"
#include "market/perf.h"

namespace sluice::server {
namespace {

std::string Short(const std::string& digest) { return digest.substr(0, 12); }

// One line naming the software facts that differ, so a provider sees why re-verification runs.
std::string SoftwareChange(const Inventory& a, const Inventory& b) {
  std::string out;
  auto add = [&](const char* name, const std::string& from, const std::string& to) {
    if (from == to) return;
    if (!out.empty()) out += ", ";
    out += std::string(name) + " " + (from.empty() ? "none" : from) + " -> " +
           (to.empty() ? "none" : to);
  };
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : "+") + x;
    return s;
  };
  add("driver", a.driver_version, b.driver_version);
  add("cuda", a.cuda_version, b.cuda_version);
  add("toolkits", join(a.cuda_toolkits), join(b.cuda_toolkits));
  add("python", a.python_version, b.python_version);
  add("torch", join(a.torch_builds), join(b.torch_builds));
  add("container runtimes", join(a.container_runtimes), join(b.container_runtimes));
  return out;
}

}  // namespace

Status CheckClaims(const std::vector<proto::GpuClaim>& claims, const Inventory& probed) {
  std::map<std::string, int> found;
  for (const auto& g : probed.gpus) found[market::IdentifyGpu(g).label]++;
  for (const auto& c : claims) {
    int have = found.count(c.label) ? found[c.label] : 0;
    if (have >= c.count) continue;
    std::string probe;
    for (const auto& [label, n] : found) {
      probe += (probe.empty() ? "" : ", ") + std::to_string(n) + " x " + label;
    }
    return Status::FailedPrecondition(
        "claim rejected: the node advertises " + std::to_string(c.count) + " x " + c.label +
        " but its probe shows " + std::to_string(have) +
        " (probe found: " + (probe.empty() ? "no GPUs" : probe) +
        "); offers come from the probe, so remove --advertise-gpu or fix the hardware");
  }
  return Status::Ok();
}

HelloTrust ApplyHelloTrust(store::NodeRecord& node, const Inventory& previous,
                           const Inventory& probed) {
  HelloTrust out;
  std::string hw = audit::HardwareFingerprint(probed).sha256;
  std::string sw = audit::SoftwareFingerprint(probed).sha256;
  bool first = node.hardware_fingerprint.empty() && node.software_fingerprint.empty();
  if (!first && hw != node.hardware_fingerprint) {
    out.what = "hardware changed (fingerprint " + Short(node.hardware_fingerprint) + " -> " +
               Short(hw) + ")";
  }
  if (!first && sw != node.software_fingerprint) {
    std::string change = SoftwareChange(previous, probed);
    if (!out.what.empty()) out.what += "; ";
    out.what +=
        "software changed (" +
        (change.empty() ? "fingerprint " + Short(node.software_fingerprint) + " -> " + Short(sw)
                        : change) +
        ")";
  }
  out.changed = !out.what.empty();
  node.hardware_fingerprint = hw;
  node.software_fingerprint = sw;
  if (out.changed) {
    if (node.verification == kVerified) node.verification = std::string(kDeverified);
    node.verification_reasons =
        Json::array({out.what + "; offers withdrawn until it passes again"});
  } else if (first) {
    node.verification = std::string(kUnverified);
    node.verification_reasons = Json::array({"waiting for the first conformance report"});
  }
  return out;
}

audit::Verdict JudgeReport(const Inventory& inv, const conformance::Report& report,
                           const audit::VerificationRules& rules) {
  std::map<int, audit::GpuSpecSpeed> specs;
  for (const GpuInfo& g : inv.gpus) {
    const market::GpuIdentity id = market::IdentifyGpu(g);
    const market::SpecSpeed spec = market::SpecSpeedOf(id.label, id.form_factor);
    specs[g.index] = {id.label, spec.tensor_tflops, spec.mem_gb_s};
  }
  audit::Verdict v = audit::Evaluate(inv, report, rules, specs);
  // A label the registry does not know still sells, but no user can ask for it by name: say so
  // (issue 13 item 1), once per label.
  static const std::set<std::string>* const kKnown = [] {
    auto labels = market::KnownGpuLabels();
    return new std::set<std::string>(labels.begin(), labels.end());
  }();
  std::set<std::string> noted;
  for (const GpuInfo& g : inv.gpus) {
    const market::GpuIdentity id = market::IdentifyGpu(g);
    if (kKnown->count(id.label) || !noted.insert(id.label).second) continue;
    std::string nearest;
    for (const auto& n : market::NearestGpuLabels(id.label)) {
      nearest += (nearest.empty() ? "" : ", ") + n;
    }
    v.notes.push_back("GPU " + std::to_string(g.index) + " is labelled " + id.label + " (from " +
                      id.named_from + " \"" + id.name +
                      "\"), a label the registry does not know: jobs cannot ask for it by name, "
                      "only by vram, cc and the like" +
                      (nearest.empty() ? "" : " (nearest known: " + nearest + ")"));
  }
  return v;
}

audit::Verdict ApplyReport(store::NodeRecord& node, const Inventory& inv,
                           const conformance::Report& report, const audit::VerificationRules& rules,
                           int64_t now_ms) {
  audit::Verdict v = JudgeReport(inv, report, rules);
  bool was_verified = node.verification == kVerified;
  if (v.verified) {
    node.verification = std::string(kVerified);
  } else {
    node.verification =
        std::string(was_verified || node.verification == kDeverified ? kDeverified : kUnverified);
  }
  Json reasons = Json::array();
  for (const auto& f : v.failures) reasons.push_back(f);
  for (const auto& n : v.notes) reasons.push_back("note: " + n);
  node.verification_reasons = reasons;
  node.verified_ms = now_ms;
  node.conformance = ToJson(report);
  return v;
}

store::NodeSnapshot Snapshot(const store::NodeRecord& node) {
  Json j{{"node_id", node.id},
         {"node_name", node.name},
         {"region", node.region},
         {"inventory", node.inventory},
         {"hardware_fingerprint", node.hardware_fingerprint},
         {"software_fingerprint", node.software_fingerprint},
         {"verification", node.verification},
         {"verification_reasons", node.verification_reasons},
         {"verified_ms", node.verified_ms},
         {"conformance", node.conformance}};
  store::NodeSnapshot s;
  s.json = DumpJson(j);
  s.digest = Sha256Hex(s.json);
  return s;
}

}  // namespace sluice::server
