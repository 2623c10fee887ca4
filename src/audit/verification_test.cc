#include "audit/verification.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "agent/nvidia_smi_parser.h"
#include "agent/probe_test_util.h"

namespace sluice::audit {
namespace {

using conformance::Check;
using conformance::Outcome;
using conformance::Report;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// A small CI VM: 2 cores, 7.7 GiB, no GPU.
Inventory CpuOnly() {
  Inventory inv;
  inv.hostname = "ci";
  inv.arch = "x86_64";
  inv.cpu_cores = 2;
  inv.memory_mib = 7937;
  inv.gpu_source = "none";
  return inv;
}

Check MakeCheck(std::string name, std::map<std::string, double> m) {
  return Check{std::move(name), Outcome::kPass, std::move(m), "measured"};
}

// What the agent's suite measures on such a VM: comfortably inside the default rules.
Report GoodReport(const Inventory& inv) {
  Report r;
  r.trigger = "registration";
  r.checks.push_back(MakeCheck("cpu", {{"cores", inv.cpu_cores}, {"ops_per_s", 2.5e7}}));
  r.checks.push_back(MakeCheck("memory", {{"total_mib", static_cast<double>(inv.memory_mib)},
                                          {"available_mib", inv.memory_mib * 0.8},
                                          {"touched_mib", 256},
                                          {"touch_mib_s", 3100}}));
  r.checks.push_back(MakeCheck(
      "disk", {{"write_mib_s", 180}, {"fsync_ms", 4.2}, {"read_mib_s", 900}, {"free_mib", 40000}}));
  r.checks.push_back(MakeCheck(
      "link",
      {{"rtt_ms", 0.4}, {"rtt_max_ms", 1.9}, {"download_mib_s", 350}, {"upload_mib_s", 340}}));
  for (const GpuInfo& g : inv.gpus) {
    std::string n = std::to_string(g.index);
    r.checks.push_back(
        MakeCheck("gpu-memory." + n, {{"total_mib", static_cast<double>(g.memory_mib)},
                                      {"allocated_mib", 1024},
                                      {"h2d_gib_s", 11.8}}));
    r.checks.push_back(MakeCheck("gpu-compute." + n,
                                 {{"elements", 1 << 24}, {"kernel_ms", 0.8}, {"mismatches", 0}}));
    r.checks.push_back(MakeCheck(
        "gpu-perf." + n,
        {{"matmul_mode", 1}, {"matmul_tflops", 700}, {"mismatches", 0}, {"mem_gb_s", 3000}}));
  }
  return r;
}

Check* Find(Report& r, const std::string& name) {
  for (Check& c : r.checks) {
    if (c.name == name) return &c;
  }
  ADD_FAILURE() << "no check " << name;
  static Check none;
  return &none;
}

Inventory FromFixture(const std::string& name) {
  Inventory inv = CpuOnly();
  inv.cpu_cores = 64;
  inv.memory_mib = 1031800;
  auto probed = ParseNvidiaSmi(testing::ReadFileOrEmpty(testing::NvidiaSmiFixture(name)));
  EXPECT_TRUE(probed.ok()) << name;
  if (probed.ok()) {
    inv.driver_version = probed->driver_version;
    inv.cuda_version = probed->cuda_version;
    inv.gpus = probed->gpus;
  }
  return inv;
}

TEST(VerificationTest, AGoodCpuOnlyReportVerifies) {
  Inventory inv = CpuOnly();
  Verdict v = Evaluate(inv, GoodReport(inv), {});
  EXPECT_TRUE(v.verified);
  EXPECT_THAT(v.failures, IsEmpty());
  EXPECT_THAT(v.notes, IsEmpty());
}

// Each rule alone: one bad measurement, exactly one failure naming check, key and threshold.
TEST(VerificationTest, EachRuleFailsInIsolation) {
  struct Case {
    std::string check, key;
    double value;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"cpu", "cores", 4, "cpu: cores 4 contradicts the inventory's cpu_cores 2"},
      {"cpu", "ops_per_s", 10, "cpu: ops_per_s 10 ops/s is below the minimum 1000 ops/s"},
      {"memory", "total_mib", 7937 * 1.03,
       "memory: total_mib 8175.11 contradicts the inventory's memory_mib 7937 (allowed "
       "difference 2%)"},
      {"memory", "available_mib", 9000, "memory: available_mib 9000 exceeds total_mib 7937"},
      {"memory", "touched_mib", 16, "memory: touched_mib 16 MiB is below the minimum 64 MiB"},
      {"memory", "touch_mib_s", 5, "memory: touch_mib_s 5 MiB/s is below the minimum 10 MiB/s"},
      {"disk", "write_mib_s", 12.5, "disk: write_mib_s 12.5 MiB/s is below the minimum 20 MiB/s"},
      {"disk", "read_mib_s", 3, "disk: read_mib_s 3 MiB/s is below the minimum 20 MiB/s"},
      {"disk", "fsync_ms", 2500, "disk: fsync_ms 2500 ms is above the maximum 1000 ms"},
      {"disk", "free_mib", 100, "disk: free_mib 100 MiB is below the minimum 1024 MiB"},
      {"link", "rtt_ms", 812, "link: rtt_ms 812 ms is above the maximum 500 ms"},
      {"link", "rtt_max_ms", 4000, "link: rtt_max_ms 4000 ms is above the maximum 2000 ms"},
      {"link", "download_mib_s", 0.5,
       "link: download_mib_s 0.5 MiB/s is below the minimum 1 MiB/s"},
      {"link", "upload_mib_s", 0.25, "link: upload_mib_s 0.25 MiB/s is below the minimum 1 MiB/s"},
      {"link", "rtt_ms", -1, "link: rtt_ms -1 is negative"},
  };
  Inventory inv = CpuOnly();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.check + "." + c.key);
    Report r = GoodReport(inv);
    Find(r, c.check)->measurements[c.key] = c.value;
    Verdict v = Evaluate(inv, r, {});
    EXPECT_FALSE(v.verified);
    EXPECT_THAT(v.failures, ElementsAre(c.expected));
  }
}

