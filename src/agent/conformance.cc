#include "agent/conformance.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <system_error>
#include <thread>

#include "audit/compat.h"

namespace sluice {

using conformance::Check;
using conformance::Outcome;

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

constexpr uint64_t kMiB = uint64_t{1} << 20;

// Throughputs need sub-millisecond resolution, which the Clock (whole milliseconds) lacks. Only
// measurements use this; every time limit a check enforces reads the Clock.
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double Millis() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
        .count();
  }
  double Seconds() const { return std::max(Millis(), 0.001) / 1000.0; }

 private:
  std::chrono::steady_clock::time_point start_;
};

class Deadline {
 public:
  Deadline(const Clock& clock, int budget_ms)
      : clock_(clock), end_(clock.MonotonicMillis() + std::max(budget_ms, 0)), ms_(budget_ms) {}
  bool Passed() const { return clock_.MonotonicMillis() >= end_; }
  std::string Text() const { return "did not finish within " + std::to_string(ms_) + " ms"; }

 private:
  const Clock& clock_;
  int64_t end_;
  int ms_;
};

Check Make(std::string_view name) {
  Check c;
  c.name = std::string(name);
  return c;
}

Check& Set(Check& c, Outcome o, std::string reason) {
  c.outcome = o;
  c.reason = std::move(reason);
  return c;
}

std::string Fixed(double v, int decimals = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string ErrnoText(int err) { return std::generic_category().message(err); }

// A seed that changes every run, so a result cannot be canned in advance.
uint64_t RunSeed(const Clock& clock) {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(clock.NowMillis());
}

uint64_t PatternWord(uint64_t index, uint64_t seed) {
  return (index * 0x9e3779b97f4a7c15ull) ^ seed;
}

// Turns anything thrown below (std::bad_alloc, std::system_error) into a failed check, so one
// check can never take the suite or the agent down with it.
Check Guarded(std::string_view name, const std::function<Check()>& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    Check c = Make(name);
    return Set(c, Outcome::kFail, std::string("internal error: ") + e.what());
  } catch (...) {
    Check c = Make(name);
    return Set(c, Outcome::kFail, "internal error");
  }
}

// ---- cpu ----------------------------------------------------------------------------------

int AvailableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// One "op" is one step of a 64-bit LCG plus an xor-shift: a dependent chain of a multiply, an add,
// a shift and an xor, so neither the compiler nor the CPU can skip or overlap iterations.
constexpr uint64_t kSpinChunk = 1 << 14;
uint64_t Spin(uint64_t& state) {
  uint64_t x = state;
  for (uint64_t i = 0; i < kSpinChunk; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    x ^= x >> 29;
  }
  state = x;
  return kSpinChunk;
}

// The window is part of the measurement (ops divided by its length), so it runs on the steady
// clock like every other throughput; a FakeClock would never end it.
double OpsPerSecond(int threads, int budget_ms, int* started) {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> total{0};
  std::atomic<uint64_t> sink{0};
  auto work = [&](uint64_t seed) {
    uint64_t ops = 0, state = seed;
    while (!stop.load(std::memory_order_relaxed)) ops += Spin(state);
    total += ops;
    sink ^= state;  // keeps the loop's result alive
  };
  std::vector<std::thread> pool;
  Stopwatch sw;
  try {
    for (int i = 0; i < threads; ++i) pool.emplace_back(work, static_cast<uint64_t>(i) + 1);
  } catch (const std::system_error&) {
    // Fewer threads than CPUs: measure with those that started; `started` tells.
  }
  *started = static_cast<int>(pool.size());
  std::this_thread::sleep_for(std::chrono::milliseconds(budget_ms));
  stop = true;
  for (auto& t : pool) t.join();
  return static_cast<double>(total.load()) / sw.Seconds();
}

Check RunCpu(const ConformanceOptions& options, const Inventory& inventory) {
  Check c = Make(conformance::kCheckCpu);
  const int cores = AvailableCpus();
  const int budget = std::clamp(options.cpu_budget_ms, 1, 10000);
  int started = 0;
  double one = OpsPerSecond(1, budget, &started);
  double all = OpsPerSecond(std::min(cores, 1024), budget, &started);
  c.measurements["cores"] = cores;
  c.measurements["ops_per_s"] = one;
  c.measurements["ops_per_s_all_cores"] = all;
  c.measurements["threads_all_cores"] = started;
  std::string what = std::to_string(cores) + " CPUs, " + Fixed(one / 1e6) + " Mops/s on one, " +
                     Fixed(all / 1e6) + " Mops/s on all";
  if (inventory.cpu_cores > 0 && cores < inventory.cpu_cores) {
    return Set(c, Outcome::kFail,
               what + "; the inventory claims " + std::to_string(inventory.cpu_cores));
  }
  if (one <= 0 || all <= 0) return Set(c, Outcome::kFail, what + "; no work got done");
  return Set(c, Outcome::kPass, what);
}

