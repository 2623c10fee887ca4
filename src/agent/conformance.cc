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

#include "agent/conformance_util.h"
#include "audit/compat.h"

namespace sluice {

using conformance::Check;
using conformance::Outcome;
using namespace conformance_internal;

namespace {

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