TEST(VerificationTest, RulesAreTheCallersThresholds) {
  Inventory inv = CpuOnly();
  Report r = GoodReport(inv);
  VerificationRules strict;
  strict.min_disk_write_mib_s = 500;
  Verdict v = Evaluate(inv, r, strict);
  EXPECT_THAT(v.failures,
              ElementsAre("disk: write_mib_s 180 MiB/s is below the minimum 500 MiB/s"));
  // 1.5% off the probe is within the 2% allowed.
  Find(r, "memory")->measurements["total_mib"] = 7937 * 0.985;
  EXPECT_TRUE(Evaluate(inv, r, {}).verified);
}

TEST(VerificationTest, MissingChecksAndMeasurementsFail) {
  Inventory inv = CpuOnly();
  Report r = GoodReport(inv);
  r.checks.erase(r.checks.begin() + 2);  // disk
  Find(r, "link")->measurements.erase("upload_mib_s");
  Verdict v = Evaluate(inv, r, {});
  EXPECT_FALSE(v.verified);
  EXPECT_THAT(v.failures, ElementsAre("check `disk` missing from the report",
                                      "link: measurement `upload_mib_s` missing"));
  EXPECT_FALSE(Evaluate(inv, Report{}, {}).verified);
  EXPECT_EQ(Evaluate(inv, Report{}, {}).failures.size(), 4u);
}