// ---- memory -------------------------------------------------------------------------------

struct MemInfo {
  uint64_t total_kib = 0;
  uint64_t available_kib = 0;
};

Result<MemInfo> ReadMemInfo(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::Unavailable("cannot read " + path + ": " + ErrnoText(errno));
  MemInfo m;
  uint64_t free_kib = 0;
  bool have_total = false, have_available = false;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key;
    uint64_t value = 0;
    if (!(ls >> key >> value)) continue;
    if (key == "MemTotal:") m.total_kib = value, have_total = true;
    if (key == "MemAvailable:") m.available_kib = value, have_available = true;
    if (key == "MemFree:") free_kib = value;
  }
  if (!have_total) return Status::Unavailable(path + ": no MemTotal line");
  if (!have_available) m.available_kib = free_kib;  // kernels before 3.14
  return m;
}

Check RunMemory(const ConformanceOptions& options, const Inventory& inventory, const Clock& clock) {
  Check c = Make(conformance::kCheckMemory);
  auto info = ReadMemInfo(options.meminfo_path);
  if (!info.ok()) return Set(c, Outcome::kFail, info.status().message());
  const uint64_t total_mib = info->total_kib / 1024, available_mib = info->available_kib / 1024;
  c.measurements["total_mib"] = static_cast<double>(total_mib);
  c.measurements["available_mib"] = static_cast<double>(available_mib);

  const uint64_t mib = std::min(options.memory_mib, available_mib / 2);
  if (mib == 0) {
    c.measurements["touched_mib"] = 0;
    return Set(c, Outcome::kFail,
               "only " + std::to_string(available_mib) + " MiB available; nothing to touch");
  }
  const size_t bytes = mib * kMiB;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Set(c, Outcome::kFail,
               "cannot map " + std::to_string(mib) + " MiB: " + ErrnoText(errno));
  }
  auto* words = static_cast<uint64_t*>(p);
  const uint64_t seed = RunSeed(clock);
  const size_t per_mib = kMiB / sizeof(uint64_t);
  Deadline deadline(clock, options.memory_timeout_ms);
  std::string error;
  Stopwatch sw;
  for (uint64_t m = 0; m < mib && error.empty(); ++m) {
    for (size_t i = m * per_mib; i < (m + 1) * per_mib; ++i) words[i] = PatternWord(i, seed);
    if (deadline.Passed()) error = "writing " + std::to_string(mib) + " MiB " + deadline.Text();
  }
  const double write_s = sw.Seconds();
  // Forces the reads below to go to memory: the compiler could otherwise prove the pattern.
  asm volatile("" ::: "memory");
  for (uint64_t m = 0; m < mib && error.empty(); ++m) {
    for (size_t i = m * per_mib; i < (m + 1) * per_mib; ++i) {
      if (words[i] != PatternWord(i, seed)) {
        error = "word at byte " + std::to_string(i * sizeof(uint64_t)) + " reads back wrong";
        break;
      }
    }
    if (error.empty() && deadline.Passed()) {
      error = "verifying " + std::to_string(mib) + " MiB " + deadline.Text();
    }
  }
  munmap(p, bytes);
  if (!error.empty()) return Set(c, Outcome::kFail, error);

  c.measurements["touched_mib"] = static_cast<double>(mib);
  c.measurements["touch_mib_s"] = static_cast<double>(mib) / write_s;
  std::string what = std::to_string(mib) + " MiB written and verified at " +
                     Fixed(static_cast<double>(mib) / write_s) + " MiB/s; " +
                     std::to_string(total_mib) + " MiB total, " + std::to_string(available_mib) +
                     " MiB available";
  if (mib < options.memory_mib) what += " (capped at half of available)";
  // 5% slack: MemTotal moves a little with kernel reservations between probe and check.
  if (inventory.memory_mib > 0 &&
      static_cast<double>(total_mib) < 0.95 * static_cast<double>(inventory.memory_mib)) {
    return Set(c, Outcome::kFail,
               what + "; the inventory claims " + std::to_string(inventory.memory_mib) + " MiB");
  }
  return Set(c, Outcome::kPass, what);
}

// ---- disk ---------------------------------------------------------------------------------

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

