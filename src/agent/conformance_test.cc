#include "agent/conformance.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "agent/gpu_perf.h"

namespace sluice {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

using conformance::Check;
using conformance::Outcome;
namespace fs = std::filesystem;

class ScopedEnv {
 public:
  ScopedEnv& Set(const char* name, const char* value) {
    setenv(name, value, 1);
    names_.push_back(name);
    return *this;
  }
  ~ScopedEnv() {
    for (const char* n : names_) unsetenv(n);
  }

 private:
  std::vector<const char*> names_;
};

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "/conformance-XXXXXX";
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class FakeLinkProbe : public LinkProbe {
 public:
  explicit FakeLinkProbe(Result<LinkMeasurement> r) : r_(std::move(r)) {}
  Result<LinkMeasurement> Measure() override { return r_; }

 private:
  Result<LinkMeasurement> r_;
};

LinkMeasurement GoodLink() {
  LinkMeasurement m;
  m.rtt_ms = {3.0, 1.0, 2.0, 10.0};
  m.payload_bytes = 8 << 20;
  m.download_mib_s = 110;
  m.upload_mib_s = 90;
  return m;
}

ConformanceOptions SmallOptions(const std::string& dir) {
  ConformanceOptions o;
  o.trigger = "registration";
  o.cpu_budget_ms = 20;
  o.memory_mib = 16;
  o.disk_dir = dir;
  o.disk_mib = 4;
  o.cuda_library = FAKE_CUDA_PATH;
  o.gpu_alloc_mib = 8;
  o.gpu_elements = 100'003;  // not a multiple of the block size: the tail must be covered too
  o.gpu_perf_ms = 10;
  return o;
}

std::string WriteMeminfo(const TempDir& dir, const std::string& text) {
  std::string path = dir.path() + "/meminfo";
  std::ofstream(path) << text;
  return path;
}

// Calls one of the fake's test hooks; -1 when the fake is not loaded yet.
int CallFake(const char* name) {
  void* lib = dlopen(FAKE_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return -1;
  auto fn = reinterpret_cast<int (*)()>(dlsym(lib, name));
  int n = fn != nullptr ? fn() : -1;
  dlclose(lib);
  return n;
}

int FakeCudaLiveAllocations() { return CallFake("fake_cuda_live_allocations"); }

// ---- cpu ----

TEST(ConformanceCpuTest, CountsAvailableCpusAndMeasuresThroughput) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  Inventory inv;
  inv.cpu_cores = CPU_COUNT(&set);
  ConformanceOptions o;
  o.cpu_budget_ms = 20;
  Check c = CheckCpu(o, inv, *RealClock::Get());
  EXPECT_EQ(c.name, "cpu");
  EXPECT_EQ(c.outcome, Outcome::kPass) << c.reason;
  EXPECT_EQ(c.measurements["cores"], CPU_COUNT(&set));
  EXPECT_GT(c.measurements["ops_per_s"], 1e6);
  EXPECT_GT(c.measurements["ops_per_s_all_cores"], 1e6);
  EXPECT_FALSE(c.reason.empty());
}

TEST(ConformanceCpuTest, FailsWhenTheInventoryClaimsMoreCpus) {
  Inventory inv;
  inv.cpu_cores = 100000;
  ConformanceOptions o;
  o.cpu_budget_ms = 5;
  Check c = CheckCpu(o, inv, *RealClock::Get());
  EXPECT_EQ(c.outcome, Outcome::kFail);
  EXPECT_NE(c.reason.find("the inventory claims 100000"), std::string::npos) << c.reason;
}

// ---- memory ----

TEST(ConformanceMemoryTest, ReadsMeminfoAndTouchesMemory) {
  TempDir dir;
  ConformanceOptions o;
  o.memory_mib = 16;
  o.meminfo_path = WriteMeminfo(dir,
                                "MemTotal:        4096000 kB\nMemFree:  100 kB\n"
                                "MemAvailable:    2048000 kB\nBuffers: 1 kB\n");
  Inventory inv;
  inv.memory_mib = 4000;
  Check c = CheckMemory(o, inv, *RealClock::Get());
  EXPECT_EQ(c.name, "memory");
  EXPECT_EQ(c.outcome, Outcome::kPass) << c.reason;
  EXPECT_EQ(c.measurements["total_mib"], 4000);
  EXPECT_EQ(c.measurements["available_mib"], 2000);
  EXPECT_EQ(c.measurements["touched_mib"], 16);
  EXPECT_GT(c.measurements["touch_mib_s"], 0);
}

TEST(ConformanceMemoryTest, FailsWhenMemTotalIsBelowTheInventory) {
  TempDir dir;
  ConformanceOptions o;
  o.memory_mib = 4;
  o.meminfo_path = WriteMeminfo(dir, "MemTotal: 4096000 kB\nMemAvailable: 2048000 kB\n");
  Inventory inv;
  inv.memory_mib = 8000;
  Check c = CheckMemory(o, inv, *RealClock::Get());
  EXPECT_EQ(c.outcome, Outcome::kFail);
  EXPECT_NE(c.reason.find("the inventory claims 8000 MiB"), std::string::npos) << c.reason;
}

TEST(ConformanceMemoryTest, CapsTheAllocationAtHalfOfAvailable) {
  TempDir dir;
  ConformanceOptions o;
  o.memory_mib = 256;
  // No MemAvailable (kernels before 3.14): MemFree stands in.
  o.meminfo_path = WriteMeminfo(dir, "MemTotal: 4096000 kB\nMemFree: 10240 kB\n");
  Check c = CheckMemory(o, Inventory{}, *RealClock::Get());
  EXPECT_EQ(c.outcome, Outcome::kPass) << c.reason;
  EXPECT_EQ(c.measurements["available_mib"], 10);
  EXPECT_EQ(c.measurements["touched_mib"], 5);
  EXPECT_NE(c.reason.find("capped"), std::string::npos) << c.reason;
}

TEST(ConformanceMemoryTest, AnUnreadableOrMalformedMeminfoFails) {
  TempDir dir;
  ConformanceOptions o;
  o.meminfo_path = dir.path() + "/missing";
  Check c = CheckMemory(o, Inventory{}, *RealClock::Get());
  EXPECT_EQ(c.outcome, Outcome::kFail);
  EXPECT_EQ(c.reason, "cannot read " + o.meminfo_path + ": No such file or directory");

  o.meminfo_path = WriteMeminfo(dir, "nothing useful\n");
  c = CheckMemory(o, Inventory{}, *RealClock::Get());
  EXPECT_EQ(c.outcome, Outcome::kFail);
  EXPECT_EQ(c.reason, o.meminfo_path + ": no MemTotal line");
}

// ---- disk ----

TEST(ConformanceDiskTest, WritesReadsVerifiesAndDeletes) {
  TempDir dir;
  ConformanceOptions o;
  o.disk_dir = dir.path();
  o.disk_mib = 4;
  Check c = CheckDisk(o, *RealClock::Get());
  EXPECT_EQ(c.name, "disk");
  EXPECT_EQ(c.outcome, Outcome::kPass) << c.reason;
  for (const char* k : {"write_mib_s", "fsync_ms", "read_mib_s", "free_mib", "written_mib"}) {
    EXPECT_TRUE(c.measurements.count(k)) << k;
  }
  EXPECT_GT(c.measurements["write_mib_s"], 0);
  EXPECT_GT(c.measurements["read_mib_s"], 0);
  EXPECT_EQ(c.measurements["written_mib"], 4);
  EXPECT_TRUE(fs::is_empty(dir.path())) << "the test file was left behind";
}

TEST(ConformanceDiskTest, AnUnusableDirectoryFailsWithTheErrnoText) {
  TempDir dir;
  ConformanceOptions o;
  o.disk_mib = 1;
  o.disk_dir = dir.path() + "/missing";
  Check c = CheckDisk(o, *RealClock::Get());
  EXPECT_EQ(c.outcome, Outcome::kFail);
  EXPECT_EQ(c.reason, o.disk_dir + ": No such file or directory");

  // statvfs works on a file, so the failure comes from creating the test file in it.
  std::string file = dir.path() + "/file";
  std::ofstream(file) << "x";
  o.disk_dir = file;
  c = CheckDisk(o, *RealClock::Get());
  EXPECT_EQ(c.outcome, Outcome::kFail);
  EXPECT_EQ(c.reason, file + ": cannot create a file in it: Not a directory");

  // Root ignores permission bits, so only check a read-only directory as a normal user.
  if (geteuid() != 0) {
    std::string ro = dir.path() + "/ro";
    fs::create_directory(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    o.disk_dir = ro;
    c = CheckDisk(o, *RealClock::Get());
    EXPECT_EQ(c.outcome, Outcome::kFail);
    EXPECT_EQ(c.reason, ro + ": cannot create a file in it: Permission denied");
    fs::permissions(ro, fs::perms::owner_all);
  }
}

TEST(ConformanceDiskTest, NoDirectoryIsASkip) {
  Check c = CheckDisk(ConformanceOptions{}, *RealClock::Get());
  EXPECT_EQ(c.outcome, Outcome::kSkip);
  EXPECT_EQ(c.reason, "no data directory given");
}

// ---- link ----

TEST(ConformanceLinkTest, ReportsMedianAndMaxRoundTrip) {
  FakeLinkProbe probe(GoodLink());
  Check c = CheckLink(&probe);
  EXPECT_EQ(c.name, "link");
  EXPECT_EQ(c.outcome, Outcome::kPass) << c.reason;
  EXPECT_EQ(c.measurements["rtt_ms"], 2.0);  // lower median of 1, 2, 3, 10
  EXPECT_EQ(c.measurements["rtt_max_ms"], 10.0);
  EXPECT_EQ(c.measurements["rtt_min_ms"], 1.0);
  EXPECT_EQ(c.measurements["download_mib_s"], 110);
  EXPECT_EQ(c.measurements["upload_mib_s"], 90);
  EXPECT_EQ(c.measurements["payload_mib"], 8);
}

TEST(ConformanceLinkTest, AFailingProbeOrNoneIsReported) {
  FakeLinkProbe probe(Status::Unavailable("download 8 MiB: connection reset"));
  Check c = CheckLink(&probe);
  EXPECT_EQ(c.outcome, Outcome::kFail);
  EXPECT_EQ(c.reason, "download 8 MiB: connection reset");

  c = CheckLink(nullptr);
  EXPECT_EQ(c.outcome, Outcome::kSkip);
  EXPECT_FALSE(c.reason.empty());
}

// ---- gpu ----

Inventory TwoGpus() {
  Inventory inv;
  GpuInfo g0;
  g0.index = 0;
  g0.pci_bus_id = "00000000:18:00.0";
  g0.uuid = "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1";
  g0.memory_mib = 81559;
  g0.mig_mode = "Disabled";
  GpuInfo g1 = g0;
  g1.index = 1;
  g1.pci_bus_id = "00000000:2A:00.0";
  g1.uuid = "GPU-7c3cadbd-17e5-0913-f69b-c618122ea0cd";
  inv.gpus = {g0, g1};
  return inv;
}

const Check& Find(const std::vector<Check>& checks, const std::string& name) {
  for (const auto& c : checks) {
    if (c.name == name) return c;
  }
  static const Check kMissing = [] {
    Check c;
    c.name = "missing";
    return c;
  }();
  ADD_FAILURE() << "no check " << name;
  return kMissing;
}

class ConformanceGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // CUDA ordinals in the opposite order of NVML's: the mapping must go by PCI bus id.
    env_.Set("FAKE_CUDA_DEVICES", "2").Set("FAKE_CUDA_PCI", "0000:2a:00.0,0000:18:00.0");
    baseline_ = std::max(FakeCudaLiveAllocations(), 0);
  }
  void TearDown() override { EXPECT_EQ(FakeCudaLiveAllocations(), baseline_); }
  std::vector<Check> Run(const Inventory& inv, ConformanceOptions o = SmallOptions("")) {
    return CheckGpus(o, inv, *RealClock::Get());
  }
  ScopedEnv env_;
  int baseline_ = 0;
};