TEST(VerificationTest, TheAgentsOwnOutcomeIsNeverTrusted) {
  Inventory inv = CpuOnly();
  // "pass" over a bad number fails.
  Report r = GoodReport(inv);
  Find(r, "disk")->measurements["write_mib_s"] = 2;
  ASSERT_EQ(Find(r, "disk")->outcome, Outcome::kPass);
  EXPECT_FALSE(Evaluate(inv, r, {}).verified);

  // "fail" over good numbers passes, and says so.
  Report f = GoodReport(inv);
  Find(f, "link")->outcome = Outcome::kFail;
  Find(f, "link")->reason = "upload slow";
  Verdict v = Evaluate(inv, f, {});
  EXPECT_TRUE(v.verified);
  EXPECT_THAT(v.notes, ElementsAre("link: the agent reported fail (the agent said: upload slow), "
                                   "but its measurements meet the rules"));

  // "skip" is not a measurement, whatever numbers it carries.
  Report s = GoodReport(inv);
  Find(s, "cpu")->outcome = Outcome::kSkip;
  Find(s, "cpu")->reason = "benchmark disabled";
  v = Evaluate(inv, s, {});
  EXPECT_THAT(v.failures, ElementsAre("check `cpu` was skipped, so nothing was measured (the "
                                      "agent said: benchmark disabled)"));

  // Two answers for one check: neither is believed.
  Report d = GoodReport(inv);
  d.checks.push_back(MakeCheck("disk", {{"write_mib_s", 1}}));
  v = Evaluate(inv, d, {});
  EXPECT_THAT(v.failures, ElementsAre(HasSubstr("check `disk` appears 2 times")));
}

TEST(VerificationTest, ExtraChecksAreNotedAndIgnored) {
  Inventory inv = CpuOnly();
  Report r = GoodReport(inv);
  r.checks.push_back(MakeCheck("gpu-compute.0", {{"elements", 1}}));
  r.checks.push_back(MakeCheck("driver-cuda", {}));
  Verdict v = Evaluate(inv, r, {});
  EXPECT_TRUE(v.verified);
  EXPECT_THAT(v.notes,
              ElementsAre("check `gpu-compute.0` is not one the server requires; ignored"));
}

TEST(VerificationTest, AGpuNodeNeedsEveryGpuChecked) {
  Inventory inv = FromFixture("a100-sxm4-80gb-1.txt");  // 4 x A100 80GB, driver 555.42.02
  ASSERT_EQ(inv.gpus.size(), 4u);
  Report good = GoodReport(inv);
  Verdict v = Evaluate(inv, good, {});
  EXPECT_TRUE(v.verified) << ::testing::PrintToString(v.failures);

  // The CPU-only part of the report is not enough.
  Verdict cpu_only = Evaluate(inv, GoodReport(CpuOnly()), {});
  EXPECT_FALSE(cpu_only.verified);
  EXPECT_THAT(cpu_only.failures, Contains("check `gpu-memory.3` missing from the report"));
  EXPECT_THAT(cpu_only.failures, Contains("check `gpu-compute.0` missing from the report"));

  Report skipped = good;
  Find(skipped, "gpu-compute.2")->outcome = Outcome::kSkip;
  Find(skipped, "gpu-compute.2")->reason = "no CUDA runtime";
  EXPECT_THAT(Evaluate(inv, skipped, {}).failures,
              ElementsAre(HasSubstr("check `gpu-compute.2` was skipped")));
}

TEST(VerificationTest, GpuRulesFailInIsolation) {
  Inventory inv = FromFixture("rtx2070-x2-1.xml");
  ASSERT_EQ(inv.gpus.size(), 2u);
  ASSERT_EQ(inv.gpus[1].memory_mib, 8192u);
  double mem1 = 8192;
  struct Case {
    std::string check, key;
    double value;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"gpu-compute.1", "mismatches", 3, "gpu-compute.1: mismatches 3 is above the maximum 0"},
      {"gpu-compute.0", "elements", 0, "gpu-compute.0: elements 0 is below the minimum 1"},
      {"gpu-compute.0", "kernel_ms", 0,
       "gpu-compute.0: kernel_ms 0 ms: no kernel time was measured"},
      {"gpu-memory.1", "allocated_mib", 0,
       "gpu-memory.1: allocated_mib 0 MiB is below the minimum 1 MiB"},
      {"gpu-memory.1", "allocated_mib", mem1 * 2,
       "gpu-memory.1: allocated_mib 16384 exceeds total_mib 8192"},
      {"gpu-memory.0", "h2d_gib_s", 0.1,
       "gpu-memory.0: h2d_gib_s 0.1 GiB/s is below the minimum 0.25 GiB/s"},
      {"gpu-memory.1", "total_mib", 7372.8,
       "gpu-memory.1: total_mib 7372.8 contradicts the inventory's memory_mib of GPU 1 8192 "
       "(allowed difference 5%)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.check + "." + c.key);
    Report r = GoodReport(inv);
    Find(r, c.check)->measurements[c.key] = c.value;
    Verdict v = Evaluate(inv, r, {});
    EXPECT_FALSE(v.verified);
    ASSERT_EQ(v.failures.size(), 1u) << ::testing::PrintToString(v.failures);
    EXPECT_EQ(v.failures[0], c.expected);
  }
  Report r = GoodReport(inv);
  Find(r, "gpu-compute.1")->measurements.erase("mismatches");
  EXPECT_THAT(Evaluate(inv, r, {}).failures,
              ElementsAre("gpu-compute.1: measurement `mismatches` missing"));
  // 4% off the probed framebuffer size is within the 5% allowed.
  Find(r, "gpu-compute.1")->measurements["mismatches"] = 0;
  Find(r, "gpu-memory.0")->measurements["total_mib"] = inv.gpus[0].memory_mib * 0.96;
  EXPECT_TRUE(Evaluate(inv, r, {}).verified);
}

