#include "agent/probe.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "agent/host_info.h"
#include "agent/nvidia_smi_probe.h"
#include "agent/probe_command.h"
#include "agent/probe_test_util.h"
#include "common/json.h"

namespace sluice {
namespace {

using testing::NvidiaSmiFixture;

// A GpuProbe with a canned answer, to test the fallback chain without any hardware.
class CannedProbe : public GpuProbe {
 public:
  // `calls`, when given, counts Probe() calls; it outlives the probe, which the chain consumes.
  explicit CannedProbe(Result<ProbedGpus> r, int* calls = nullptr)
      : r_(std::move(r)), calls_(calls) {}
  Result<ProbedGpus> Probe() override {
    if (calls_ != nullptr) ++*calls_;
    return r_;
  }

 private:
  Result<ProbedGpus> r_;
  int* calls_;
};

ProbedGpus OneGpu(const std::string& name) {
  ProbedGpus p;
  p.driver_version = "550.1";
  GpuInfo g;
  g.name = name;
  p.gpus.push_back(g);
  return p;
}

// Writes an executable shell script into a fresh temp dir; stands in for nvidia-smi.
class ScriptDir {
 public:
  ScriptDir() {
    std::string tmpl = ::testing::TempDir() + "probe_test_XXXXXX";
    dir_ = mkdtemp(tmpl.data()) ? tmpl : "";
  }
  ~ScriptDir() {
    for (const auto& f : files_) unlink(f.c_str());
    rmdir(dir_.c_str());
  }
  std::string Write(const std::string& name, const std::string& body) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    chmod(path.c_str(), 0755);
    files_.push_back(path);
    return path;
  }

 private:
  std::string dir_;
  std::vector<std::string> files_;
};

// Sets an environment variable for one test and restores it afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(ProbeGpusWithTest, FallsBackToTheFirstSourceThatAnswers) {
  std::vector<NamedGpuProbe> chain;
  chain.push_back({"nvml", std::make_unique<CannedProbe>(Status::Unavailable("no lib"))});
  chain.push_back({"nvidia-smi", std::make_unique<CannedProbe>(OneGpu("A"))});
  int third_calls = 0;
  chain.push_back({"third", std::make_unique<CannedProbe>(OneGpu("never"), &third_calls)});
  GpuProbeOutcome o = ProbeGpusWith(std::move(chain));
  EXPECT_EQ(o.source, "nvidia-smi");
  ASSERT_EQ(o.probed.gpus.size(), 1u);
  EXPECT_EQ(o.probed.gpus[0].name, "A");
  ASSERT_EQ(o.attempts.size(), 1u);
  EXPECT_EQ(o.attempts[0], "nvml: UNAVAILABLE: no lib");
  EXPECT_EQ(third_calls, 0);  // stops at the first success
}

TEST(ProbeGpusWithTest, NothingAnswersMeansSourceNone) {
  std::vector<NamedGpuProbe> chain;
  chain.push_back({"nvml", std::make_unique<CannedProbe>(Status::Unavailable("no lib"))});
  chain.push_back({"nvidia-smi", std::make_unique<CannedProbe>(Status::InvalidArgument("bad"))});
  GpuProbeOutcome o = ProbeGpusWith(std::move(chain));
  EXPECT_EQ(o.source, "none");
  EXPECT_TRUE(o.probed.gpus.empty());
  EXPECT_EQ(o.attempts.size(), 2u);
}

TEST(ProbeGpusTest, UsesNvmlFromTheEnvironmentOverride) {
  ScopedEnv lib("SLUICE_NVML_LIBRARY", FAKE_NVML_PATH);
  GpuProbeOutcome o = ProbeGpus();
  EXPECT_EQ(o.source, "nvml");
  ASSERT_EQ(o.probed.gpus.size(), 2u);
  EXPECT_EQ(o.probed.gpus[1].uuid, "GPU-7c3cadbd-17e5-0913-f69b-c618122ea0cd");
}

TEST(ProbeGpusTest, FallsBackToNvidiaSmiThenNone) {
  ScriptDir dir;
  std::string smi = dir.Write("nvidia-smi", "cat '" + NvidiaSmiFixture("rtx2070-x2-1.xml") + "'");
  ScopedEnv lib("SLUICE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1");
  {
    ScopedEnv bin("SLUICE_NVIDIA_SMI", smi);
    GpuProbeOutcome o = ProbeGpus();
    EXPECT_EQ(o.source, "nvidia-smi");
    ASSERT_EQ(o.probed.gpus.size(), 2u);
    EXPECT_EQ(o.probed.gpus[0].name, "NVIDIA GeForce RTX 2070");
    ASSERT_EQ(o.attempts.size(), 1u);
    EXPECT_EQ(o.attempts[0].rfind("nvml: UNAVAILABLE", 0), 0u);
  }
  ScopedEnv bin("SLUICE_NVIDIA_SMI", "/nonexistent/nvidia-smi");
  GpuProbeOutcome o = ProbeGpus();
  EXPECT_EQ(o.source, "none");
  EXPECT_TRUE(o.probed.gpus.empty());
  EXPECT_EQ(o.attempts.size(), 2u);
}

TEST(NvidiaSmiGpuProbeTest, AbsentBinaryIsUnavailable) {
  auto r = NvidiaSmiGpuProbe("sluice-no-such-nvidia-smi").Probe();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
}

