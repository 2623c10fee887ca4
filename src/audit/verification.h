// The server's verdict on a conformance report (issue 5 item 3). Pure: no clock, no I/O.
//
// The agent's suite measures; the server decides. Evaluate never reads a check's outcome as
// evidence of success: every required check is re-judged from its raw measurements against
// VerificationRules, so an agent that says "pass" over a bad number fails, and one that omits a
// check fails with "check `disk` missing from the report". (A check the agent marked "skip" is
// not run, whatever numbers it carries, so it fails too.)
//
// Required checks: cpu, memory, disk, link, and for every GPU in the inventory gpu-memory.<index>
// and gpu-compute.<index>. A CPU-only inventory needs no GPU checks. Measurement keys (the unit
// is in the key):
//   cpu            cores, ops_per_s
//   memory         total_mib, available_mib, touched_mib, touch_mib_s
//   disk           write_mib_s, fsync_ms, read_mib_s, free_mib
//   link           rtt_ms, rtt_max_ms, download_mib_s, upload_mib_s
//   gpu-memory.N   total_mib, allocated_mib, h2d_gib_s
//   gpu-compute.N  elements, kernel_ms, mismatches
// The report must also agree with the probe it was measured beside: cpu.cores equals
// inventory.cpu_cores, memory.total_mib is within 2% of inventory.memory_mib, and each
// gpu-memory.N total within 5% of that GPU's memory_mib.
//
// Compatibility (audit/compat.h) comes from the inventory: the driver must natively support the
// CUDA version it reports itself (a contradiction fails the node; a CUDA version the table does
// not list, such as 12.7 from the 565 drivers, is noted, not failed). Installed toolkits and
// torch builds the driver cannot run do not fail the node: they are left out of
// usable_toolkits / usable_torch_builds with a note saying why.
#pragma once

#include <string>
#include <vector>

#include "common/conformance.h"
#include "common/inventory.h"

namespace sluice::audit {

// Thresholds. The defaults reject a broken or misreported machine, not a slow one: a 2-core CI
// VM on shared disks passes with a wide margin. Operators who sell premium tiers raise them.
struct VerificationRules {
  double min_cpu_ops_per_s = 1000;     // the suite's benchmark ran and did real work
  double min_memory_touched_mib = 64;  // the suite actually wrote this much memory
  // Low on purpose: the check proves the memory is there and holds data; a sanitizer build on a
  // loaded 2-core CI machine touches memory at tens of MiB/s.
  double min_memory_touch_mib_s = 10;
  double max_memory_total_skew = 0.02;  // memory.total_mib vs inventory.memory_mib
  double min_disk_write_mib_s = 20;
  double min_disk_read_mib_s = 20;
  double max_disk_fsync_ms = 1000;  // one fsync; network disks take tens of ms, broken ones s
  double min_disk_free_mib = 1024;
  double max_link_rtt_ms = 500;
  double max_link_rtt_max_ms = 2000;  // worst of the samples
  double min_link_download_mib_s = 1;
  double min_link_upload_mib_s = 1;
  double min_gpu_allocated_mib = 1;   // > 0: a device allocation succeeded
  double max_gpu_memory_skew = 0.05;  // gpu-memory.N total_mib vs the GPU's memory_mib
  double min_gpu_h2d_gib_s = 0.25;    // a PCIe x1 riser passes; a link that is not there does not
  double min_gpu_elements = 1;        // gpu-compute computed something...
  double max_gpu_mismatches = 0;      // ...and every element it checked was right
  double max_gpu_kernel_ms = 60000;
};

struct Verdict {
  bool verified = false;              // failures is empty
  std::vector<std::string> failures;  // one line each: the check, the measurement, the threshold
  std::vector<std::string> notes;     // facts worth showing that do not fail the node
  std::vector<std::string> usable_toolkits;      // inventory.cuda_toolkits the driver runs
  std::vector<std::string> usable_torch_builds;  // inventory.torch_builds the driver runs
};

Verdict Evaluate(const Inventory& inv, const conformance::Report& report,
                 const VerificationRules& rules = {});

}  // namespace sluice::audit
