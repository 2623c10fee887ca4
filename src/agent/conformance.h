// The agent's conformance suite (issue 5): measures what the machine really does and reports raw
// facts (common/conformance.h). The agent runs it at registration, on a schedule and on demand;
// the server re-evaluates every check with its own rules, so the outcomes set here are only the
// agent's reading ("the numbers look wrong"), never a verdict.
//
// Each check is independent (one failing never stops the others), bounded in time, and never
// crashes the agent: every expected failure becomes a `fail` or `skip` with a one-line reason.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agent/cuda_driver.h"
#include "agent/link_probe.h"
#include "common/clock.h"
#include "common/conformance.h"
#include "common/inventory.h"

namespace sluice {

struct ConformanceOptions {
  std::string trigger = "on-demand";  // "registration" | "schedule" | "on-demand"

  // cpu: each of the two compute loops (one thread, then one thread per CPU) runs this long.
  int cpu_budget_ms = 100;

  // memory: read from meminfo_path, then allocate, write and verify memory_mib (capped at half
  // of MemAvailable so the check cannot push the host into the OOM killer).
  std::string meminfo_path = "/proc/meminfo";
  uint64_t memory_mib = 256;
  int memory_timeout_ms = 30000;

  // disk: write disk_mib into a temporary file in disk_dir (the agent's data dir), fsync, read it
  // back and delete it. Empty disk_dir: the check is skipped.
  std::string disk_dir;
  uint64_t disk_mib = 64;
  int disk_timeout_ms = 60000;

  // gpu-memory.N / gpu-compute.N, through the CUDA driver loaded from cuda_library.
  std::string cuda_library = kDefaultCudaLibrary;
  uint64_t gpu_alloc_mib = 1024;      // capped at half of the device's free memory
  uint32_t gpu_elements = 16u << 20;  // kernel size (32-bit words); 2 buffers of 64 MiB
  int gpu_timeout_ms = 30000;         // for the kernel to finish
  // gpu-perf.N (gpu_perf.h): each of its two measurements (matrix multiply, device memory copy)
  // grows its work until one timed run lasts at least this long; the copy moves buffers of
  // gpu_alloc_mib / 4 (at most 256 MiB, at most a quarter of what is free).
  int gpu_perf_ms = 200;
};

// Runs every check and returns the report. `link` may be null (the link check is then skipped).
// `clock` stamps started_ms/duration_ms and enforces the per-check time limits; throughputs are
// measured with a sub-millisecond steady clock.
conformance::Report RunSuite(const ConformanceOptions& options, const Inventory& inventory,
                             LinkProbe* link, const Clock& clock);

// The individual checks, exposed for tests and for re-running one check on demand.
conformance::Check CheckCpu(const ConformanceOptions& options, const Inventory& inventory,
                            const Clock& clock);
conformance::Check CheckMemory(const ConformanceOptions& options, const Inventory& inventory,
                               const Clock& clock);
conformance::Check CheckDisk(const ConformanceOptions& options, const Clock& clock);
conformance::Check CheckLink(LinkProbe* link);
// gpu-memory.N, gpu-compute.N and gpu-perf.N for every GPU in the inventory, or one `gpu` skip
// without GPUs. driver-cuda (the driver supports the CUDA version it reports, per NVIDIA's table)
// and torch-cuda (each PyTorch build's CUDA tag runs on this driver): the agent's own reading for
// its log and the provider; the server judges the same facts from the inventory itself.
std::vector<conformance::Check> CheckCompatibility(const Inventory& inventory);
std::vector<conformance::Check> CheckGpus(const ConformanceOptions& options,
                                          const Inventory& inventory, const Clock& clock);

// The compute check's kernel, in PTX (ISA 6.0, sm_50: every driver since CUDA 9 JITs it for
// its GPU, Hopper included): out[i] = Fmix32(in[i] ^ seed) for i < n.
inline constexpr const char* kConformanceKernelName = "sluice_conformance_hash";
extern const char kConformanceKernelPtx[];
// The kernel's function, for host-side verification (MurmurHash3's 32-bit finaliser).
uint32_t ConformanceHash(uint32_t in, uint32_t seed);

}  // namespace sluice
