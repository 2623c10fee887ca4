// The GPU checks of the conformance suite (gpu-memory.N, gpu-compute.N) through the CUDA driver
// API loaded with dlopen (cuda_driver.h), and the PTX kernel gpu-compute runs.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "agent/conformance.h"
#include "agent/conformance_util.h"
#include "agent/cuda_handles.h"
#include "agent/gpu_perf.h"

namespace sluice {

using conformance::Check;
using conformance::Outcome;
using namespace conformance_internal;

// The kernel behind gpu-compute. Hand-written rather than compiled so the agent needs no CUDA
// toolkit; checked with `ptxas --gpu-name sm_90` (and sm_75, sm_100). The 32-bit constants of
// the finaliser (0x85ebca6b, 0xc2b2ae35) are written as signed decimals, as nvcc emits them.
const char kConformanceKernelPtx[] = R"(.version 6.0
.target sm_50
.address_size 64

.visible .entry sluice_conformance_hash(
	.param .u64 p_in,
	.param .u64 p_out,
	.param .u32 p_n,
	.param .u32 p_seed
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<10>;
	.reg .b64 %rd<8>;

	ld.param.u64 %rd1, [p_in];
	ld.param.u64 %rd2, [p_out];
	ld.param.u32 %r1, [p_n];
	ld.param.u32 %r2, [p_seed];
	mov.u32 %r3, %ctaid.x;
	mov.u32 %r4, %ntid.x;
	mov.u32 %r5, %tid.x;
	mad.lo.s32 %r6, %r3, %r4, %r5;
	setp.ge.u32 %p1, %r6, %r1;
	@%p1 bra DONE;
	cvta.to.global.u64 %rd3, %rd1;
	cvta.to.global.u64 %rd4, %rd2;
	mul.wide.u32 %rd5, %r6, 4;
	add.s64 %rd6, %rd3, %rd5;
	ld.global.u32 %r7, [%rd6];
	xor.b32 %r7, %r7, %r2;
	shr.u32 %r8, %r7, 16;
	xor.b32 %r7, %r7, %r8;
	mul.lo.s32 %r7, %r7, -2048144789;
	shr.u32 %r8, %r7, 13;
	xor.b32 %r7, %r7, %r8;
	mul.lo.s32 %r7, %r7, -1028477387;
	shr.u32 %r8, %r7, 16;
	xor.b32 %r7, %r7, %r8;
	add.s64 %rd7, %rd4, %rd5;
	st.global.u32 [%rd7], %r7;
DONE:
	ret;
}
)";

uint32_t ConformanceHash(uint32_t in, uint32_t seed) {
  uint32_t x = in ^ seed;
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  x ^= x >> 13;
  x *= 0xc2b2ae35u;
  x ^= x >> 16;
  return x;
}

