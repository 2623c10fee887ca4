// gpu-perf.N (gpu_perf.h): the suite's timed matrix multiply and memory copy on one GPU.
#include "agent/gpu_perf.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "agent/conformance_util.h"
#include "agent/cuda_handles.h"

namespace sluice {

using conformance::Check;
using conformance::Outcome;
using namespace conformance_internal;

namespace {

// FP32 holds every integer below 2^24 exactly; every result the kernels produce stays below it.
constexpr double kExactLimit = 16777215;
constexpr double kTileFlops = 2.0 * 16 * 16 * 16;  // one m16n16k16 multiply-accumulate

std::string Regs(const char* prefix, int first, int count) {
  std::string out = "{";
  for (int i = 0; i < count; ++i) {
    if (i > 0) out += ", ";
    out += prefix + std::to_string(first + i);
  }
  return out + "}";
}

// The pieces both speed kernels share: a counted loop over `%r1` iterations (the kernel's
// `iters` parameter; none when it is 0) and the launch's global thread index in %r6.
constexpr const char* kLoopHead =
    "\tmov.u32 %r2, 0;\n\tsetp.eq.u32 %p1, %r1, 0;\n\t@%p1 bra DONE;\nLOOP:\n";
constexpr const char* kLoopTail =
    "\tadd.u32 %r2, %r2, 1;\n\tsetp.lt.u32 %p1, %r2, %r1;\n\t@%p1 bra LOOP;\nDONE:\n";
constexpr const char* kThreadIndex = R"(	mov.u32 %r3, %ctaid.x;
	mov.u32 %r4, %ntid.x;
	mov.u32 %r5, %tid.x;
	mad.lo.s32 %r6, %r3, %r4, %r5;
)";

// A float literal as PTX writes one: 0f and the IEEE bits in hex.
std::string PtxFloat(float v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0f%08X", std::bit_cast<uint32_t>(v));
  return buf;
}

// ISA 6.3 (CUDA 10.0): `wmma...sync.aligned` needs it; an H200's driver rejected 6.0 with
// "Feature '.aligned modifier for wmma' requires PTX ISA .version 6.3 or later".
// Generated rather than typed: eight accumulators of eight registers each are 64 names, and a
// typo in one would only show on a GPU.
std::string BuildTensorPtx() {
  std::string p = R"(.version 6.3
.target sm_70
.address_size 64

.visible .entry sluice_perf_wmma(
	.param .u64 p_a,
	.param .u64 p_b,
	.param .u64 p_out,
	.param .u32 p_iters
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<8>;
	.reg .b32 %ha<8>;
	.reg .b32 %hb<8>;
	.reg .f32 %f<64>;

	ld.param.u64 %rd1, [p_a];
	ld.param.u64 %rd2, [p_b];
	ld.param.u64 %rd3, [p_out];
	ld.param.u32 %r1, [p_iters];
	cvta.to.global.u64 %rd1, %rd1;
	cvta.to.global.u64 %rd2, %rd2;
	cvta.to.global.u64 %rd3, %rd3;
)";
  p += "\twmma.load.a.sync.aligned.row.m16n16k16.global.f16 " + Regs("%ha", 0, 8) +
       ", [%rd1], 16;\n";
  p += "\twmma.load.b.sync.aligned.col.m16n16k16.global.f16 " + Regs("%hb", 0, 8) +
       ", [%rd2], 16;\n";
  for (int i = 0; i < 8 * kPerfTensorAccumulators; ++i) {
    p += "\tmov.f32 %f" + std::to_string(i) + ", " + PtxFloat(0) + ";\n";
  }
  p += kLoopHead;
  for (int k = 0; k < kPerfTensorAccumulators; ++k) {
    const std::string acc = Regs("%f", 8 * k, 8);
    p += "\twmma.mma.sync.aligned.row.col.m16n16k16.f32.f32 " + acc + ", " + Regs("%ha", 0, 8) +
         ", " + Regs("%hb", 0, 8) + ", " + acc + ";\n";
  }
  p += kLoopTail;
  for (int k = 1; k < kPerfTensorAccumulators; ++k) {
    for (int e = 0; e < 8; ++e) {
      p += "\tadd.f32 %f" + std::to_string(e) + ", %f" + std::to_string(e) + ", %f" +
           std::to_string(8 * k + e) + ";\n";
    }
  }
  p += kThreadIndex;
  p += R"(	shr.u32 %r6, %r6, 5;
	mul.wide.u32 %rd4, %r6, 1024;
	add.s64 %rd5, %rd3, %rd4;
)";
  p += "\twmma.store.d.sync.aligned.row.m16n16k16.global.f32 [%rd5], " + Regs("%f", 0, 8) +
       ", 16;\n\tret;\n}\n";
  return p;
}