TEST_F(ConformanceGpuTest, PassesOnEveryGpuMappedByPciBusId) {
  auto checks = Run(TwoGpus());
  ASSERT_EQ(checks.size(), 6u);
  const Check& mem0 = Find(checks, "gpu-memory.0");
  EXPECT_EQ(mem0.outcome, Outcome::kPass) << mem0.reason;
  EXPECT_EQ(mem0.measurements.at("cuda_ordinal"), 1);
  EXPECT_EQ(mem0.measurements.at("total_mib"), 81559);
  EXPECT_EQ(mem0.measurements.at("allocated_mib"), 8);
  EXPECT_GT(mem0.measurements.at("h2d_gib_s"), 0);
  EXPECT_GT(mem0.measurements.at("d2h_gib_s"), 0);
  EXPECT_EQ(mem0.measurements.at("cuda_driver_version"), 12040);
  EXPECT_EQ(mem0.measurements.at("compute_capability"), 9.0);
  EXPECT_EQ(mem0.measurements.at("pinned"), 1);
  EXPECT_NE(mem0.reason.find("CUDA device 1 (Fake GPU 1, 0000:18:00.0)"), std::string::npos)
      << mem0.reason;
  EXPECT_EQ(Find(checks, "gpu-memory.1").measurements.at("cuda_ordinal"), 0);

  const Check& comp1 = Find(checks, "gpu-compute.1");
  EXPECT_EQ(comp1.outcome, Outcome::kPass) << comp1.reason;
  EXPECT_EQ(comp1.measurements.at("elements"), 100003);
  EXPECT_EQ(comp1.measurements.at("mismatches"), 0);
  EXPECT_GE(comp1.measurements.at("kernel_ms"), 0);
  EXPECT_TRUE(comp1.measurements.count("gelem_s"));
  EXPECT_EQ(Find(checks, "gpu-compute.0").outcome, Outcome::kPass);
  EXPECT_EQ(Find(checks, "gpu-perf.0").outcome, Outcome::kPass)
      << Find(checks, "gpu-perf.0").reason;
  EXPECT_EQ(Find(checks, "gpu-perf.1").outcome, Outcome::kPass);
}

