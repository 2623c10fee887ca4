#include "agent/host_info.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(HostInfoParseTest, OsReleasePrettyName) {
  EXPECT_EQ(ParseOsReleasePrettyName("PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n"
                                     "NAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\n"),
            "Debian GNU/Linux 12 (bookworm)");
  EXPECT_EQ(ParseOsReleasePrettyName("NAME=Ubuntu\nPRETTY_NAME='Ubuntu 22.04.4 LTS'\n"),
            "Ubuntu 22.04.4 LTS");
  EXPECT_EQ(ParseOsReleasePrettyName("PRETTY_NAME=Arch\n"), "Arch");
  EXPECT_EQ(ParseOsReleasePrettyName("PRETTY_NAME=\"say \\\"hi\\\"\"\n"), "say \"hi\"");
  EXPECT_EQ(ParseOsReleasePrettyName("NAME=NoPretty\n"), "");
}

TEST(HostInfoParseTest, CpuModelOnX86AndArm) {
  const char* x86 =
      "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n"
      "model\t\t: 1\nmodel name\t: AMD EPYC 7763 64-Core Processor\ncpu MHz\t\t: 2445.406\n"
      "\nprocessor\t: 1\nmodel name\t: AMD EPYC 7763 64-Core Processor\n";
  EXPECT_EQ(ParseCpuModel(x86), "AMD EPYC 7763 64-Core Processor");
  const char* pi =
      "processor\t: 0\nBogoMIPS\t: 108.00\nCPU implementer\t: 0x41\n\n"
      "Hardware\t: BCM2835\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n";
  EXPECT_EQ(ParseCpuModel(pi), "Raspberry Pi 4 Model B Rev 1.4");
  EXPECT_EQ(ParseCpuModel("processor : 0\ncpu : POWER9 (raw), altivec supported\n"),
            "POWER9 (raw), altivec supported");
  EXPECT_EQ(ParseCpuModel("processor : 0\nBogoMIPS : 50.00\n"), "");
}

TEST(HostInfoParseTest, MemTotal) {
  auto m = ParseMemTotalMib("MemTotal:       65849472 kB\nMemFree:         1234 kB\n");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(*m, 64306u);  // 65849472 / 1024, rounded down
  EXPECT_EQ(ParseMemTotalMib("MemFree: 1 kB\n").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseMemTotalMib("MemTotal: lots kB\n").status().code(), StatusCode::kInvalidArgument);
}

TEST(HostInfoRealMachineTest, ProbesThisMachine) {
  ProbeOptions opts;
  opts.skip_gpus = true;
  Inventory inv = ProbeHost(opts);
  EXPECT_GE(inv.cpu_cores, 1);
  EXPECT_GT(inv.memory_mib, 0u);
  EXPECT_FALSE(inv.hostname.empty());
  EXPECT_FALSE(inv.kernel.empty());
  EXPECT_FALSE(inv.arch.empty());
  EXPECT_GT(inv.disk_free_mib, 0u);
  EXPECT_EQ(inv.gpu_source, "none");
  EXPECT_TRUE(inv.gpus.empty());
  EXPECT_EQ(AvailableCpuCores(), inv.cpu_cores);
}

}  // namespace
}  // namespace sluice
