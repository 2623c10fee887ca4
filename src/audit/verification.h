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
//   gpu-perf.N     matmul_mode, matmul_tflops, mismatches, mem_gb_s
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

#include <map>
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
  // gpu-perf.N against the model's spec (docs/design-notes.md, "GPU speed"): the lower of the
  // two ratios measured / spec (tensor TFLOPS, memory GB/s). Below the flag the GPU is flagged
  // and ranked by what it measured; below the floor it is not verified. The suite's own kernel
  // reaches less than a tuned cuBLAS GEMM (on Hopper mma.sync-class code tops out well below the
  // wgmma peak), so the flag sits at half the spec, not near it.
  double gpu_perf_flag_ratio = 0.5;
  double gpu_perf_floor_ratio = 0.25;
  // Above this a matrix-multiply figure is not believed (no GPU reaches 5 PFLOPS dense FP16);
  // it is then not used to rank the GPU.
  double max_gpu_tflops = 5000;
};

// What the spec says one GPU should do, for judging its gpu-perf check; 0 = no figure.
struct GpuSpecSpeed {
  std::string label;         // the GPU's label, for messages ("h100-80gb")
  double tensor_tflops = 0;  // dense FP16/BF16, FP32 accumulate
  double mem_gb_s = 0;
};

// What one GPU measured, as the server judged it.
struct GpuSpeed {
  int index = 0;
  int matmul_mode = 0;         // 1: FP16 tensor (FP32 accumulate); 2: FP32 FMA
  double measured_tflops = 0;  // in matmul_mode; 0 when not credible
  double measured_gb_s = 0;
  double spec_tflops = 0;  // 0: no spec figure
  double spec_gb_s = 0;
  double ratio = 0;      // lowest measured / spec that could be judged; 0 if none
  bool flagged = false;  // below gpu_perf_flag_ratio (and not failed)
  std::string note;      // why it is flagged, or ""
};

struct Verdict {
  bool verified = false;              // failures is empty
  std::vector<std::string> failures;  // one line each: the check, the measurement, the threshold
  std::vector<std::string> notes;     // facts worth showing that do not fail the node
  std::vector<std::string> usable_toolkits;      // inventory.cuda_toolkits the driver runs
  std::vector<std::string> usable_torch_builds;  // inventory.torch_builds the driver runs
  std::vector<GpuSpeed> gpu_speeds;              // one per GPU whose gpu-perf check could be read
};

// `specs` by GPU index; a GPU without an entry is judged on its results alone.
Verdict Evaluate(const Inventory& inv, const conformance::Report& report,
                 const VerificationRules& rules = {},
                 const std::map<int, GpuSpecSpeed>& specs = {});

}  // namespace sluice::audit