TEST_F(ConformanceGpuTest, MapsByUuidWithoutAPciBusId) {
  Inventory inv;
  GpuInfo g;
  g.index = 3;
  g.uuid = "GPU-5a1ce000-0000-0000-0000-000000000001";
  inv.gpus = {g};
  auto checks = Run(inv);
  ASSERT_EQ(checks.size(), 3u);
  EXPECT_EQ(Find(checks, "gpu-memory.3").measurements.at("cuda_ordinal"), 1);
  EXPECT_EQ(Find(checks, "gpu-compute.3").outcome, Outcome::kPass);
}

TEST_F(ConformanceGpuTest, AllocationFailureFailsWithTheCudaErrorName) {
  env_.Set("FAKE_CUDA_FAIL", "alloc");
  auto checks = Run(TwoGpus());
  const Check& mem = Find(checks, "gpu-memory.0");
  EXPECT_EQ(mem.outcome, Outcome::kFail);
  EXPECT_NE(mem.reason.find("allocating 8 MiB: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY"),
            std::string::npos)
      << mem.reason;
  EXPECT_EQ(mem.measurements.at("allocated_mib"), 0);
  EXPECT_EQ(Find(checks, "gpu-compute.0").outcome, Outcome::kFail);
}

TEST_F(ConformanceGpuTest, AWrongKernelResultIsCaughtByVerification) {
  env_.Set("FAKE_CUDA_FAIL", "wrong-result");
  auto checks = Run(TwoGpus());
  EXPECT_EQ(Find(checks, "gpu-memory.0").outcome, Outcome::kPass);
  const Check& comp = Find(checks, "gpu-compute.0");
  EXPECT_EQ(comp.outcome, Outcome::kFail);
  EXPECT_NE(comp.reason.find("1 of 100003 results wrong, first at element 50001"),
            std::string::npos)
      << comp.reason;
  EXPECT_EQ(comp.measurements.at("mismatches"), 1);
}