namespace {

// ---- gpu ----------------------------------------------------------------------------------

// Host staging memory: pinned when the driver offers it (that is what DMA bandwidth means),
// pageable otherwise.
class HostBuffer {
 public:
  HostBuffer(const CudaDriver& cuda, size_t bytes) : cuda_(cuda) {
    if (cuda.api().mem_alloc_host != nullptr &&
        cuda.api().mem_alloc_host(&pinned_, bytes) == CUDA_SUCCESS) {
      data_ = pinned_;
    } else {
      pinned_ = nullptr;
      pageable_.resize(bytes);
      data_ = pageable_.data();
    }
  }
  ~HostBuffer() {
    if (pinned_ != nullptr) cuda_.api().mem_free_host(pinned_);
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  void* data() const { return data_; }
  bool pinned() const { return pinned_ != nullptr; }

 private:
  const CudaDriver& cuda_;
  void* pinned_ = nullptr;
  std::vector<char> pageable_;
  void* data_ = nullptr;
};

const CudaDevice* FindDevice(const GpuInfo& gpu, const std::vector<CudaDevice>& devices) {
  if (!gpu.pci_bus_id.empty()) {
    for (const auto& d : devices) {
      if (SamePciBusId(gpu.pci_bus_id, d.pci_bus_id)) return &d;
    }
  }
  if (!gpu.uuid.empty()) {
    for (const auto& d : devices) {
      if (SameGpuUuid(gpu.uuid, d.uuid)) return &d;
    }
  }
  return nullptr;
}

constexpr size_t kStagingBytes = 64 * kMiB;

// The checks every GPU gets, in the order they run.
constexpr std::string_view kGpuCheckNames[] = {
    conformance::kCheckGpuMemory, conformance::kCheckGpuCompute, conformance::kCheckGpuPerf};

Check GpuMemory(const CudaDriver& cuda, const GpuInfo& gpu, const CudaDevice& dev,
                int driver_version, const ConformanceOptions& options, const Clock& clock) {
  Check c = Make(std::string(conformance::kCheckGpuMemory) + "." + std::to_string(gpu.index));
  const CudaApi& api = cuda.api();
  const uint64_t total_mib = dev.total_bytes / kMiB;
  c.measurements["total_mib"] = static_cast<double>(total_mib);
  c.measurements["cuda_ordinal"] = dev.ordinal;
  c.measurements["cuda_driver_version"] = driver_version;
  if (dev.cc_major > 0) c.measurements["compute_capability"] = dev.cc_major + dev.cc_minor / 10.0;
  if (dev.multiprocessors > 0) c.measurements["multiprocessors"] = dev.multiprocessors;

  uint64_t free_mib = total_mib;
  if (api.mem_get_info != nullptr) {
    size_t free_bytes = 0, total_bytes = 0;
    if (api.mem_get_info(&free_bytes, &total_bytes) == CUDA_SUCCESS) {
      free_mib = free_bytes / kMiB;
      c.measurements["free_mib"] = static_cast<double>(free_mib);
    }
  }
  // Half of what is free at most: a job may be using the GPU, and the check must not starve it.
  const uint64_t mib = std::min(options.gpu_alloc_mib, free_mib / 2);
  if (mib == 0) return Set(c, Outcome::kFail, Describe(dev) + ": no free memory to test");
  const size_t bytes = mib * kMiB;
  DeviceBuffer buf(cuda);
  if (Status s = buf.Alloc(bytes); !s.ok()) {
    c.measurements["allocated_mib"] = 0;
    return Set(c, Outcome::kFail,
               Describe(dev) + ": allocating " + std::to_string(mib) + " MiB: " + s.message());
  }
  c.measurements["allocated_mib"] = static_cast<double>(mib);

  const size_t staging = std::min(bytes, kStagingBytes);
  HostBuffer host(cuda, staging);
  auto* words = static_cast<uint64_t*>(host.data());
  const uint64_t seed = RunSeed(clock);
  Deadline deadline(clock, options.gpu_timeout_ms);
  double h2d_ms = 0, d2h_ms = 0;
  // One untimed copy first: the first transfer pays for page faults and DMA setup, which say
  // nothing about the link's bandwidth (it made a fast link look like 0.25 GiB/s).
  std::memset(words, 0, staging);
  if (Status s = cuda.Check(api.memcpy_htod(buf.ptr, words, staging), "cuMemcpyHtoD_v2"); !s.ok()) {
    return Set(c, Outcome::kFail, Describe(dev) + ": " + s.message());
  }
  if (Status s = cuda.Check(api.ctx_synchronize(), "cuCtxSynchronize"); !s.ok()) {
    return Set(c, Outcome::kFail, Describe(dev) + ": " + s.message());
  }
  for (size_t off = 0; off < bytes; off += staging) {
    const size_t n = std::min(staging, bytes - off);
    for (size_t i = 0; i < n / 8; ++i) words[i] = PatternWord(off / 8 + i, seed);
    Stopwatch sw;
    if (Status s = cuda.Check(api.memcpy_htod(buf.ptr + off, words, n), "cuMemcpyHtoD_v2");
        !s.ok()) {
      return Set(c, Outcome::kFail, Describe(dev) + ": " + s.message());
    }
    // Pageable copies may return before the DMA lands; the timing must include it.
    if (Status s = cuda.Check(api.ctx_synchronize(), "cuCtxSynchronize"); !s.ok()) {
      return Set(c, Outcome::kFail, Describe(dev) + ": " + s.message());
    }
    h2d_ms += sw.Millis();
    if (deadline.Passed())
      return Set(c, Outcome::kFail, Describe(dev) + ": copy " + deadline.Text());
  }
  for (size_t off = 0; off < bytes; off += staging) {
    const size_t n = std::min(staging, bytes - off);
    std::memset(words, 0, n);
    Stopwatch sw;
    if (Status s = cuda.Check(api.memcpy_dtoh(words, buf.ptr + off, n), "cuMemcpyDtoH_v2");
        !s.ok()) {
      return Set(c, Outcome::kFail, Describe(dev) + ": " + s.message());
    }
    d2h_ms += sw.Millis();
    for (size_t i = 0; i < n / 8; ++i) {
      if (words[i] != PatternWord(off / 8 + i, seed)) {
        return Set(c, Outcome::kFail,
                   Describe(dev) + ": device memory at byte " + std::to_string(off + i * 8) +
                       " reads back wrong");
      }
    }
    if (deadline.Passed())
      return Set(c, Outcome::kFail, Describe(dev) + ": copy " + deadline.Text());
  }
  const double gib = static_cast<double>(bytes) / (1024.0 * kMiB);
  c.measurements["h2d_gib_s"] = gib / (std::max(h2d_ms, 0.001) / 1000.0);
  c.measurements["d2h_gib_s"] = gib / (std::max(d2h_ms, 0.001) / 1000.0);
  c.measurements["pinned"] = host.pinned() ? 1 : 0;
  std::string what = Describe(dev) + ": " + std::to_string(mib) + " MiB of " +
                     std::to_string(total_mib) + " MiB written and verified, host to device " +
                     Fixed(c.measurements["h2d_gib_s"]) + " GiB/s, back " +
                     Fixed(c.measurements["d2h_gib_s"]) + " GiB/s";
  if (gpu.memory_mib > 0 &&
      static_cast<double>(total_mib) < 0.95 * static_cast<double>(gpu.memory_mib)) {
    return Set(c, Outcome::kFail,
               what + "; the inventory claims " + std::to_string(gpu.memory_mib) + " MiB");
  }
  return Set(c, Outcome::kPass, what);
}

// Set when the kernel outlives its time limit: the context must then be leaked, since
// destroying it would wait for the kernel (possibly forever).
struct ComputeOutcome {
  Check check;
  bool hung = false;
};

ComputeOutcome GpuCompute(const CudaDriver& cuda, const GpuInfo& gpu, const CudaDevice& dev,
                          const ConformanceOptions& options, const Clock& clock) {
  ComputeOutcome out;
  Check& c = out.check;
  c = Make(std::string(conformance::kCheckGpuCompute) + "." + std::to_string(gpu.index));
  const CudaApi& api = cuda.api();
  const uint32_t n = std::max<uint32_t>(options.gpu_elements, 1);
  c.measurements["elements"] = n;
  auto fail = [&](const std::string& why) -> ComputeOutcome& {
    Set(c, Outcome::kFail, Describe(dev) + ": " + why);
    return out;
  };

  char log[4096] = {};
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log, reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof log))};
  CUmodule module = nullptr;
  if (Status s =
          cuda.Check(api.module_load_data_ex(&module, kConformanceKernelPtx, 2, opts, values),
                     "cuModuleLoadDataEx");
      !s.ok()) {
    log[sizeof log - 1] = '\0';
    std::string first(log, strnlen(log, sizeof log));
    if (auto nl = first.find('\n'); nl != std::string::npos) first.resize(nl);
    return fail(s.message() + (first.empty() ? "" : ": " + first));
  }
  Cleanup unload([&] { api.module_unload(module); });
  CUfunction fn = nullptr;
  if (Status s = cuda.Check(api.module_get_function(&fn, module, kConformanceKernelName),
                            "cuModuleGetFunction");
      !s.ok()) {
    return fail(s.message());
  }

  const size_t bytes = size_t{n} * sizeof(uint32_t);
  std::vector<uint32_t> host(n);
  const uint32_t seed = static_cast<uint32_t>(RunSeed(clock));
  for (uint32_t i = 0; i < n; ++i) host[i] = i * 2654435761u + 12345u;
  DeviceBuffer in(cuda), result(cuda);
  if (Status s = in.Alloc(bytes); !s.ok()) return fail(s.message());
  if (Status s = result.Alloc(bytes); !s.ok()) return fail(s.message());
  if (Status s = cuda.Check(api.memcpy_htod(in.ptr, host.data(), bytes), "cuMemcpyHtoD_v2");
      !s.ok()) {
    return fail(s.message());
  }

  DeviceEvent start(cuda), stop(cuda);
  if (Status s = start.Create(); !s.ok()) return fail(s.message());
  if (Status s = stop.Create(); !s.ok()) return fail(s.message());

  constexpr unsigned int kBlock = 256;
  const unsigned int grid = (n + kBlock - 1) / kBlock;
  CUdeviceptr in_ptr = in.ptr, out_ptr = result.ptr;
  uint32_t count = n, key = seed;
  void* params[] = {&in_ptr, &out_ptr, &count, &key};
  if (Status s = cuda.Check(api.event_record(start.event, nullptr), "cuEventRecord"); !s.ok()) {
    return fail(s.message());
  }
  if (Status s =
          cuda.Check(api.launch_kernel(fn, grid, 1, 1, kBlock, 1, 1, 0, nullptr, params, nullptr),
                     "cuLaunchKernel");
      !s.ok()) {
    return fail(s.message());
  }
  if (Status s = cuda.Check(api.event_record(stop.event, nullptr), "cuEventRecord"); !s.ok()) {
    return fail(s.message());
  }
  Deadline deadline(clock, options.gpu_timeout_ms);
  if (Status s = WaitForEvent(cuda, stop.event, deadline, &out.hung); !s.ok()) {
    if (out.hung) {
      // Freeing what the kernel may still touch would be worse than leaking it.
      unload.Dismiss(), start.Leak(), stop.Leak(), in.Leak(), result.Leak();
    }
    return fail(s.message());
  }
  float kernel_ms = 0;
  if (Status s = cuda.Check(api.event_elapsed_time(&kernel_ms, start.event, stop.event),
                            "cuEventElapsedTime");
      !s.ok()) {
    return fail(s.message());
  }
  std::vector<uint32_t> back(n, 0);
  if (Status s = cuda.Check(api.memcpy_dtoh(back.data(), result.ptr, bytes), "cuMemcpyDtoH_v2");
      !s.ok()) {
    return fail(s.message());
  }
  uint64_t mismatches = 0;
  uint32_t first_bad = 0;
  for (uint32_t i = 0; i < n; ++i) {
    if (back[i] != ConformanceHash(host[i], seed)) {
      if (mismatches++ == 0) first_bad = i;
    }
  }
  c.measurements["kernel_ms"] = kernel_ms;
  c.measurements["gelem_s"] = n / 1e9 / (std::max(kernel_ms, 1e-6f) / 1000.0);
  c.measurements["mismatches"] = static_cast<double>(mismatches);
  if (mismatches > 0) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "%llu of %u results wrong, first at element %u: got 0x%08x, want 0x%08x",
                  static_cast<unsigned long long>(mismatches), n, first_bad, back[first_bad],
                  ConformanceHash(host[first_bad], seed));
    return fail(buf);
  }
  Set(c, Outcome::kPass,
      Describe(dev) + ": " + std::to_string(n) + " elements hashed and verified, kernel " +
          Fixed(kernel_ms, 3) + " ms");
  return out;
}

