#include "audit/fingerprint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "agent/nvidia_smi_parser.h"
#include "agent/probe_test_util.h"
#include "common/text.h"

namespace sluice::audit {

// Readable failures: the document, not the struct's bytes.
void PrintTo(const Fingerprint& f, std::ostream* os) { *os << f.canonical_json; }

namespace {

// A machine around the GPUs of a real nvidia-smi recording (parsed by the agent's own parser).
Inventory FromFixture(const std::string& name) {
  Inventory inv;
  std::string text = testing::ReadFileOrEmpty(testing::NvidiaSmiFixture(name));
  auto probed = ParseNvidiaSmi(text);
  EXPECT_TRUE(probed.ok()) << name << ": " << probed.status().ToString();
  if (probed.ok()) {
    inv.driver_version = probed->driver_version;
    inv.cuda_version = probed->cuda_version;
    inv.gpus = probed->gpus;
  }
  inv.hostname = "gpu-host-1";
  inv.os = "Debian GNU/Linux 12 (bookworm)";
  inv.kernel = "6.1.0-18-amd64";
  inv.arch = "x86_64";
  inv.board = "Supermicro SYS-4029GP-TRT / Supermicro X11DPG-OT-CPU";
  inv.cpu_model = "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz";
  inv.cpu_cores = 80;
  inv.memory_mib = 385429;
  inv.disk_free_mib = 812345;
  inv.gpu_source = "nvidia-smi-file";
  inv.cuda_toolkits = {"12.1", "11.8"};
  inv.python_version = "3.11.2";
  inv.torch_builds = {"2.1.0+cu121"};
  inv.container_runtimes = {"docker 24.0.7", "nvidia-container-cli 1.14.3"};
  return inv;
}

// Every top-level nvidia-smi recording (-q text and -q -x XML) in the fixtures.
std::vector<std::string> AllFixtures() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(testing::NvidiaSmiFixture(""))) {
    std::string n = e.path().filename().string();
    if (e.is_regular_file() && (n.ends_with(".txt") || n.ends_with(".xml"))) names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(FingerprintTest, CanonicalJsonIsSortedCompactAndIntegerOnly) {
  Inventory inv;
  inv.arch = "x86_64";
  inv.cpu_model = "AMD EPYC 7763 64-Core Processor";
  inv.cpu_cores = 128;
  inv.memory_mib = 515500;  // 503.4 GiB → 503
  inv.board = "Dell Inc. PowerEdge R750xa";
  GpuInfo g;
  g.uuid = "GPU-1";
  g.name = "NVIDIA A100-SXM4-80GB";
  g.memory_mib = 81920;
  g.pci_bus_id = "00000000:3B:00.0";
  g.serial = "N/A";
  inv.gpus = {g};
  Fingerprint hw = HardwareFingerprint(inv);
  EXPECT_EQ(hw.canonical_json, R"({"arch":"x86_64","board":"Dell Inc. PowerEdge R750xa",)"
                               R"("cpu_cores":128,"cpu_model":"AMD EPYC 7763 64-Core Processor",)"
                               R"("gpus":[{"memory_mib":81920,"name":"NVIDIA A100-SXM4-80GB",)"
                               R"("pci_bus_id":"00000000:3b:00.0","serial":"","uuid":"GPU-1"}],)"
                               R"("memory_gib":503,"scheme":"hardware/v1"})");
  EXPECT_EQ(hw.sha256.size(), 64u);

  inv.driver_version = "535.104.05";
  inv.cuda_version = "12.2";
  inv.torch_builds = {"2.1.0+cu121", "2.0.1"};
  EXPECT_EQ(SoftwareFingerprint(inv).canonical_json,
            R"({"container_runtimes":[],"cuda_toolkits":[],"cuda_version":"12.2",)"
            R"("driver_version":"535.104.05","os":"","python_version":"",)"
            R"("scheme":"software/v1","torch_builds":["2.0.1","2.1.0+cu121"]})");
}

TEST(FingerprintTest, EveryFixtureParsesIntoGpus) {
  std::vector<std::string> names = AllFixtures();
  ASSERT_GE(names.size(), 25u);
  for (const std::string& n : names) EXPECT_FALSE(FromFixture(n).gpus.empty()) << n;
}

TEST(FingerprintTest, GpuOrderAndIndicesDoNotMatter) {
  for (const std::string& n : AllFixtures()) {
    SCOPED_TRACE(n);
    Inventory inv = FromFixture(n);
    Inventory shuffled = inv;
    std::reverse(shuffled.gpus.begin(), shuffled.gpus.end());
    // Re-enumerated: indices follow the new order, as after a CUDA_DEVICE_ORDER change.
    for (size_t i = 0; i < shuffled.gpus.size(); ++i) shuffled.gpus[i].index = static_cast<int>(i);
    if (shuffled.gpus.size() > 2)
      std::rotate(shuffled.gpus.begin(), shuffled.gpus.begin() + 1, shuffled.gpus.end());
    EXPECT_EQ(HardwareFingerprint(shuffled), HardwareFingerprint(inv));
    EXPECT_EQ(SoftwareFingerprint(shuffled), SoftwareFingerprint(inv));
  }
  // The multi-GPU recordings really did get reordered.
  Inventory two = FromFixture("rtx2070-x2-1.xml");
  ASSERT_EQ(two.gpus.size(), 2u);
  ASSERT_NE(two.gpus[0].uuid, two.gpus[1].uuid);
  Inventory reversed = two;
  std::swap(reversed.gpus[0], reversed.gpus[1]);
  EXPECT_EQ(HardwareFingerprint(reversed).sha256, HardwareFingerprint(two).sha256);
}

TEST(FingerprintTest, DifferentRecordingsAreDifferentHardware) {
  std::map<std::string, std::string> seen;  // hardware sha256 → fixture
  std::set<std::string> software;
  auto stem = [](const std::string& n) { return n.substr(0, n.rfind('.')); };
  for (const std::string& n : AllFixtures()) {
    Inventory inv = FromFixture(n);
    auto [it, fresh] = seen.emplace(HardwareFingerprint(inv).sha256, n);
    // h200-1.txt and h200-1.xml are one recording in both formats (tests/fixtures/SOURCES.md).
    EXPECT_TRUE(fresh || stem(it->second) == stem(n))
        << it->second << " and " << n << " fingerprint as the same hardware";
    software.insert(SoftwareFingerprint(inv).sha256);
  }
  // ...and the text and XML parsers read the same hardware and software from it.
  EXPECT_EQ(HardwareFingerprint(FromFixture("h200-1.txt")),
            HardwareFingerprint(FromFixture("h200-1.xml")));
  EXPECT_EQ(SoftwareFingerprint(FromFixture("h200-1.txt")),
            SoftwareFingerprint(FromFixture("h200-1.xml")));
  EXPECT_GT(software.size(), 10u);  // the recordings span many driver / CUDA versions

  // rtx3080-1.xml and rtx3080-2.xml are one card (same UUID) recorded in another slot with
  // another serial field: a card that moved is a hardware change.
  Inventory before = FromFixture("rtx3080-1.xml"), after = FromFixture("rtx3080-2.xml");
  ASSERT_EQ(before.gpus[0].uuid, after.gpus[0].uuid);
  EXPECT_NE(HardwareFingerprint(before), HardwareFingerprint(after));
  // The same machine after a driver upgrade (the second recording's driver): same hardware,
  // different software.
  Inventory upgraded = before;
  upgraded.driver_version = after.driver_version;
  upgraded.cuda_version = after.cuda_version;
  EXPECT_EQ(HardwareFingerprint(upgraded), HardwareFingerprint(before));
  EXPECT_NE(SoftwareFingerprint(upgraded), SoftwareFingerprint(before));
}

TEST(FingerprintTest, HardwareChangesMoveOnlyTheHardwareFingerprint) {
  Inventory base = FromFixture("a100-sxm4-80gb-1.txt");
  ASSERT_EQ(base.gpus.size(), 4u);
  Fingerprint hw = HardwareFingerprint(base), sw = SoftwareFingerprint(base);
  auto changed = [&](auto mutate) {
    Inventory inv = base;
    mutate(inv);
    return std::pair(HardwareFingerprint(inv) != hw, SoftwareFingerprint(inv) != sw);
  };
  using Moves = std::pair<bool, bool>;  // {hardware moved, software moved}
  EXPECT_EQ(changed([](Inventory& i) { i.gpus[2].serial += "1"; }), Moves(true, false));
  EXPECT_EQ(
      changed([](Inventory& i) { i.gpus[1].uuid = "GPU-00000000-0000-0000-0000-000000000000"; }),
      Moves(true, false));
  EXPECT_EQ(changed([](Inventory& i) { i.gpus[0].pci_bus_id = "00000000:99:00.0"; }),
            Moves(true, false));
  EXPECT_EQ(changed([](Inventory& i) { i.gpus.pop_back(); }), Moves(true, false));
  EXPECT_EQ(changed([](Inventory& i) { i.cpu_cores = 64; }), Moves(true, false));
  EXPECT_EQ(changed([](Inventory& i) { i.cpu_model = "AMD EPYC 7763 64-Core Processor"; }),
            Moves(true, false));
  EXPECT_EQ(changed([](Inventory& i) { i.board = "Dell Inc. PowerEdge XE8545"; }),
            Moves(true, false));
  EXPECT_EQ(changed([](Inventory& i) { i.memory_mib += 8 * 1024; }), Moves(true, false));

  EXPECT_EQ(changed([](Inventory& i) { i.driver_version = "550.54.15"; }), Moves(false, true));
  EXPECT_EQ(changed([](Inventory& i) { i.cuda_version = "12.4"; }), Moves(false, true));
  EXPECT_EQ(changed([](Inventory& i) { i.cuda_toolkits.push_back("12.4"); }), Moves(false, true));
  EXPECT_EQ(changed([](Inventory& i) { i.python_version = "3.12.1"; }), Moves(false, true));
  EXPECT_EQ(changed([](Inventory& i) { i.torch_builds = {"2.3.0+cu121"}; }), Moves(false, true));
  EXPECT_EQ(changed([](Inventory& i) { i.container_runtimes = {"podman 4.3.1"}; }),
            Moves(false, true));
  EXPECT_EQ(changed([](Inventory& i) { i.os = "Ubuntu 22.04.4 LTS"; }), Moves(false, true));
}

TEST(FingerprintTest, VolatileAndAdministrativeFactsMoveNothing) {
  Inventory base = FromFixture("a100-sxm4-80gb-1.xml");  // MIG enabled in the recording
  Fingerprint hw = HardwareFingerprint(base), sw = SoftwareFingerprint(base);
  auto same = [&](auto mutate) {
    Inventory inv = base;
    mutate(inv);
    return HardwareFingerprint(inv) == hw && SoftwareFingerprint(inv) == sw;
  };
  EXPECT_TRUE(same([](Inventory& i) { i.hostname = "renamed"; }));
  EXPECT_TRUE(same([](Inventory& i) { i.kernel = "6.1.0-21-amd64"; }));
  EXPECT_TRUE(same([](Inventory& i) { i.disk_free_mib = 1; }));
  EXPECT_TRUE(same([](Inventory& i) { i.gpu_source = "nvml"; }));
  EXPECT_TRUE(same([](Inventory& i) { i.gpus[0].index = 3; }));
  EXPECT_TRUE(same([](Inventory& i) { i.gpus[0].mig_mode = "Disabled"; }));
  EXPECT_TRUE(same([](Inventory& i) { i.gpus[0].power_limit_w = 250; }));
  EXPECT_TRUE(same([](Inventory& i) { i.gpus[0].vbios_version = "92.00.00.00.01"; }));
  EXPECT_TRUE(same([](Inventory& i) { i.gpus[0].compute_capability = ""; }));
  // Probe sources spell the same facts differently.
  EXPECT_TRUE(same([](Inventory& i) { i.gpus[0].pci_bus_id = ToLower(i.gpus[0].pci_bus_id); }));
  EXPECT_TRUE(same([](Inventory& i) { i.cuda_toolkits = {"11.8", "12.1"}; }));
  EXPECT_TRUE(same([](Inventory& i) {
    i.container_runtimes = {"nvidia-container-cli 1.14.3", "docker 24.0.7"};
  }));
  // MemTotal drifting with kernel reservations stays in the same GiB.
  EXPECT_TRUE(same([](Inventory& i) { i.memory_mib -= 100; }));
  EXPECT_TRUE(same([](Inventory& i) { i.memory_mib += 100; }));
}

TEST(FingerprintTest, PlaceholderSerialsAreEmpty) {
  Inventory a = FromFixture("rtx3090-1.txt");
  Inventory b = a;
  for (GpuInfo& g : a.gpus) g.serial = "";
  for (GpuInfo& g : b.gpus) g.serial = "[N/A]";
  EXPECT_EQ(HardwareFingerprint(a), HardwareFingerprint(b));
}

}  // namespace
}  // namespace sluice::audit