TEST_F(ConformanceGpuTest, CorruptDeviceMemoryIsCaught) {
  env_.Set("FAKE_CUDA_FAIL", "corrupt");
  auto checks = Run(TwoGpus());
  const Check& mem = Find(checks, "gpu-memory.1");
  EXPECT_EQ(mem.outcome, Outcome::kFail);
  EXPECT_NE(mem.reason.find("reads back wrong"), std::string::npos) << mem.reason;
}

TEST_F(ConformanceGpuTest, LaunchAndJitFailuresNameTheError) {
  env_.Set("FAKE_CUDA_FAIL", "launch");
  const Check launch = Find(Run(TwoGpus()), "gpu-compute.0");
  EXPECT_EQ(launch.outcome, Outcome::kFail);
  EXPECT_NE(launch.reason.find("cuLaunchKernel: CUDA_ERROR_LAUNCH_FAILED"), std::string::npos)
      << launch.reason;

  env_.Set("FAKE_CUDA_FAIL", "ptx");
  const Check jit = Find(Run(TwoGpus()), "gpu-compute.0");
  EXPECT_EQ(jit.outcome, Outcome::kFail);
  EXPECT_NE(jit.reason.find("cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX"), std::string::npos)
      << jit.reason;
  EXPECT_NE(jit.reason.find("error   : fake failure"), std::string::npos) << jit.reason;
}