TEST(NvidiaSmiGpuProbeTest, FailingBinaryIsUnavailableWithItsMessage) {
  ScriptDir dir;
  std::string smi = dir.Write(
      "nvidia-smi",
      "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"\n"
      "exit 9");
  auto r = NvidiaSmiGpuProbe(smi).Probe();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("exit status 9"), std::string::npos);
  EXPECT_NE(r.status().message().find("couldn't communicate"), std::string::npos);
}

TEST(NvidiaSmiGpuProbeTest, HangingBinaryIsKilledAtTheTimeout) {
  ScriptDir dir;
  std::string smi = dir.Write("nvidia-smi", "exec sleep 30");
  auto start = std::chrono::steady_clock::now();
  auto r = NvidiaSmiGpuProbe(smi, std::chrono::milliseconds(200)).Probe();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
}

TEST(NvidiaSmiGpuProbeTest, PassesQueryFlagsAndParsesTheXml) {
  ScriptDir dir;
  // Only answers when called exactly as `nvidia-smi -q -x`.
  std::string smi = dir.Write("nvidia-smi", "[ \"$1 $2\" = \"-q -x\" ] || exit 3\ncat '" +
                                                NvidiaSmiFixture("tesla-t4-1.xml") + "'");
  auto r = NvidiaSmiGpuProbe(smi).Probe();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->gpus.size(), 1u);
  EXPECT_EQ(r->gpus[0].name, "Tesla T4");
  EXPECT_EQ(r->gpus[0].power_limit_w, 70);
}

TEST(FileGpuProbeTest, ReadsARecordingAndNamesTheFileOnErrors) {
  auto ok = FileGpuProbe(NvidiaSmiFixture("l4-1.txt")).Probe();
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->gpus[0].name, "NVIDIA L4");

  auto missing = FileGpuProbe("/nonexistent/smi.xml").Probe();
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/smi.xml"), std::string::npos);

  // The topology matrix is nvidia-smi output, but not a -q report.
  std::string topo = NvidiaSmiFixture("topo/h100-8gpu-nv18-1.txt");
  auto bad = FileGpuProbe(topo).Probe();
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(topo), std::string::npos);
}

TEST(ProbeHostTest, GpusFromARecordedFile) {
  ProbeOptions opts;
  opts.nvidia_smi_file = NvidiaSmiFixture("h100-nvl-1.txt");
  Inventory inv = ProbeHost(opts);
  EXPECT_EQ(inv.gpu_source, "nvidia-smi-file");
  EXPECT_EQ(inv.driver_version, "550.54.14");
  EXPECT_EQ(inv.cuda_version, "12.4");
  ASSERT_EQ(inv.gpus.size(), 2u);
  EXPECT_EQ(inv.gpus[1].uuid, "GPU-db6d02a2-1413-eccf-8a17-d99eac29d365");
  EXPECT_GE(inv.cpu_cores, 1);

  opts.nvidia_smi_file = "/nonexistent/smi.txt";
  EXPECT_FALSE(TryProbeHost(opts).ok());
  Inventory fallback = ProbeHost(opts);  // ProbeHost never fails: no GPUs instead
  EXPECT_EQ(fallback.gpu_source, "none");
  EXPECT_TRUE(fallback.gpus.empty());
  EXPECT_GT(fallback.memory_mib, 0u);
}

TEST(ProbeCommandTest, JsonIsTheInventoryTheAgentWouldPublish) {
  std::ostringstream out, err;
  int rc = ProbeCommand(NvidiaSmiFixture("a100-sxm4-80gb-1.txt"), /*json=*/true, out, err);
  ASSERT_EQ(rc, 0) << err.str();
  EXPECT_EQ(err.str(), "");
  auto j = ParseJson(out.str());
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  auto inv = InventoryFromJson(*j);
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  EXPECT_EQ(inv->gpu_source, "nvidia-smi-file");
  EXPECT_EQ(inv->driver_version, "555.42.02");
  ASSERT_EQ(inv->gpus.size(), 4u);
  EXPECT_EQ(inv->gpus[3].uuid, "GPU-011b2cfe-2b8e-1cb0-19e1-1b764e854dfc");
  EXPECT_EQ(inv->gpus[3].memory_mib, 81920u);
  EXPECT_NE(out.str().find("\n  \"arch\""), std::string::npos);  // pretty-printed
}

TEST(ProbeCommandTest, SummaryHasOneLinePerGpu) {
  std::ostringstream out, err;
  int rc = ProbeCommand(NvidiaSmiFixture("a100-sxm4-80gb-1.xml"), /*json=*/false, out, err);
  ASSERT_EQ(rc, 0) << err.str();
  std::string s = out.str();
  EXPECT_NE(s.find("host:"), std::string::npos);
  EXPECT_NE(s.find("driver 535.54.03, CUDA 12.2"), std::string::npos) << s;
  EXPECT_NE(s.find("  [0] NVIDIA A100-SXM4-80GB, 80.0 GiB, "
                   "GPU-513536b6-7d19-9063-b049-1e69664bb298, MIG Enabled\n"),
            std::string::npos)
      << s;
}

TEST(ProbeCommandTest, BadFileNamesTheFileAndTheError) {
  ScriptDir dir;
  std::string bad = dir.Write("truncated.xml", "");
  std::ofstream(bad) << "<nvidia_smi_log><gpu><product_name>A";
  std::ostringstream out, err;
  EXPECT_EQ(ProbeCommand(bad, false, out, err), 1);
  EXPECT_EQ(out.str(), "");
  EXPECT_NE(err.str().find(bad), std::string::npos) << err.str();
  EXPECT_NE(err.str().find("truncated"), std::string::npos) << err.str();
}

}  // namespace
}  // namespace sluice
