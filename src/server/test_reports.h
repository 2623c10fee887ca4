// Test helper: the conformance report a healthy machine with `inv` would send, measurement by
// measurement within audit::VerificationRules' defaults, so tests can get a node verified the
// way a real agent does (by reporting), not by poking its state.
#pragma once

#include <string>

#include "common/agent_protocol.h"
#include "common/conformance.h"
#include "common/inventory.h"

namespace sluice::server::testing {

// What a 4-CPU, 8 GiB machine's agent says at hello (no prices: a test adds what it needs).
inline proto::Hello CpuHello(const std::string& name) {
  proto::Hello h;
  h.name = name;
  h.inventory.hostname = name;
  h.inventory.cpu_cores = 4;
  h.inventory.memory_mib = 8192;
  h.inventory.gpu_source = "none";
  return h;
}

inline conformance::Report PassingReport(const Inventory& inv) {
  using conformance::Check;
  using conformance::Outcome;
  conformance::Report r;
  r.trigger = "registration";
  r.started_ms = 1;
  r.duration_ms = 100;
  r.checks.push_back(
      Check{"cpu", Outcome::kPass, {{"cores", inv.cpu_cores}, {"ops_per_s", 1e9}}, "measured"});
  double mem = static_cast<double>(inv.memory_mib);
  r.checks.push_back(Check{
      "memory",
      Outcome::kPass,
      {{"total_mib", mem}, {"available_mib", mem / 2}, {"touched_mib", 256}, {"touch_mib_s", 4000}},
      "measured"});
  r.checks.push_back(
      Check{"disk",
            Outcome::kPass,
            {{"write_mib_s", 500}, {"fsync_ms", 2}, {"read_mib_s", 900}, {"free_mib", 100000}},
            "measured"});
  r.checks.push_back(
      Check{"link",
            Outcome::kPass,
            {{"rtt_ms", 0.3}, {"rtt_max_ms", 1}, {"download_mib_s", 800}, {"upload_mib_s", 700}},
            "measured"});
  for (const auto& g : inv.gpus) {
    std::string n = std::to_string(g.index);
    r.checks.push_back(Check{"gpu-memory." + n,
                             Outcome::kPass,
                             {{"total_mib", static_cast<double>(g.memory_mib)},
                              {"allocated_mib", 1024},
                              {"h2d_gib_s", 12}},
                             "measured"});
    r.checks.push_back(Check{"gpu-compute." + n,
                             Outcome::kPass,
                             {{"elements", 1 << 24}, {"kernel_ms", 3}, {"mismatches", 0}},
                             "measured"});
    // Above every spec in data/gpu_specs.csv, so no GPU is flagged unless a test says so.
    r.checks.push_back(
        Check{"gpu-perf." + n,
              Outcome::kPass,
              {{"matmul_mode", 1}, {"matmul_tflops", 2500}, {"mismatches", 0}, {"mem_gb_s", 10000}},
              "measured"});
  }
  return r;
}

}  // namespace sluice::server::testing