// The checks of one GPU, in a context of their own.
std::vector<Check> CheckOneGpu(const CudaDriver& cuda, const GpuInfo& gpu, const CudaDevice& dev,
                               int driver_version, const ConformanceOptions& options,
                               const Clock& clock) {
  const std::string suffix = "." + std::to_string(gpu.index);
  std::vector<Check> out;
  CUcontext ctx = nullptr;
  if (Status s = cuda.Check(cuda.api().ctx_create(&ctx, 0, dev.handle), "cuCtxCreate_v2");
      !s.ok()) {
    for (auto name : kGpuCheckNames) {
      Check c = Make(std::string(name) + suffix);
      out.push_back(Set(c, Outcome::kFail, Describe(dev) + ": " + s.message()));
    }
    return out;
  }
  bool hung = false;
  out.push_back(Guarded(std::string(conformance::kCheckGpuMemory) + suffix,
                        [&] { return GpuMemory(cuda, gpu, dev, driver_version, options, clock); }));
  out.push_back(Guarded(std::string(conformance::kCheckGpuCompute) + suffix, [&] {
    ComputeOutcome r = GpuCompute(cuda, gpu, dev, options, clock);
    hung = r.hung;
    return r.check;
  }));
  // After a hung kernel the GPU is not fit to time anything; the speed check says so.
  out.push_back(Guarded(std::string(conformance::kCheckGpuPerf) + suffix, [&] {
    if (hung) {
      Check c = Make(std::string(conformance::kCheckGpuPerf) + suffix);
      return Set(c, Outcome::kFail, Describe(dev) + ": not measured: the compute check hung");
    }
    PerfOutcome r = GpuPerf(cuda, gpu, dev, options, clock);
    hung = r.hung;
    return r.check;
  }));
  if (!hung) cuda.api().ctx_destroy(ctx);
  return out;
}

