#include "agent/nvml_probe.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace sluice {
namespace {

TEST(NvmlGpuProbeTest, ReadsBothGpusFromTheFakeLibrary) {
  NvmlGpuProbe probe(FAKE_NVML_PATH);
  Result<ProbedGpus> r = probe.Probe();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->driver_version, "565.57.01");
  EXPECT_EQ(r->cuda_version, "12.7");  // from 12070
  ASSERT_EQ(r->gpus.size(), 2u);

  GpuInfo want0;
  want0.index = 0;
  want0.uuid = "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1";
  want0.name = "NVIDIA H100 80GB HBM3";
  want0.memory_mib = 81559;
  want0.pci_bus_id = "00000000:18:00.0";
  want0.pci_device_id = 0x233010DE;  // as the recorded H100 SXM5 reports them
  want0.pci_subsystem_id = 0x16C110DE;
  want0.serial = "1654423001593";
  want0.mig_mode = "Disabled";
  want0.compute_capability = "9.0";
  want0.vbios_version = "96.00.74.00.01";
  want0.power_limit_w = 700;
  EXPECT_EQ(r->gpus[0], want0);

  const GpuInfo& g1 = r->gpus[1];
  EXPECT_EQ(g1.index, 1);
  EXPECT_EQ(g1.uuid, "GPU-7c3cadbd-17e5-0913-f69b-c618122ea0cd");
  EXPECT_EQ(g1.pci_bus_id, "00000000:2A:00.0");
  EXPECT_EQ(g1.mig_mode, "Enabled");
  EXPECT_EQ(g1.power_limit_w, 700);  // 699500 mW rounds to the nearest watt
}

TEST(NvmlGpuProbeTest, MissingOptionalEntryPointsLeaveFieldsUnknown) {
  NvmlGpuProbe probe(FAKE_NVML_MINIMAL_PATH);
  Result<ProbedGpus> r = probe.Probe();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->driver_version, "565.57.01");
  EXPECT_EQ(r->cuda_version, "");
  ASSERT_EQ(r->gpus.size(), 2u);
  const GpuInfo& g = r->gpus[0];
  EXPECT_EQ(g.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(g.memory_mib, 81559u);
  EXPECT_EQ(g.mig_mode, "N/A");
  EXPECT_EQ(g.serial, "");
  EXPECT_EQ(g.pci_bus_id, "");
  EXPECT_EQ(g.compute_capability, "");
  EXPECT_EQ(g.vbios_version, "");
  EXPECT_EQ(g.power_limit_w, 0);
}

TEST(NvmlGpuProbeTest, NonexistentLibraryIsUnavailable) {
  NvmlGpuProbe probe("/nonexistent/libnvidia-ml.so.1");
  Result<ProbedGpus> r = probe.Probe();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("/nonexistent/libnvidia-ml.so.1"), std::string::npos);
}

TEST(NvmlGpuProbeTest, LibraryWithoutRequiredSymbolsIsUnavailable) {
  NvmlGpuProbe probe("libc.so.6");  // loads fine, has no NVML entry points
  Result<ProbedGpus> r = probe.Probe();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("nvmlInit_v2"), std::string::npos) << r.status().message();
}

TEST(NvmlGpuProbeTest, InitFailureIsUnavailableWithNvmlsReason) {
  setenv("FAKE_NVML_INIT_FAIL", "1", 1);
  Result<ProbedGpus> r = NvmlGpuProbe(FAKE_NVML_PATH).Probe();
  unsetenv("FAKE_NVML_INIT_FAIL");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("Driver Not Loaded"), std::string::npos)
      << r.status().message();
}

TEST(NvmlGpuProbeTest, ProbingTwiceGivesTheSameAnswer) {
  // Each probe loads, initialises, shuts down and unloads; a second run must not see stale state.
  NvmlGpuProbe probe(FAKE_NVML_PATH);
  auto a = probe.Probe();
  auto b = probe.Probe();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

}  // namespace
}  // namespace sluice