std::string BuildFmaPtx() {
  std::string p = R"(.version 6.0
.target sm_50
.address_size 64

.visible .entry sluice_perf_fma(
	.param .u64 p_out,
	.param .u32 p_iters,
	.param .f32 p_a,
	.param .f32 p_b
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<4>;
	.reg .f32 %f<10>;

	ld.param.u64 %rd1, [p_out];
	ld.param.u32 %r1, [p_iters];
	ld.param.f32 %f8, [p_a];
	ld.param.f32 %f9, [p_b];
)";
  for (int j = 0; j < kPerfFmaChains; ++j) {
    p += "\tmov.f32 %f" + std::to_string(j) + ", " + PtxFloat(static_cast<float>(j)) + ";\n";
  }
  p += kLoopHead;
  for (int u = 0; u < kPerfFmaUnroll; ++u) {
    for (int j = 0; j < kPerfFmaChains; ++j) {
      const std::string x = "%f" + std::to_string(j);
      p += "\tfma.rn.f32 " + x + ", " + x + ", %f8, %f9;\n";
    }
  }
  p += kLoopTail;
  for (int j = 1; j < kPerfFmaChains; ++j)
    p += "\tadd.f32 %f0, %f0, %f" + std::to_string(j) + ";\n";
  p += kThreadIndex;
  p += R"(	cvta.to.global.u64 %rd2, %rd1;
	mul.wide.u32 %rd3, %r6, 4;
	add.s64 %rd2, %rd2, %rd3;
	st.global.f32 [%rd2], %f0;
	ret;
}
)";
  return p;
}

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint16_t Half(int v) { return v > 0 ? 0x3C00 : v < 0 ? 0xBC00 : 0; }  // 1.0, -1.0, 0.0

// One timed kernel or copy run: its GPU time, or why it has none.
struct Timed {
  Status status;
  double ms = 0;
  bool hung = false;
};

// The kernel's module, function and launch; shared by both matrix-multiply modes.
class PerfKernel {
 public:
  explicit PerfKernel(const CudaDriver& cuda) : cuda_(cuda), start_(cuda), stop_(cuda) {}
  ~PerfKernel() {
    if (module_ != nullptr) cuda_.api().module_unload(module_);
  }
  PerfKernel(const PerfKernel&) = delete;
  PerfKernel& operator=(const PerfKernel&) = delete;

  Status Load(const std::string& ptx, const char* name) {
    char log[4096] = {};
    CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void* values[] = {log, reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof log))};
    if (Status s =
            cuda_.Check(cuda_.api().module_load_data_ex(&module_, ptx.c_str(), 2, opts, values),
                        "cuModuleLoadDataEx");
        !s.ok()) {
      module_ = nullptr;
      log[sizeof log - 1] = '\0';
      std::string first(log, strnlen(log, sizeof log));
      if (auto nl = first.find('\n'); nl != std::string::npos) first.resize(nl);
      return Status::Internal(s.message() + (first.empty() ? "" : ": " + first));
    }
    if (Status s = cuda_.Check(cuda_.api().module_get_function(&fn_, module_, name),
                               "cuModuleGetFunction");
        !s.ok()) {
      return s;
    }
    if (Status s = start_.Create(); !s.ok()) return s;
    return stop_.Create();
  }

  // Launches `grid` blocks and waits for them within `deadline`.
  Timed Run(unsigned int grid, void** params, const Deadline& deadline) {
    Timed t;
    const CudaApi& api = cuda_.api();
    t.status = cuda_.Check(api.event_record(start_.event, nullptr), "cuEventRecord");
    if (t.status.ok()) {
      t.status = cuda_.Check(
          api.launch_kernel(fn_, grid, 1, 1, kPerfBlockThreads, 1, 1, 0, nullptr, params, nullptr),
          "cuLaunchKernel");
    }
    if (t.status.ok()) {
      t.status = cuda_.Check(api.event_record(stop_.event, nullptr), "cuEventRecord");
    }
    if (t.status.ok()) t.status = WaitForEvent(cuda_, stop_.event, deadline, &t.hung);
    if (t.hung) Leak();
    if (!t.status.ok()) return t;
    float ms = 0;
    t.status =
        cuda_.Check(api.event_elapsed_time(&ms, start_.event, stop_.event), "cuEventElapsedTime");
    t.ms = ms;
    return t;
  }

 private:
  void Leak() {
    module_ = nullptr;
    start_.Leak();
    stop_.Leak();
  }
  const CudaDriver& cuda_;
  CUmodule module_ = nullptr;
  CUfunction fn_ = nullptr;
  DeviceEvent start_, stop_;
};

