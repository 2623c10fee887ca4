#include "market/gpu_identity.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "market/gpu_labels.h"

namespace sluice::market {
namespace {

struct IdentityCase {
  const char* product_name;
  uint64_t memory_mib;
  uint32_t device_id;     // NVML encoding, (device << 16) | vendor; 0 unknown
  uint32_t subsystem_id;  // the same
  const char* label;
  const char* form_factor;
  const char* named_from;
};

// Every nvidia-smi fixture under tests/fixtures (product name, FB total and PCI ids as recorded;
// tests/fixtures/SOURCES.md), then the models issue 13 names. Expected labels written by hand.
const IdentityCase kCases[] = {
    {"NVIDIA A10", 23028, 0x223610DE, 0x148210DE, "a10-24gb", "", "pci.ids"},
    {"NVIDIA A100-SXM4-80GB", 81920, 0x20B210DE, 0x147F10DE, "a100-80gb", "sxm", "pci.ids"},
    // MIG enabled: the slice's memory is reported; pci.ids names the card's.
    {"NVIDIA A100-SXM4-80GB", 19968, 0x20B210DE, 0x147F10DE, "a100-80gb", "sxm", "pci.ids"},
    // Zeroed by the hypervisor (a10g-1.xml): only the name is left.
    {"NVIDIA A10G", 23028, 0, 0, "a10g-24gb", "", "product-name"},
    {"NVIDIA A40", 46068, 0x223510DE, 0x145A10DE, "a40-48gb", "", "pci.ids"},
    // A vGPU reports its parent's ids (a Tesla P4) with its profile's memory.
    {"GRID P4-1Q", 1024, 0x1BB310DE, 0x120410DE, "p4vgpu-1gb", "", "product-name"},
    {"NVIDIA GeForce GTX 1050 Ti", 4096, 0x1C8210DE, 0x8C961462, "gtx1050ti-4gb", "", "pci.ids"},
    {"NVIDIA GeForce GTX 680", 2000, 0x118010DE, 0x353C1458, "gtx680-2gb", "", "pci.ids"},
    // pci.ids (2023) calls 0x2321 only "GH100"; the supplement knows it.
    {"NVIDIA H100 NVL", 95830, 0x232110DE, 0x183910DE, "h100nvl-94gb", "nvl", "pci-supplement"},
    {"NVIDIA H100 80GB HBM3", 81559, 0x233010DE, 0x16C110DE, "h100-80gb", "sxm", "pci.ids"},
    {"NVIDIA L4", 23034, 0x27B810DE, 0x16CA10DE, "l4-24gb", "", "pci.ids"},
    {"Quadro P2000", 5120, 0x1C3010DE, 0x11B31028, "p2000-5gb", "", "pci.ids"},
    {"NVIDIA RTX 2000 Ada Generation", 16380, 0x28B010DE, 0x187010DE, "rtx2000ada-16gb", "pcie",
     "pci-supplement"},
    {"NVIDIA GeForce RTX 2070", 8192, 0x1F0210DE, 0x251619DA, "rtx2070-8gb", "", "pci.ids"},
    // pci.ids: "TU104 [GeForce RTX 2080 Rev. A]": the revision is not a model.
    {"NVIDIA GeForce RTX 2080", 8192, 0x1E8710DE, 0x250019DA, "rtx2080-8gb", "", "pci.ids"},
    {"NVIDIA GeForce RTX 3060", 12288, 0x248710DE, 0x36583842, "rtx3060-12gb", "", "pci.ids"},
    // pci.ids: "GA102 [GeForce RTX 3080 Lite Hash Rate]".
    {"NVIDIA GeForce RTX 3080", 10240, 0x221610DE, 0x22161569, "rtx3080-10gb", "", "pci.ids"},
    {"NVIDIA GeForce RTX 3090", 24576, 0x220410DE, 0x403B1458, "rtx3090-24gb", "", "pci.ids"},
    {"NVIDIA RTX 4000 SFF Ada Generation", 20475, 0x27B010DE, 0x16FA10DE, "rtx4000sffada-20gb", "",
     "pci.ids"},
    // Not in pci.ids (2023); in the supplement.
    {"NVIDIA RTX 4000 Ada Generation", 20475, 0x27B210DE, 0x181B10DE, "rtx4000ada-20gb", "pcie",
     "pci-supplement"},
    {"NVIDIA GeForce RTX 4060 Ti", 16380, 0x280310DE, 0x51741462, "rtx4060ti-16gb", "", "pci.ids"},
    // pci.ids: "AD102GL [L6000 / RTX 6000 Ada Generation]": the alternative the name agrees with.
    {"NVIDIA RTX 6000 Ada Generation", 49140, 0x26B110DE, 0x16A110DE, "rtx6000ada-48gb", "",
     "pci.ids"},
    {"NVIDIA RTX A6000", 46068, 0x223010DE, 0x145910DE, "rtxa6000-48gb", "", "pci.ids"},
    {"Tesla T4", 15360, 0x1EB810DE, 0x12A210DE, "t4-16gb", "", "pci.ids"},

    // A driver older than the card prints "Graphics Device": the id says which GPU it is, from
    // the supplement (an id only it knows) or from pci.ids (one it knows).
    {"NVIDIA Graphics Device", 6144, 0x258410DE, 0, "rtx3050-6gb", "pcie", "pci-supplement"},
    {"Graphics Device", 24576, 0x220410DE, 0, "rtx3090-24gb", "", "pci.ids"},
    {"Graphics Device", 6144, 0, 0, "device-6gb", "", "product-name"},  // no id: as before
    // GH200 by its GPU's memory, not the superchip's 480 GB.
    {"NVIDIA GH200 480GB", 97871, 0x234210DE, 0x180910DE, "gh200-96gb", "superchip",
     "pci-supplement"},
    {"NVIDIA GH200 480GB", 97871, 0, 0, "gh200-96gb", "superchip", "product-name"},
    {"NVIDIA H200", 143771, 0x233510DE, 0, "h200-141gb", "sxm", "pci-supplement"},
    // The real one (tests/fixtures/nvidia-smi/h200-1.txt): subsystem 18BF, as the supplement cites.
    {"NVIDIA H200", 143771, 0x233510DE, 0x18BF10DE, "h200-141gb", "sxm", "pci-supplement"},
    {"NVIDIA L40S", 46068, 0x26B910DE, 0, "l40s-48gb", "pcie", "pci-supplement"},
    {"NVIDIA GeForce RTX 5090", 32607, 0x2B8510DE, 0, "rtx5090-32gb", "pcie", "pci-supplement"},
    {"NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", 97887, 0x2BB410DE, 0,
     "rtxpro6000-96gb", "maxq", "pci-supplement"},
    {"NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", 97887, 0, 0, "rtxpro6000-96gb",
     "maxq", "product-name"},
    {"NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, 0x2BB510DE, 0, "rtxpro6000-96gb",
     "server", "pci-supplement"},
    {"NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 97887, 0x2BB110DE, 0, "rtxpro6000-96gb",
     "workstation", "pci-supplement"},
    // One device id, two cards: the subsystem id tells the A16 from the A2.
    {"NVIDIA A16", 15356, 0x25B610DE, 0x14A910DE, "a16-16gb", "pcie", "pci-supplement"},
    {"NVIDIA A2", 15356, 0x25B610DE, 0x157E10DE, "a2-16gb", "pcie", "pci-supplement"},
    // Not NVIDIA's vendor id: the tables are NVIDIA's, so the name decides.
    {"AMD Instinct MI300X", 196592, 0x74A11002, 0, "mi300x-192gb", "", "product-name"},
};

TEST(IdentifyGpu, EveryFixtureAndEveryModelTheIssueNames) {
  for (const auto& c : kCases) {
    GpuIdentity id = IdentifyGpu(c.product_name, c.memory_mib, c.device_id, c.subsystem_id);
    EXPECT_EQ(id.label, c.label) << c.product_name << " " << std::hex << c.device_id;
    EXPECT_EQ(id.form_factor, c.form_factor) << c.product_name << " " << std::hex << c.device_id;
    EXPECT_EQ(id.named_from, c.named_from) << c.product_name << " " << std::hex << c.device_id;
  }
}

TEST(IdentifyGpu, AFixtureNamedByItsIdGetsTheLabelItsProductNameGives) {
  // Naming by PCI id must not move a node that was labelled by name to a different label.
  for (const auto& c : kCases) {
    if (std::string_view(c.named_from) == "product-name") continue;
    if (std::string_view(c.product_name).find("Graphics Device") != std::string_view::npos)
      continue;
    EXPECT_EQ(IdentifyGpu(c.product_name, c.memory_mib, c.device_id, c.subsystem_id).label,
              CanonicalGpuLabel(c.product_name, c.memory_mib))
        << c.product_name;
  }
}

TEST(IdentifyGpu, TheRegistryKnowsEveryLabelTheSupplementProduces) {
  const std::vector<std::string> known = KnownGpuLabels();
  const std::vector<std::string> supplement = SupplementLabels();
  EXPECT_GE(supplement.size(), 40u);
  for (const auto& label : supplement) {
    EXPECT_TRUE(std::binary_search(known.begin(), known.end(), label)) << label;
  }
  for (const char* label : {"rtxpro6000-96gb", "gh200-96gb", "rtx5090-32gb", "h200-141gb"}) {
    EXPECT_TRUE(std::binary_search(known.begin(), known.end(), label)) << label;
  }
  auto r = ResolveGpuLabel("RTX PRO 6000");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->labels, std::vector<std::string>{"rtxpro6000-96gb"});
}

TEST(ParsePciId, ReadsWhatNvidiaSmiPrintsAndRefusesWhatIsNoId) {
  EXPECT_EQ(ParsePciId("0x233010DE"), 0x233010DEu);
  EXPECT_EQ(ParsePciId("233010de"), 0x233010DEu);  // XML has no 0x
  EXPECT_EQ(ParsePciId(" 0x16C110DE "), 0x16C110DEu);
  EXPECT_EQ(ParsePciId("000000DE"), 0u) << "zeroed by a hypervisor";
  EXPECT_EQ(ParsePciId("0x23300000"), 0u);
  EXPECT_EQ(ParsePciId("[REDACTED]"), 0u);
  EXPECT_EQ(ParsePciId("N/A"), 0u);
  EXPECT_EQ(ParsePciId(""), 0u);
  EXPECT_EQ(ParsePciId("0x1233010DE"), 0u) << "more than 32 bits";
}

}  // namespace
}  // namespace sluice::market