TEST_F(ConformanceGpuTest, AHungKernelFailsWithinTheTimeLimit) {
  env_.Set("FAKE_CUDA_FAIL", "hang");
  ConformanceOptions o = SmallOptions("");
  o.gpu_timeout_ms = 50;
  Inventory inv = TwoGpus();
  inv.gpus.resize(1);
  auto checks = Run(inv, o);
  // The same limit bounds the memory check's copies; 50 ms may or may not be enough for them.
  const Check& comp = Find(checks, "gpu-compute.0");
  EXPECT_EQ(comp.outcome, Outcome::kFail);
  EXPECT_NE(comp.reason.find("kernel did not finish within 50 ms"), std::string::npos)
      << comp.reason;
  // By design: the context, module, events and buffers of a hung kernel are left alone.
  EXPECT_GT(FakeCudaLiveAllocations(), baseline_);
  // What process exit would do with the real driver.
  CallFake("fake_cuda_reset");
  baseline_ = 0;
}

// gpu-perf.N times the GPU itself: the fake plays a GPU of a given speed by taking the time its
// work would take, so what the agent reports follows what the fake plays. The fake only ever
// sleeps at least that long, so the figure can be lower on a loaded machine, never higher.
TEST_F(ConformanceGpuTest, TheSpeedCheckMeasuresWhatTheGpuDoes) {
  Inventory inv = TwoGpus();
  inv.gpus.resize(1);
  for (double tflops : {400.0, 40.0}) {
    env_.Set("FAKE_CUDA_TFLOPS", std::to_string(tflops).c_str()).Set("FAKE_CUDA_GBPS", "20");
    const Check c = Find(Run(inv), "gpu-perf.0");
    ASSERT_EQ(c.outcome, Outcome::kPass) << c.reason;
    EXPECT_EQ(c.measurements.at("matmul_mode"), 1);  // tensor cores: compute capability 9.0
    EXPECT_EQ(c.measurements.at("mismatches"), 0);
    EXPECT_LE(c.measurements.at("matmul_tflops"), tflops * 1.01);
    EXPECT_GT(c.measurements.at("matmul_tflops"), tflops * 0.2);
    EXPECT_GE(c.measurements.at("matmul_ms"), 5);  // grown to gpu_perf_ms; the fastest of 3 kept
    EXPECT_LE(c.measurements.at("mem_gb_s"), 20 * 1.01);
    EXPECT_GT(c.measurements.at("mem_gb_s"), 20 * 0.2);
    EXPECT_EQ(c.measurements.at("mem_copy_mib"), 2);  // a quarter of gpu_alloc_mib
    EXPECT_NE(c.reason.find("FP16 tensor matrix multiply (FP32 accumulate)"), std::string::npos)
        << c.reason;
  }
}

TEST_F(ConformanceGpuTest, GpusWithoutTensorCoresAreTimedWithFp32Fma) {
  env_.Set("FAKE_CUDA_CC", "6.1").Set("FAKE_CUDA_TFLOPS", "10").Set("FAKE_CUDA_SMS", "20");
  Inventory inv = TwoGpus();
  inv.gpus.resize(1);
  const Check c = Find(Run(inv), "gpu-perf.0");
  ASSERT_EQ(c.outcome, Outcome::kPass) << c.reason;
  EXPECT_EQ(c.measurements.at("matmul_mode"), 2);
  EXPECT_EQ(c.measurements.at("mismatches"), 0);
  EXPECT_LE(c.measurements.at("matmul_tflops"), 10 * 1.01);
  EXPECT_NE(c.reason.find("FP32 FMA"), std::string::npos) << c.reason;
}

// A counterfeit (or a driver that fakes its timing) returns fast and wrong: every element is
// checked, so it fails rather than looking fast.
TEST_F(ConformanceGpuTest, ACounterfeitThatSkipsWorkFailsTheSpeedCheck) {
  env_.Set("FAKE_CUDA_FAIL", "counterfeit");
  Inventory inv = TwoGpus();
  inv.gpus.resize(1);
  for (const char* cc : {"9.0", "6.1"}) {
    env_.Set("FAKE_CUDA_CC", cc);
    auto checks = Run(inv);
    EXPECT_EQ(Find(checks, "gpu-compute.0").outcome, Outcome::kPass);
    const Check& c = Find(checks, "gpu-perf.0");
    EXPECT_EQ(c.outcome, Outcome::kFail) << cc;
    EXPECT_GT(c.measurements.at("mismatches"), 0) << cc;
    EXPECT_NE(c.reason.find("results wrong, first element "), std::string::npos) << c.reason;
  }
}