// Doubles (or more) the work per run until one run lasts `target_ms`, `cap` is reached or the
// deadline passes, then runs that size twice more and keeps the fastest: a host that is late to
// launch after the start event (a loaded machine) only ever lengthens a run, so one slow small
// run must not pass for a slow GPU. If the fastest of the three is far shorter than the target,
// the first was such a stall and the growing goes on. `run(n)` runs and verifies n units of
// work. Returns the run kept.
template <typename RunFn>
Timed Grow(uint64_t first, uint64_t cap, double target_ms, const Deadline& deadline,
           uint64_t* units, RunFn run) {
  uint64_t n = std::min(first, cap);
  for (;;) {
    Timed t = run(n);
    *units = n;
    if (!t.status.ok() || deadline.Passed()) return t;
    if (t.ms >= target_ms || n >= cap) {
      for (int i = 0; i < 2 && !deadline.Passed(); ++i) {
        Timed again = run(n);
        if (!again.status.ok()) return again;
        if (again.ms < t.ms) t = std::move(again);
      }
      if (t.ms >= target_ms / 2 || n >= cap || deadline.Passed()) return t;
    }
    const double grow = t.ms > 0 ? std::clamp(target_ms * 1.25 / t.ms, 2.0, 64.0) : 64.0;
    n = std::min<uint64_t>(cap, static_cast<uint64_t>(static_cast<double>(n) * grow));
  }
}

struct MatmulResult {
  Timed timed;
  PerfMode mode = PerfMode::kTensorFp16;
  double flops = 0;
  uint64_t mismatches = 0;
  std::string first_wrong;
};

MatmulResult Matmul(const CudaDriver& cuda, const CudaDevice& dev,
                    const ConformanceOptions& options, const Clock& clock, uint64_t seed) {
  MatmulResult r;
  r.mode = dev.cc_major >= 7 ? PerfMode::kTensorFp16 : PerfMode::kFp32Fma;
  const bool tensor = r.mode == PerfMode::kTensorFp16;
  const unsigned int sms =
      dev.multiprocessors > 0 ? static_cast<unsigned int>(dev.multiprocessors) : 16u;
  const unsigned int grid = sms * kPerfBlocksPerSm;
  const uint64_t threads = uint64_t{grid} * kPerfBlockThreads;
  const uint64_t warps = threads / 32;

  PerfKernel kernel(cuda);
  if (Status s = tensor ? kernel.Load(PerfTensorPtx(), kPerfTensorKernelName)
                        : kernel.Load(PerfFmaPtx(), kPerfFmaKernelName);
      !s.ok()) {
    r.timed.status = s;
    return r;
  }

  // Inputs from this run's seed, so no answer can be prepared in advance.
  std::vector<int> a(256), b(256);  // a row-major, b column-major: b[j * 16 + k] is B[k][j]
  for (int i = 0; i < 256; ++i) {
    a[i] = static_cast<int>(Mix(seed ^ static_cast<uint64_t>(i)) % 3) - 1;
    b[i] = static_cast<int>(Mix(~seed ^ static_cast<uint64_t>(i)) % 3) - 1;
  }
  a[0] = b[0] = 1;  // never an all-zero product
  std::vector<int> ab(256, 0);
  int max_abs = 1;
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int k = 0; k < 16; ++k) sum += a[i * 16 + k] * b[j * 16 + k];
      ab[i * 16 + j] = sum;
      max_abs = std::max(max_abs, std::abs(sum));
    }
  }
  const float fma_b = static_cast<float>(1 + seed % 3);

  const uint64_t out_floats = tensor ? warps * 256 : threads;
  DeviceBuffer dev_a(cuda), dev_b(cuda), out(cuda);
  auto fail = [&](Status s) -> MatmulResult& {
    r.timed.status = std::move(s);
    return r;
  };
  if (Status s = out.Alloc(out_floats * sizeof(float)); !s.ok()) return fail(s);
  if (tensor) {
    std::vector<uint16_t> ha(256), hb(256);
    for (int i = 0; i < 256; ++i) ha[i] = Half(a[i]), hb[i] = Half(b[i]);
    if (Status s = dev_a.Alloc(512); !s.ok()) return fail(s);
    if (Status s = dev_b.Alloc(512); !s.ok()) return fail(s);
    if (Status s = cuda.Check(cuda.api().memcpy_htod(dev_a.ptr, ha.data(), 512), "cuMemcpyHtoD_v2");
        !s.ok()) {
      return fail(s);
    }
    if (Status s = cuda.Check(cuda.api().memcpy_htod(dev_b.ptr, hb.data(), 512), "cuMemcpyHtoD_v2");
        !s.ok()) {
      return fail(s);
    }
  }
  const double per_unit = tensor ? kExactLimit / (kPerfTensorAccumulators * max_abs)
                                 : (kExactLimit - 28) / (kPerfFmaChains * kPerfFmaUnroll * fma_b);
  const uint64_t cap = static_cast<uint64_t>(per_unit);
  const double flops_per_iter =
      tensor ? static_cast<double>(warps) * kPerfTensorAccumulators * kTileFlops
             : static_cast<double>(threads) * kPerfFmaChains * kPerfFmaUnroll * 2;

  std::vector<float> back(out_floats);
  Deadline deadline(clock, options.gpu_timeout_ms);
  uint64_t iters = 0;
  r.timed = Grow(16, cap, options.gpu_perf_ms, deadline, &iters, [&](uint64_t n) {
    Timed t;
    CUdeviceptr pa = dev_a.ptr, pb = dev_b.ptr, po = out.ptr;
    uint32_t count = static_cast<uint32_t>(n);
    float one = 1.0f, addend = fma_b;
    void* tensor_params[] = {&pa, &pb, &po, &count};
    void* fma_params[] = {&po, &count, &one, &addend};
    t = kernel.Run(grid, tensor ? tensor_params : fma_params, deadline);
    if (!t.status.ok()) return t;
    t.status = cuda.Check(cuda.api().memcpy_dtoh(back.data(), out.ptr, out_floats * sizeof(float)),
                          "cuMemcpyDtoH_v2");
    if (!t.status.ok()) return t;
    for (uint64_t i = 0; i < out_floats; ++i) {
      const double want = tensor ? static_cast<double>(kPerfTensorAccumulators) * n * ab[i % 256]
                                 : 28.0 + kPerfFmaChains * kPerfFmaUnroll * n * fma_b;
      if (static_cast<double>(back[i]) != want && r.mismatches++ == 0) {
        r.first_wrong = "element " + std::to_string(i) + " is " + Fixed(back[i], 0) + ", want " +
                        Fixed(want, 0);
      }
    }
    return t;
  });
  if (r.timed.hung) dev_a.Leak(), dev_b.Leak(), out.Leak();
  r.flops = flops_per_iter * static_cast<double>(iters);
  return r;
}