void FillChunk(std::vector<uint64_t>& chunk, uint64_t index, uint64_t seed) {
  for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = PatternWord(index * chunk.size() + i, seed);
}

bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w, n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = EIO;  // the file is shorter than what was written
      return false;
    }
    p += r, n -= static_cast<size_t>(r);
  }
  return true;
}

// Writes, fsyncs, reads back and verifies; the caller deletes the file.
std::string DiskRoundTrip(const std::string& path, uint64_t mib, uint64_t seed,
                          const Deadline& deadline, Check& c) {
  std::vector<uint64_t> chunk(kMiB / sizeof(uint64_t)), back(chunk.size());
  {
    Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (fd.get() < 0) return "cannot create a file in it: " + ErrnoText(errno);
    Stopwatch sw;
    for (uint64_t m = 0; m < mib; ++m) {
      FillChunk(chunk, m, seed);
      if (!WriteAll(fd.get(), chunk.data(), kMiB)) return "write: " + ErrnoText(errno);
      if (deadline.Passed()) return "writing " + std::to_string(mib) + " MiB " + deadline.Text();
    }
    Stopwatch fsync_sw;
    if (::fsync(fd.get()) != 0) return "fsync: " + ErrnoText(errno);
    c.measurements["fsync_ms"] = fsync_sw.Millis();
    // Includes the fsync: the data is on the device, not only in the page cache.
    c.measurements["write_mib_s"] = static_cast<double>(mib) / sw.Seconds();
  }
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return "reopen: " + ErrnoText(errno);
  // Best effort: the pages are clean after fsync, so this drops them and the read below goes to
  // the device. Filesystems that ignore it (tmpfs) report cache speed.
  (void)::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
  Stopwatch sw;
  for (uint64_t m = 0; m < mib; ++m) {
    if (!ReadAll(fd.get(), back.data(), kMiB)) return "read: " + ErrnoText(errno);
    FillChunk(chunk, m, seed);
    if (std::memcmp(chunk.data(), back.data(), kMiB) != 0) {
      return "MiB " + std::to_string(m) + " reads back different from what was written";
    }
    if (deadline.Passed()) return "reading " + std::to_string(mib) + " MiB " + deadline.Text();
  }
  c.measurements["read_mib_s"] = static_cast<double>(mib) / sw.Seconds();
  return "";
}

Check RunDisk(const ConformanceOptions& options, const Clock& clock) {
  Check c = Make(conformance::kCheckDisk);
  if (options.disk_dir.empty()) return Set(c, Outcome::kSkip, "no data directory given");
  const std::string& dir = options.disk_dir;
  struct statvfs vfs = {};
  if (::statvfs(dir.c_str(), &vfs) != 0) {
    return Set(c, Outcome::kFail, dir + ": " + ErrnoText(errno));
  }
  const uint64_t free_mib = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize / kMiB;
  c.measurements["free_mib"] = static_cast<double>(free_mib);
  const uint64_t mib = std::max<uint64_t>(options.disk_mib, 1);
  if (mib > free_mib / 2) {
    return Set(c, Outcome::kFail,
               dir + ": only " + std::to_string(free_mib) + " MiB free, cannot write " +
                   std::to_string(mib) + " MiB");
  }
  const uint64_t seed = RunSeed(clock);
  char name[96];
  std::snprintf(name, sizeof name, "/.sluice-conformance-%d-%016llx.tmp",
                static_cast<int>(::getpid()), static_cast<unsigned long long>(seed));
  const std::string path = dir + name;
  Deadline deadline(clock, options.disk_timeout_ms);
  std::string error = DiskRoundTrip(path, mib, seed, deadline, c);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT && error.empty()) {
    error = "cannot delete the test file: " + ErrnoText(errno);
  }
  if (!error.empty()) return Set(c, Outcome::kFail, dir + ": " + error);
  c.measurements["written_mib"] = static_cast<double>(mib);
  return Set(c, Outcome::kPass,
             std::to_string(mib) + " MiB in " + dir + ": write " +
                 Fixed(c.measurements["write_mib_s"]) + " MiB/s (fsync " +
                 Fixed(c.measurements["fsync_ms"]) + " ms), read " +
                 Fixed(c.measurements["read_mib_s"]) + " MiB/s, " + std::to_string(free_mib) +
                 " MiB free");
}

// ---- link ---------------------------------------------------------------------------------