// Where a CUDA toolkit is installed, its PTX assembler checks the kernels as a driver's JIT would:
// the H200's driver refused ISA 6.0 `wmma...aligned` (CUDA_ERROR_INVALID_PTX), and ptxas refuses
// it the same way. sm_90 because CUDA 13's ptxas no longer targets Volta; the PTX's own .target
// is the floor it runs on. Skipped without a toolkit (ptxas is not in Debian's main archive).
TEST(ConformancePtxTest, TheCudaToolkitsAssemblerAcceptsEveryKernel) {
  std::string ptxas;
  for (const char* p : {"/usr/local/cuda/bin/ptxas", "/usr/bin/ptxas"}) {
    if (access(p, X_OK) == 0) ptxas = p;
  }
  if (ptxas.empty()) GTEST_SKIP() << "no CUDA toolkit's ptxas here";
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("sluice-ptxas-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::pair<const char*, std::string> kernels[] = {
      {"compute", kConformanceKernelPtx}, {"tensor", PerfTensorPtx()}, {"fma", PerfFmaPtx()}};
  for (const auto& [name, ptx] : kernels) {
    const std::string src = (dir / (std::string(name) + ".ptx")).string();
    const std::string err = (dir / (std::string(name) + ".err")).string();
    std::ofstream(src) << ptx;
    const std::string cmd = ptxas + " -arch=sm_90 -o /dev/null '" + src + "' > '" + err + "' 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << name << ": " << Slurp(err);
  }
  std::filesystem::remove_all(dir);
}

TEST(ConformancePtxTest, TheSpeedKernelsAreWellFormedPtx) {
  const std::string& wmma = PerfTensorPtx();
  // `wmma...sync.aligned` needs ISA 6.3: a real H200's driver refused the same text at 6.0.
  EXPECT_EQ(wmma.rfind(".version 6.3\n.target sm_70\n", 0), 0u);
  EXPECT_NE(wmma.find(".visible .entry sluice_perf_wmma("), std::string::npos);
  // Eight independent accumulators, each the destination and the source of its own mma.
  for (int k = 0; k < kPerfTensorAccumulators; ++k) {
    std::string acc = "{%f" + std::to_string(8 * k) + ", ";
    EXPECT_NE(wmma.find("m16n16k16.f32.f32 " + acc), std::string::npos) << k;
  }
  EXPECT_NE(wmma.find("wmma.store.d.sync.aligned.row.m16n16k16.global.f32 [%rd5], {%f0, %f1, "
                      "%f2, %f3, %f4, %f5, %f6, %f7}, 16;"),
            std::string::npos);
  const std::string& fma = PerfFmaPtx();
  EXPECT_NE(fma.find(".visible .entry sluice_perf_fma("), std::string::npos);
  size_t fmas = 0;
  for (size_t at = fma.find("fma.rn.f32"); at != std::string::npos;
       at = fma.find("fma.rn.f32", at + 1)) {
    ++fmas;
  }
  EXPECT_EQ(fmas, static_cast<size_t>(kPerfFmaChains * kPerfFmaUnroll));
  // Chain j starts at j, written as a PTX float literal (7.0f is 0x40E00000).
  EXPECT_NE(fma.find("mov.f32 %f7, 0f40E00000;"), std::string::npos) << fma;
  EXPECT_NE(wmma.find("mov.f32 %f63, 0f00000000;"), std::string::npos);
}

TEST_F(ConformanceGpuTest, ContextAndInitFailuresFailEveryCheck) {
  env_.Set("FAKE_CUDA_FAIL", "ctx");
  for (const auto& c : Run(TwoGpus())) {
    EXPECT_EQ(c.outcome, Outcome::kFail) << c.name;
    EXPECT_NE(c.reason.find("cuCtxCreate_v2: CUDA_ERROR_UNKNOWN"), std::string::npos) << c.reason;
  }
  env_.Set("FAKE_CUDA_FAIL", "init");
  auto checks = Run(TwoGpus());
  ASSERT_EQ(checks.size(), 6u);
  for (const auto& c : checks) {
    EXPECT_EQ(c.outcome, Outcome::kFail) << c.name;
    EXPECT_EQ(c.reason, "cuInit: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)");
  }
}