std::vector<Check> RunGpus(const ConformanceOptions& options, const Inventory& inventory,
                           const Clock& clock) {
  std::vector<Check> out;
  if (inventory.gpus.empty()) {
    Check c = Make("gpu");
    out.push_back(Set(c, Outcome::kSkip, "no GPU on this host"));
    return out;
  }
  // The same outcome and reason for every check of every GPU (no driver, driver broken).
  auto all = [&](Outcome o, const std::string& reason) {
    for (const auto& g : inventory.gpus) {
      for (auto name : kGpuCheckNames) {
        Check c = Make(std::string(name) + "." + std::to_string(g.index));
        out.push_back(Set(c, o, reason));
      }
    }
    return out;
  };
  auto cuda = CudaDriver::Load(options.cuda_library);
  if (!cuda.ok()) {
    if (cuda.status().code() == StatusCode::kNotFound) {
      return all(Outcome::kSkip,
                 "no CUDA driver: " + options.cuda_library + " not found (CPU-only host)");
    }
    return all(Outcome::kFail, "no CUDA driver: " + cuda.status().message());
  }
  const CudaDriver& d = **cuda;
  if (Status s = d.Init(); !s.ok()) return all(Outcome::kFail, s.message());
  auto version = d.DriverVersion();
  if (!version.ok()) return all(Outcome::kFail, version.status().message());
  auto devices = d.Devices();
  if (!devices.ok()) return all(Outcome::kFail, devices.status().message());

  for (const auto& gpu : inventory.gpus) {
    const std::string suffix = "." + std::to_string(gpu.index);
    auto both = [&](Outcome o, const std::string& reason) {
      for (auto name : kGpuCheckNames) {
        Check c = Make(std::string(name) + suffix);
        out.push_back(Set(c, o, reason));
      }
    };
    if (gpu.mig_mode == "Enabled") {
      both(Outcome::kSkip, "MIG is enabled on GPU " + std::to_string(gpu.index) +
                               ": whole-GPU checks do not apply");
      continue;
    }
    const CudaDevice* dev = FindDevice(gpu, *devices);
    if (dev == nullptr) {
      both(Outcome::kFail, "GPU " + std::to_string(gpu.index) + " (" + gpu.pci_bus_id + ", " +
                               gpu.uuid + ") is not among the " + std::to_string(devices->size()) +
                               " devices CUDA shows this process (CUDA_VISIBLE_DEVICES?)");
      continue;
    }
    for (auto& c : CheckOneGpu(d, gpu, *dev, *version, options, clock)) out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

std::vector<Check> CheckGpus(const ConformanceOptions& options, const Inventory& inventory,
                             const Clock& clock) {
  try {
    return RunGpus(options, inventory, clock);
  } catch (const std::exception& e) {
    Check c = Make("gpu");
    return {Set(c, Outcome::kFail, std::string("internal error: ") + e.what())};
  }
}

}  // namespace sluice