TEST(VerificationTest, EveryRecordedDriverSupportsTheCudaItReports) {
  // The real recordings: each driver natively supports its own CUDA, except 565's "12.7",
  // which no table row lists (noted, not failed).
  for (const char* name :
       {"a10-1.txt", "a100-sxm4-80gb-1.txt", "a40-1.txt", "gtx1050ti-1.txt", "gtx680-1.txt",
        "h100-nvl-1.txt", "l4-1.txt", "rtx3090-1.txt", "a100-sxm4-80gb-1.xml", "a10g-1.xml",
        "grid-p4-1q-vgpu-1.xml", "quadro-p2000-1.xml", "rtx2070-x2-1.xml", "rtx3060-1.xml",
        "rtx3080-1.xml", "rtx3080-2.xml", "rtx4000-sff-ada-1.xml", "tesla-t4-1.xml",
        "h100-sxm5-80gb-1.txt"}) {
    SCOPED_TRACE(name);
    Inventory inv = FromFixture(name);
    Verdict v = Evaluate(inv, GoodReport(inv), {});
    EXPECT_TRUE(v.verified) << ::testing::PrintToString(v.failures);
    if (inv.cuda_version == "12.7") {
      EXPECT_THAT(v.notes, ElementsAre(AllOf(HasSubstr("cannot check the driver's CUDA 12.7"),
                                             HasSubstr("not in the table"))));
    } else {
      EXPECT_THAT(v.notes, IsEmpty());
    }
  }
}

TEST(VerificationTest, ADriverClaimingANewerCudaFails) {
  Inventory inv = FromFixture("a100-sxm4-80gb-1.xml");  // 535.54.03, CUDA 12.2
  inv.cuda_version = "12.4";
  Verdict v = Evaluate(inv, GoodReport(inv), {});
  EXPECT_FALSE(v.verified);
  EXPECT_THAT(v.failures,
              ElementsAre("driver-cuda: the driver reports CUDA 12.4, but the table disagrees: "
                          "CUDA 12.4 needs driver >= 550.54.14 (CUDA 12.4 GA); driver is "
                          "535.54.03: runs only through CUDA minor-version compatibility (>= "
                          "525.60.13 for CUDA 12.x; no PTX JIT of newer code, no features that "
                          "need a newer driver)"));
  inv.cuda_version = "13.0";
  EXPECT_THAT(Evaluate(inv, GoodReport(inv), {}).failures,
              ElementsAre(HasSubstr("CUDA 13.0 needs driver >= 580.65.06")));
  inv.driver_version = "";
  EXPECT_THAT(Evaluate(inv, GoodReport(inv), {}).failures,
              ElementsAre("driver-cuda: the inventory lists GPUs but no driver version"));
}