TEST_F(ConformanceGpuTest, AGpuCudaDoesNotShowFails) {
  env_.Set("FAKE_CUDA_DEVICES", "1");
  auto checks = Run(TwoGpus());
  EXPECT_EQ(Find(checks, "gpu-memory.1").outcome, Outcome::kPass);  // 0000:2a:00.0 is ordinal 0
  const Check& c = Find(checks, "gpu-compute.0");
  EXPECT_EQ(c.outcome, Outcome::kFail);
  EXPECT_NE(c.reason.find("is not among the 1 devices CUDA shows"), std::string::npos) << c.reason;
}

TEST_F(ConformanceGpuTest, LessMemoryThanTheInventoryClaimsFails) {
  env_.Set("FAKE_CUDA_TOTAL_MIB", "40960");
  auto checks = Run(TwoGpus());
  const Check& c = Find(checks, "gpu-memory.0");
  EXPECT_EQ(c.outcome, Outcome::kFail);
  EXPECT_NE(c.reason.find("the inventory claims 81559 MiB"), std::string::npos) << c.reason;
}

TEST_F(ConformanceGpuTest, MigEnabledGpusAreSkipped) {
  Inventory inv = TwoGpus();
  inv.gpus[1].mig_mode = "Enabled";
  auto checks = Run(inv);
  EXPECT_EQ(Find(checks, "gpu-compute.0").outcome, Outcome::kPass);
  EXPECT_EQ(Find(checks, "gpu-memory.1").outcome, Outcome::kSkip);
  EXPECT_EQ(Find(checks, "gpu-compute.1").outcome, Outcome::kSkip);
  EXPECT_EQ(Find(checks, "gpu-perf.1").outcome, Outcome::kSkip);
}

TEST(ConformanceGpuSkipTest, NoCudaDriverSkipsEveryGpuCheck) {
  ConformanceOptions o;
  o.cuda_library = "/nonexistent/libcuda.so.1";
  auto checks = CheckGpus(o, TwoGpus(), *RealClock::Get());
  ASSERT_EQ(checks.size(), 6u);
  for (const auto& c : checks) {
    EXPECT_EQ(c.outcome, Outcome::kSkip) << c.name;
    EXPECT_EQ(c.reason, "no CUDA driver: /nonexistent/libcuda.so.1 not found (CPU-only host)");
  }
}

TEST(ConformanceGpuSkipTest, NoGpusIsOneSkip) {
  auto checks = CheckGpus(ConformanceOptions{}, Inventory{}, *RealClock::Get());
  ASSERT_EQ(checks.size(), 1u);
  EXPECT_EQ(checks[0].name, "gpu");
  EXPECT_EQ(checks[0].outcome, Outcome::kSkip);
  EXPECT_EQ(checks[0].reason, "no GPU on this host");
}

TEST(ConformanceKernelTest, HashIsMurmur3Finaliser) {
  EXPECT_EQ(ConformanceHash(0, 0), 0u);
  EXPECT_EQ(ConformanceHash(1, 0), 0x514e28b7u);
  EXPECT_EQ(ConformanceHash(0, 1), ConformanceHash(1, 0));
}

// Assembles the kernel for Hopper when a CUDA toolkit happens to be installed; the driver's JIT
// runs the same assembler, so this catches PTX mistakes without a GPU.
TEST(ConformanceKernelTest, PtxAssemblesForHopperWhenPtxasIsAround) {
  const char* ptxas = "/usr/local/cuda/bin/ptxas";
  if (access(ptxas, X_OK) != 0) GTEST_SKIP() << "no " << ptxas;
  TempDir dir;
  std::string in = dir.path() + "/k.ptx", out = dir.path() + "/k.cubin";
  std::ofstream(in) << kConformanceKernelPtx;
  std::string cmd = std::string(ptxas) + " --gpu-name sm_90 -o " + out + " " + in;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  EXPECT_NE(std::string(kConformanceKernelPtx)
                .find(std::string(".entry ") + kConformanceKernelName + "("),
            std::string::npos);
}

// ---- the suite ----

