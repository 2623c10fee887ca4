// gpu-perf.N: how fast one GPU really computes (issue 13 item 3). Labels come from the probe;
// this check is what stops a throttled, power-capped or counterfeit GPU from selling at its
// label's speed. Two timed measurements, each verified element by element, so hardware (or a
// driver) that answers fast but wrong fails instead of looking fast:
//
//  - a matrix multiply: FP16 inputs with FP32 accumulate on the tensor cores, the mode
//    mixed-precision training uses and the mode of the spec figures in data/gpu_specs.csv
//    (docs/design-notes.md, "GPU speed"). The suite's own PTX (wmma, ISA 6.3, sm_70 and later),
//    so the agent needs neither a CUDA toolkit nor cuBLAS. Each warp keeps its tiles in
//    registers and runs eight independent accumulators, so the figure is the tensor cores'
//    throughput, not the memory system's. GPUs before Volta have no tensor cores and run an
//    FP32 FMA kernel instead (matmul_mode says which).
//  - a device-to-device copy (cuMemcpyDtoD), counted as bytes read plus bytes written per
//    second, the way vendors quote memory bandwidth.
//
// Each measurement grows its work until one timed run lasts ConformanceOptions::gpu_perf_ms
// (times come from CUDA events, i.e. the GPU's own clock). Inputs are drawn from a fresh seed
// every run and every result is integer-valued and below 2^24, so FP32 holds it exactly and the
// agent checks every element. The agent reports; the server judges the figures against the
// model's spec (audit/verification.h).
//
// Measurements: matmul_mode (1: FP16 tensor, FP32 accumulate; 2: FP32 FMA), matmul_tflops,
// matmul_ms, matmul_flops, mismatches, mem_gb_s (10^9 bytes/s), mem_ms, mem_copy_mib.
#pragma once

#include <string>

#include "agent/conformance.h"

namespace sluice {

inline constexpr const char* kPerfTensorKernelName = "sluice_perf_wmma";
inline constexpr const char* kPerfFmaKernelName = "sluice_perf_fma";

// Launch geometry, shared with the fake CUDA driver (fake_cuda/), which plays these kernels.
inline constexpr unsigned int kPerfBlockThreads = 128;  // four warps
inline constexpr unsigned int kPerfBlocksPerSm = 8;
inline constexpr int kPerfTensorAccumulators = 8;  // independent 16x16 FP32 tiles per warp
inline constexpr int kPerfFmaChains = 8;           // independent FMA chains per thread...
inline constexpr int kPerfFmaUnroll = 4;           // ...each advanced this often per iteration

enum class PerfMode : int { kTensorFp16 = 1, kFp32Fma = 2 };

// sluice_perf_wmma(u64 a, u64 b, u64 out, u32 iters): a is a 16x16 FP16 tile (row-major), b
// one in column-major order; every warp computes D_k = A·B + D_k for k < 8, `iters` times, and
// stores the sum of its eight tiles (row-major FP32) at out + warp * 1 KiB. Each element is
// 8 · iters · (A·B)[i][j].
const std::string& PerfTensorPtx();
// sluice_perf_fma(u64 out, u32 iters, f32 a, f32 b): every thread runs eight chains
// x_j = j, then x_j = fma(x_j, a, b) four times per iteration, and stores the sum of the eight
// at out + thread * 4. With a = 1 each thread stores 28 + 32 · iters · b.
const std::string& PerfFmaPtx();

struct PerfOutcome {
  conformance::Check check;
  bool hung = false;  // a kernel or copy outlived gpu_timeout_ms; the context must be leaked
};

// Runs gpu-perf.<gpu.index> on `dev`, in the caller's current context.
PerfOutcome GpuPerf(const CudaDriver& cuda, const GpuInfo& gpu, const CudaDevice& dev,
                    const ConformanceOptions& options, const Clock& clock);

}  // namespace sluice