Check RunLink(LinkProbe* link) {
  Check c = Make(conformance::kCheckLink);
  if (link == nullptr) return Set(c, Outcome::kSkip, "no server link to measure");
  auto m = link->Measure();
  if (!m.ok()) return Set(c, Outcome::kFail, m.status().message());
  if (m->rtt_ms.empty()) return Set(c, Outcome::kFail, "no round trip measured");
  std::vector<double> rtt = m->rtt_ms;
  std::sort(rtt.begin(), rtt.end());
  // The lower median for even counts: a real sample, never an average of two.
  const double median = rtt[(rtt.size() - 1) / 2];
  c.measurements["rtt_ms"] = median;
  c.measurements["rtt_min_ms"] = rtt.front();
  c.measurements["rtt_max_ms"] = rtt.back();
  c.measurements["pings"] = static_cast<double>(rtt.size());
  c.measurements["payload_mib"] = static_cast<double>(m->payload_bytes) / kMiB;
  c.measurements["download_mib_s"] = m->download_mib_s;
  c.measurements["upload_mib_s"] = m->upload_mib_s;
  return Set(c, Outcome::kPass,
             "rtt " + Fixed(median, 2) + " ms (max " + Fixed(rtt.back(), 2) + "), download " +
                 Fixed(m->download_mib_s) + " MiB/s, upload " + Fixed(m->upload_mib_s) + " MiB/s");
}

// ---- gpu ----------------------------------------------------------------------------------

// Runs `fn` when the scope ends unless dismissed; CUDA handles have no RAII of their own.
class Cleanup {
 public:
  explicit Cleanup(std::function<void()> fn) : fn_(std::move(fn)) {}
  ~Cleanup() {
    if (fn_) fn_();
  }
  void Dismiss() { fn_ = nullptr; }
  Cleanup(const Cleanup&) = delete;
  Cleanup& operator=(const Cleanup&) = delete;

 private:
  std::function<void()> fn_;
};

// Device memory freed on scope exit.
struct DeviceBuffer {
  const CudaDriver& cuda;
  CUdeviceptr ptr = 0;
  explicit DeviceBuffer(const CudaDriver& d) : cuda(d) {}
  ~DeviceBuffer() {
    if (ptr != 0) cuda.api().mem_free(ptr);
  }
  Status Alloc(size_t bytes) {
    return cuda.Check(cuda.api().mem_alloc(&ptr, bytes), "cuMemAlloc_v2");
  }
};

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