TEST(VerificationTest, SoftwareTheDriverCannotRunIsLeftOutNotFailed) {
  Inventory inv = FromFixture("a100-sxm4-80gb-1.xml");  // 535.54.03, CUDA 12.2
  inv.cuda_toolkits = {"13.0", "12.4", "12.1", "11.8"};
  inv.torch_builds = {"2.9.0+cu130", "2.5.1+cu124", "2.1.0+cu121", "2.1.0+cpu", "2.1.0+rocm5.6"};
  Verdict v = Evaluate(inv, GoodReport(inv), {});
  EXPECT_TRUE(v.verified) << ::testing::PrintToString(v.failures);
  EXPECT_THAT(v.usable_toolkits, ElementsAre("12.4", "12.1", "11.8"));
  EXPECT_THAT(v.usable_torch_builds, ElementsAre("2.5.1+cu124", "2.1.0+cu121", "2.1.0+cpu"));
  EXPECT_THAT(v.notes, Contains(AllOf(HasSubstr("toolkit 13.0 left out"),
                                      HasSubstr(">= 580 for CUDA 13.x"))));
  EXPECT_THAT(v.notes, Contains(AllOf(HasSubstr("toolkit 12.4: "),
                                      HasSubstr("minor-version compatibility"))));
  EXPECT_THAT(v.notes, Contains(HasSubstr("torch build 2.9.0+cu130 left out")));
  EXPECT_THAT(v.notes, Contains(HasSubstr("torch build 2.1.0+rocm5.6 left out")));

  // A CPU-only machine: toolkits need a driver to run anything; CPU torch builds do not.
  Inventory cpu = CpuOnly();
  cpu.cuda_toolkits = {"12.1"};
  cpu.torch_builds = {"2.1.0+cu121", "2.1.0+cpu"};
  v = Evaluate(cpu, GoodReport(cpu), {});
  EXPECT_TRUE(v.verified);
  EXPECT_THAT(v.usable_toolkits, IsEmpty());
  EXPECT_THAT(v.usable_torch_builds, ElementsAre("2.1.0+cpu"));
  EXPECT_THAT(v.notes,
              Contains(AllOf(HasSubstr("toolkit 12.1 left out"), HasSubstr("no NVIDIA driver"))));
}

// gpu-perf.N: right answers, then speed against the model's spec. The lower of the two ratios
// (tensor TFLOPS, memory GB/s) decides: below half the GPU is flagged (verified, ranked by what
// it measured), below a quarter it is not verified.
TEST(VerificationTest, GpuSpeedIsJudgedAgainstTheModelsSpec) {
  Inventory inv = FromFixture("a100-sxm4-80gb-1.txt");
  inv.gpus.resize(1);
  const std::map<int, GpuSpecSpeed> specs = {{0, {"a100-80gb", 312, 2039}}};
  struct Case {
    double tflops, gb_s;
    bool verified, flagged;
    double ratio;
    std::string line;  // the failure, or the note
  };
  const std::vector<Case> cases = {
      {280, 1800, true, false, 1800.0 / 2039, ""},  // the lower ratio: memory
      {140, 1800, true, true, 140.0 / 312,
       "gpu-perf.0: flagged: measures 45% of the a100-80gb spec (matrix multiply 140 of 312 "
       "TFLOPS, memory 1800 of 2039 GB/s), below 50%; its offers are ranked by what it measured"},
      // A memory system at a third of its spec flags the GPU however fast it multiplies.
      {300, 680, true, true, 680.0 / 2039, "memory 680 of 2039 GB/s"},
      {60, 1800, false, false, 60.0 / 312,
       "gpu-perf.0: measures 19% of the a100-80gb spec (matrix multiply 60 of 312 TFLOPS, memory "
       "1800 of 2039 GB/s); the floor is 25%"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.tflops) + " TFLOPS, " + std::to_string(c.gb_s) + " GB/s");
    Report r = GoodReport(inv);
    Find(r, "gpu-perf.0")->measurements["matmul_tflops"] = c.tflops;
    Find(r, "gpu-perf.0")->measurements["mem_gb_s"] = c.gb_s;
    Verdict v = Evaluate(inv, r, {}, specs);
    EXPECT_EQ(v.verified, c.verified) << ::testing::PrintToString(v.failures);
    if (!c.verified) {
      EXPECT_THAT(v.failures, ElementsAre(c.line));
      continue;
    }
    ASSERT_EQ(v.gpu_speeds.size(), 1u);
    const GpuSpeed& s = v.gpu_speeds[0];
    EXPECT_EQ(s.flagged, c.flagged);
    EXPECT_DOUBLE_EQ(s.ratio, c.ratio);
    EXPECT_EQ(s.measured_tflops, c.tflops);
    EXPECT_EQ(s.spec_tflops, 312);
    EXPECT_EQ(s.spec_gb_s, 2039);
    if (c.flagged) {
      EXPECT_THAT(v.notes, Contains(HasSubstr(c.line)));
      EXPECT_THAT(s.note, HasSubstr("of the a100-80gb spec"));
    } else {
      EXPECT_THAT(v.notes, Not(Contains(HasSubstr("gpu-perf"))));
    }
  }
}