TEST(ConformanceSuiteTest, CpuOnlyHostPassesEverythingButSkipsGpu) {
  TempDir dir;
  FakeLinkProbe link(GoodLink());
  FakeClock clock(1'700'000'000'000);
  ConformanceOptions o = SmallOptions(dir.path());
  Inventory inv;  // CPU-only
  conformance::Report r = RunSuite(o, inv, &link, clock);
  EXPECT_EQ(r.trigger, "registration");
  EXPECT_EQ(r.started_ms, 1'700'000'000'000);
  EXPECT_EQ(r.duration_ms, 0);  // the fake clock never moved
  ASSERT_EQ(r.checks.size(), 5u);
  for (const char* name : {"cpu", "memory", "disk", "link"}) {
    const Check* c = r.Find(name);
    ASSERT_NE(c, nullptr) << name;
    EXPECT_EQ(c->outcome, Outcome::kPass) << name << ": " << c->reason;
  }
  ASSERT_NE(r.Find("gpu"), nullptr);
  EXPECT_EQ(r.Find("gpu")->outcome, Outcome::kSkip);
  for (const auto& c : r.checks) EXPECT_FALSE(c.reason.empty()) << c.name;

  // What the agent sends is what the server reads back.
  auto back = conformance::ReportFromJson(conformance::ToJson(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, r);
}

TEST(ConformanceSuiteTest, OneFailingCheckDoesNotStopTheOthers) {
  TempDir dir;
  FakeLinkProbe link(Status::Unavailable("connect: connection refused"));
  ConformanceOptions o = SmallOptions(dir.path() + "/missing");
  ScopedEnv env;
  env.Set("FAKE_CUDA_FAIL", "launch")
      .Set("FAKE_CUDA_DEVICES", "2")
      .Set("FAKE_CUDA_PCI", "0000:18:00.0,0000:2a:00.0");
  const int baseline = std::max(FakeCudaLiveAllocations(), 0);
  conformance::Report r = RunSuite(o, TwoGpus(), &link, *RealClock::Get());
  ASSERT_EQ(r.checks.size(), 10u);
  EXPECT_EQ(r.Find("cpu")->outcome, Outcome::kPass);
  EXPECT_EQ(r.Find("memory")->outcome, Outcome::kPass);
  EXPECT_EQ(r.Find("disk")->outcome, Outcome::kFail);
  EXPECT_EQ(r.Find("link")->outcome, Outcome::kFail);
  EXPECT_EQ(r.Find("gpu-memory.0")->outcome, Outcome::kPass);
  EXPECT_EQ(r.Find("gpu-compute.0")->outcome, Outcome::kFail);
  EXPECT_EQ(r.Find("gpu-memory.1")->outcome, Outcome::kPass);
  EXPECT_EQ(r.Find("gpu-compute.1")->outcome, Outcome::kFail);
  EXPECT_GE(r.duration_ms, 0);
  EXPECT_EQ(FakeCudaLiveAllocations(), baseline);
}

TEST(ConformanceCompatTest, DriverAndTorchAreJudgedByTheTables) {
  Inventory inv;
  EXPECT_TRUE(CheckCompatibility(inv).empty());  // no driver: nothing to check
  inv.driver_version = "535.54.03";              // CUDA 12.2 GA's minimum in the table
  inv.cuda_version = "12.2";
  inv.torch_builds = {"2.1.0+cu121"};
  auto checks = CheckCompatibility(inv);
  ASSERT_EQ(checks.size(), 2u);
  EXPECT_EQ(checks[0].name, "driver-cuda");
  EXPECT_EQ(checks[0].outcome, conformance::Outcome::kPass) << checks[0].reason;
  EXPECT_EQ(checks[1].name, "torch-cuda");
  EXPECT_EQ(checks[1].outcome, conformance::Outcome::kPass) << checks[1].reason;
  // A driver claiming CUDA 12.4 is older than the 12.4 minimum: known bad.
  inv.cuda_version = "12.4";
  inv.torch_builds = {"2.1.0+cu121", "2.4.0+cu124"};
  checks = CheckCompatibility(inv);
  ASSERT_EQ(checks.size(), 2u);
  EXPECT_EQ(checks[0].outcome, conformance::Outcome::kFail) << checks[0].reason;
  EXPECT_NE(checks[1].reason.find("2.4.0+cu124"), std::string::npos) << checks[1].reason;
}

}  // namespace
}  // namespace sluice