std::string Describe(const CudaDevice& d) {
  return "CUDA device " + std::to_string(d.ordinal) + " (" + d.name + ", " + d.pci_bus_id + ")";
}

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

  CUevent start = nullptr, stop = nullptr;
  if (Status s = cuda.Check(api.event_create(&start, CU_EVENT_DEFAULT), "cuEventCreate"); !s.ok()) {
    return fail(s.message());
  }
  Cleanup destroy_start([&] { api.event_destroy(start); });
  if (Status s = cuda.Check(api.event_create(&stop, CU_EVENT_DEFAULT), "cuEventCreate"); !s.ok()) {
    return fail(s.message());
  }
  Cleanup destroy_stop([&] { api.event_destroy(stop); });

  constexpr unsigned int kBlock = 256;
  const unsigned int grid = (n + kBlock - 1) / kBlock;
  CUdeviceptr in_ptr = in.ptr, out_ptr = result.ptr;
  uint32_t count = n, key = seed;
  void* params[] = {&in_ptr, &out_ptr, &count, &key};
  if (Status s = cuda.Check(api.event_record(start, nullptr), "cuEventRecord"); !s.ok()) {
    return fail(s.message());
  }
  if (Status s =
          cuda.Check(api.launch_kernel(fn, grid, 1, 1, kBlock, 1, 1, 0, nullptr, params, nullptr),
                     "cuLaunchKernel");
      !s.ok()) {
    return fail(s.message());
  }
  if (Status s = cuda.Check(api.event_record(stop, nullptr), "cuEventRecord"); !s.ok()) {
    return fail(s.message());
  }
  // Polls instead of cuCtxSynchronize so a hung kernel costs gpu_timeout_ms, not the agent.
  Deadline deadline(clock, options.gpu_timeout_ms);
  for (;;) {
    CUresult rc = api.event_query(stop);
    if (rc == CUDA_SUCCESS) break;
    if (rc != CUDA_ERROR_NOT_READY) return fail(cuda.Check(rc, "cuEventQuery").message());
    if (deadline.Passed()) {
      out.hung = true;
      // Freeing what the kernel may still touch would be worse than leaking it.
      unload.Dismiss(), destroy_start.Dismiss(), destroy_stop.Dismiss();
      in.ptr = 0, result.ptr = 0;
      return fail("kernel " + deadline.Text());
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  float kernel_ms = 0;
  if (Status s = cuda.Check(api.event_elapsed_time(&kernel_ms, start, stop), "cuEventElapsedTime");
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

// Both checks for one GPU, in a context of their own.
std::vector<Check> CheckOneGpu(const CudaDriver& cuda, const GpuInfo& gpu, const CudaDevice& dev,
                               int driver_version, const ConformanceOptions& options,
                               const Clock& clock) {
  const std::string suffix = "." + std::to_string(gpu.index);
  std::vector<Check> out;
  CUcontext ctx = nullptr;
  if (Status s = cuda.Check(cuda.api().ctx_create(&ctx, 0, dev.handle), "cuCtxCreate_v2");
      !s.ok()) {
    for (auto name : {conformance::kCheckGpuMemory, conformance::kCheckGpuCompute}) {
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
  // The same outcome and reason for both checks of every GPU (no driver, driver broken).
  auto all = [&](Outcome o, const std::string& reason) {
    for (const auto& g : inventory.gpus) {
      for (auto name : {conformance::kCheckGpuMemory, conformance::kCheckGpuCompute}) {
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
      for (auto name : {conformance::kCheckGpuMemory, conformance::kCheckGpuCompute}) {
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

Check CheckCpu(const ConformanceOptions& options, const Inventory& inventory, const Clock&) {
  return Guarded(conformance::kCheckCpu, [&] { return RunCpu(options, inventory); });
}

Check CheckMemory(const ConformanceOptions& options, const Inventory& inventory,
                  const Clock& clock) {
  return Guarded(conformance::kCheckMemory, [&] { return RunMemory(options, inventory, clock); });
}

Check CheckDisk(const ConformanceOptions& options, const Clock& clock) {
  return Guarded(conformance::kCheckDisk, [&] { return RunDisk(options, clock); });
}

Check CheckLink(LinkProbe* link) {
  return Guarded(conformance::kCheckLink, [&] { return RunLink(link); });
}

std::vector<Check> CheckGpus(const ConformanceOptions& options, const Inventory& inventory,
                             const Clock& clock) {
  try {
    return RunGpus(options, inventory, clock);
  } catch (const std::exception& e) {
    Check c = Make("gpu");
    return {Set(c, Outcome::kFail, std::string("internal error: ") + e.what())};
  }
}

std::vector<conformance::Check> CheckCompatibility(const Inventory& inventory) {
  std::vector<conformance::Check> out;
  if (inventory.driver_version.empty()) return out;  // no driver: nothing to be compatible with
  conformance::Check drv;
  drv.name = std::string(conformance::kCheckDriverCuda);
  if (inventory.cuda_version.empty()) {
    drv.outcome = Outcome::kSkip;
    drv.reason = "the driver did not report a CUDA version";
  } else {
    audit::CompatVerdict v =
        audit::DriverSupportsCuda(inventory.driver_version, inventory.cuda_version);
    // The driver's own CUDA version needs native support; minor-version compatibility is for
    // applications built against a newer toolkit, not for what the driver claims.
    drv.outcome = v.ok && !v.minor_compat_only ? Outcome::kPass
                  : v.known                    ? Outcome::kFail
                                               : Outcome::kSkip;
    drv.reason = v.reason;
  }
  out.push_back(std::move(drv));
  if (!inventory.torch_builds.empty()) {
    conformance::Check torch;
    torch.name = std::string(conformance::kCheckTorchCuda);
    torch.outcome = Outcome::kPass;
    for (const auto& build : inventory.torch_builds) {
      audit::CompatVerdict v = audit::TorchBuildRuns(build, inventory.driver_version);
      if (!v.ok) torch.outcome = Outcome::kFail;
      torch.reason += (torch.reason.empty() ? "" : "; ") + build + ": " + v.reason;
    }
    out.push_back(std::move(torch));
  }
  return out;
}

conformance::Report RunSuite(const ConformanceOptions& options, const Inventory& inventory,
                             LinkProbe* link, const Clock& clock) {
  conformance::Report r;
  r.trigger = options.trigger;
  r.started_ms = clock.NowMillis();
  const int64_t start = clock.MonotonicMillis();
  r.checks.push_back(CheckCpu(options, inventory, clock));
  r.checks.push_back(CheckMemory(options, inventory, clock));
  r.checks.push_back(CheckDisk(options, clock));
  r.checks.push_back(CheckLink(link));
  for (auto& c : CheckGpus(options, inventory, clock)) r.checks.push_back(std::move(c));
  for (auto& c : CheckCompatibility(inventory)) r.checks.push_back(std::move(c));
  r.duration_ms = clock.MonotonicMillis() - start;
  return r;
}

}  // namespace sluice