TEST(VerificationTest, GpuSpeedFailuresAndFiguresNotToBelieve) {
  Inventory inv = FromFixture("a100-sxm4-80gb-1.txt");
  inv.gpus.resize(1);
  const std::map<int, GpuSpecSpeed> specs = {{0, {"a100-80gb", 312, 2039}}};

  // Wrong answers (a counterfeit, or a driver faking its work) fail however fast they came.
  Report wrong = GoodReport(inv);
  Find(wrong, "gpu-perf.0")->measurements["mismatches"] = 1024;
  EXPECT_THAT(Evaluate(inv, wrong, {}, specs).failures,
              ElementsAre("gpu-perf.0: mismatches 1024 is above the maximum 0"));

  Report missing = GoodReport(inv);
  missing.checks.erase(std::remove_if(missing.checks.begin(), missing.checks.end(),
                                      [](const Check& c) { return c.name == "gpu-perf.0"; }),
                       missing.checks.end());
  EXPECT_THAT(Evaluate(inv, missing, {}, specs).failures,
              ElementsAre("check `gpu-perf.0` missing from the report"));

  Report nothing = GoodReport(inv);
  Find(nothing, "gpu-perf.0")->measurements["mem_gb_s"] = 0;
  EXPECT_THAT(Evaluate(inv, nothing, {}, specs).failures,
              ElementsAre(HasSubstr("nothing was measured")));

  Report mode = GoodReport(inv);
  Find(mode, "gpu-perf.0")->measurements["matmul_mode"] = 7;
  EXPECT_THAT(Evaluate(inv, mode, {}, specs).failures,
              ElementsAre(HasSubstr("matmul_mode 7 is not one the server knows")));

  // An absurd figure is noted and not used; the GPU is judged on what is left (memory).
  Report absurd = GoodReport(inv);
  Find(absurd, "gpu-perf.0")->measurements["matmul_tflops"] = 1e12;
  Verdict v = Evaluate(inv, absurd, {}, specs);
  EXPECT_TRUE(v.verified);
  EXPECT_THAT(v.notes, Contains(HasSubstr("is not credible")));
  ASSERT_EQ(v.gpu_speeds.size(), 1u);
  EXPECT_EQ(v.gpu_speeds[0].measured_tflops, 0);

  // An FP32 FMA figure (a GPU without tensor cores) meets no tensor spec: memory alone judges.
  Report fma = GoodReport(inv);
  Find(fma, "gpu-perf.0")->measurements["matmul_mode"] = 2;
  Find(fma, "gpu-perf.0")->measurements["matmul_tflops"] = 9;
  v = Evaluate(inv, fma, {}, specs);
  EXPECT_TRUE(v.verified);
  ASSERT_EQ(v.gpu_speeds.size(), 1u);
  EXPECT_EQ(v.gpu_speeds[0].spec_tflops, 0);
  EXPECT_DOUBLE_EQ(v.gpu_speeds[0].ratio, 3000.0 / 2039);

  // A model without spec figures: the measured figures are kept and said to be uncompared.
  v = Evaluate(inv, GoodReport(inv), {}, {{0, {"rtx5090-32gb", 0, 0}}});
  EXPECT_TRUE(v.verified);
  EXPECT_THAT(v.notes, Contains("gpu-perf.0: no spec figure for rtx5090-32gb to compare with; "
                                "measured 700 TFLOPS, 3000 GB/s"));
  ASSERT_EQ(v.gpu_speeds.size(), 1u);
  EXPECT_EQ(v.gpu_speeds[0].ratio, 0);
}

}  // namespace
}  // namespace sluice::audit