struct CopyResult {
  Timed timed;
  uint64_t mib = 0;
  double bytes = 0;  // read + written in the timed run
  bool wrong = false;
};

CopyResult MemoryCopy(const CudaDriver& cuda, const ConformanceOptions& options, const Clock& clock,
                      uint64_t seed) {
  CopyResult r;
  const CudaApi& api = cuda.api();
  uint64_t mib = std::clamp<uint64_t>(options.gpu_alloc_mib / 4, 1, 256);
  if (api.mem_get_info != nullptr) {
    size_t free_bytes = 0, total_bytes = 0;
    if (api.mem_get_info(&free_bytes, &total_bytes) == CUDA_SUCCESS) {
      mib = std::min<uint64_t>(mib, free_bytes / kMiB / 4);
    }
  }
  if (mib == 0) {
    r.timed.status = Status::ResourceExhausted("no free device memory to copy");
    return r;
  }
  r.mib = mib;
  const size_t bytes = mib * kMiB;
  DeviceBuffer src(cuda), dst(cuda);
  DeviceEvent start(cuda), stop(cuda);
  for (Status s : {src.Alloc(bytes), dst.Alloc(bytes), start.Create(), stop.Create()}) {
    if (!s.ok()) {
      r.timed.status = s;
      return r;
    }
  }
  // The source holds a pattern that differs by position, so a copy from the wrong place shows.
  std::vector<uint64_t> block(kMiB / 8);
  auto fill = [&](uint64_t m) {
    for (size_t i = 0; i < block.size(); ++i) block[i] = PatternWord(m * block.size() + i, seed);
  };
  for (uint64_t m = 0; m < mib; ++m) {
    fill(m);
    if (Status s =
            cuda.Check(api.memcpy_htod(src.ptr + m * kMiB, block.data(), kMiB), "cuMemcpyHtoD_v2");
        !s.ok()) {
      r.timed.status = s;
      return r;
    }
  }
  Deadline deadline(clock, options.gpu_timeout_ms);
  uint64_t reps = 0;
  r.timed = Grow(1, 4096, options.gpu_perf_ms, deadline, &reps, [&](uint64_t n) {
    Timed t;
    t.status = cuda.Check(api.event_record(start.event, nullptr), "cuEventRecord");
    for (uint64_t i = 0; i < n && t.status.ok(); ++i) {
      t.status = cuda.Check(api.memcpy_dtod(dst.ptr, src.ptr, bytes), "cuMemcpyDtoD_v2");
    }
    if (t.status.ok())
      t.status = cuda.Check(api.event_record(stop.event, nullptr), "cuEventRecord");
    if (t.status.ok()) t.status = WaitForEvent(cuda, stop.event, deadline, &t.hung);
    if (!t.status.ok()) return t;
    float ms = 0;
    t.status =
        cuda.Check(api.event_elapsed_time(&ms, start.event, stop.event), "cuEventElapsedTime");
    t.ms = ms;
    return t;
  });
  if (r.timed.hung) {
    src.Leak(), dst.Leak(), start.Leak(), stop.Leak();
    return r;
  }
  r.bytes = 2.0 * static_cast<double>(bytes) * static_cast<double>(reps);
  if (!r.timed.status.ok()) return r;
  // The first and the last MiB of the copy must hold what the source does.
  for (uint64_t m : {uint64_t{0}, mib - 1}) {
    std::vector<uint64_t> got(block.size());
    if (Status s =
            cuda.Check(api.memcpy_dtoh(got.data(), dst.ptr + m * kMiB, kMiB), "cuMemcpyDtoH_v2");
        !s.ok()) {
      r.timed.status = s;
      return r;
    }
    fill(m);
    if (got != block) r.wrong = true;
  }
  return r;
}

}  // namespace

