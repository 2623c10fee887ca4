#include "agent/host_info.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

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

TEST(HostInfoParseTest, DmiBoard) {
  // Values as the kernel exposes them: one line each, newline-terminated.
  EXPECT_EQ(FormatDmiBoard("Dell Inc.\n", "PowerEdge R750xa\n", "Dell Inc.\n", "0PJ5NY\n"),
            "Dell Inc. PowerEdge R750xa / Dell Inc. 0PJ5NY");
  // A desktop board with placeholders in the system fields: only the baseboard names it.
  EXPECT_EQ(FormatDmiBoard("To Be Filled By O.E.M.\n", "To Be Filled By O.E.M.\n", "ASRock\n",
                           "X570 Taichi\n"),
            "ASRock X570 Taichi");
  EXPECT_EQ(FormatDmiBoard("System manufacturer", "System Product Name", "ASUSTeK COMPUTER INC.",
                           "PRIME Z390-A"),
            "ASUSTeK COMPUTER INC. PRIME Z390-A");
  // A VM: same text in both halves is said once.
  EXPECT_EQ(FormatDmiBoard("QEMU", "Standard PC (Q35 + ICH9, 2009)", "", ""),
            "QEMU Standard PC (Q35 + ICH9, 2009)");
  EXPECT_EQ(FormatDmiBoard("Google", "Google Compute Engine", "Google", "Google Compute Engine"),
            "Google Google Compute Engine");
  EXPECT_EQ(FormatDmiBoard("", "", "", ""), "");
  EXPECT_EQ(FormatDmiBoard("Default string", "Default string", "Default string", "Default string"),
            "");
}

TEST(HostInfoParseTest, DmiBoardFromADirectory) {
  namespace fs = std::filesystem;
  std::string tmpl = ::testing::TempDir() + "host_info_dmi_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  std::ofstream(tmpl + "/sys_vendor") << "Supermicro\n";
  std::ofstream(tmpl + "/board_name") << "X11DPG-OT-CPU\n";
  // product_name and board_vendor missing: read as empty.
  EXPECT_EQ(ProbeDmiBoard(tmpl), "Supermicro / X11DPG-OT-CPU");
  EXPECT_EQ(ProbeDmiBoard(tmpl + "/nonexistent"), "");
  fs::remove_all(tmpl);
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