const std::string& PerfTensorPtx() {
  static const std::string* const kPtx = new std::string(BuildTensorPtx());
  return *kPtx;
}

const std::string& PerfFmaPtx() {
  static const std::string* const kPtx = new std::string(BuildFmaPtx());
  return *kPtx;
}

PerfOutcome GpuPerf(const CudaDriver& cuda, const GpuInfo& gpu, const CudaDevice& dev,
                    const ConformanceOptions& options, const Clock& clock) {
  PerfOutcome out;
  Check& c = out.check;
  c = Make(std::string(conformance::kCheckGpuPerf) + "." + std::to_string(gpu.index));
  const uint64_t seed = RunSeed(clock);

  MatmulResult mm = Matmul(cuda, dev, options, clock, seed);
  const bool tensor = mm.mode == PerfMode::kTensorFp16;
  const std::string what = tensor ? "FP16 tensor matrix multiply (FP32 accumulate)"
                                  : "FP32 FMA (no tensor cores before compute capability 7.0)";
  if (!mm.timed.status.ok()) {
    out.hung = mm.timed.hung;
    Set(c, Outcome::kFail, Describe(dev) + ": " + what + ": " + mm.timed.status.message());
    return out;
  }
  const double mm_ms = std::max(mm.timed.ms, 1e-3);
  c.measurements["matmul_mode"] = static_cast<double>(mm.mode);
  c.measurements["matmul_flops"] = mm.flops;
  c.measurements["matmul_ms"] = mm.timed.ms;
  c.measurements["matmul_tflops"] = mm.flops / (mm_ms / 1000.0) / 1e12;
  c.measurements["mismatches"] = static_cast<double>(mm.mismatches);

  CopyResult cp = MemoryCopy(cuda, options, clock, seed);
  if (!cp.timed.status.ok()) {
    out.hung = cp.timed.hung;
    Set(c, Outcome::kFail, Describe(dev) + ": device memory copy: " + cp.timed.status.message());
    return out;
  }
  const double cp_ms = std::max(cp.timed.ms, 1e-3);
  c.measurements["mem_copy_mib"] = static_cast<double>(cp.mib);
  c.measurements["mem_ms"] = cp.timed.ms;
  c.measurements["mem_gb_s"] = cp.bytes / (cp_ms / 1000.0) / 1e9;

  std::string text = Describe(dev) + ": " + what + " " + Fixed(c.measurements["matmul_tflops"]) +
                     " TFLOPS (" + Fixed(mm.timed.ms) + " ms), device memory copy " +
                     Fixed(c.measurements["mem_gb_s"]) + " GB/s";
  if (mm.mismatches > 0) {
    Set(c, Outcome::kFail,
        text + "; " + std::to_string(mm.mismatches) + " results wrong, first " + mm.first_wrong);
    return out;
  }
  if (cp.wrong) {
    c.measurements["mismatches"] = 1;
    Set(c, Outcome::kFail, text + "; the copy does not hold what its source does");
    return out;
  }
  Set(c, Outcome::kPass, text);
  return out;
}

}  // namespace sluice
