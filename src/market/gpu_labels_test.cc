#include "market/gpu_labels.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "market/gpu_specs_data.h"

namespace sluice::market {
namespace {

using testing::ElementsAre;
using testing::HasSubstr;

struct ProductCase {
  const char* product_name;
  uint64_t memory_mib;
  const char* label;
  const char* form_factor;
};

// Every product name in the shared nvidia-smi fixtures, with its reported FB memory total;
// expected labels written by hand from the cards' marketing names.
const ProductCase kProducts[] = {
    {"NVIDIA A10", 23028, "a10-24gb", ""},
    {"NVIDIA A100-SXM4-80GB", 81920, "a100-80gb", "sxm"},
    {"NVIDIA A100-SXM4-80GB", 19968, "a100-80gb", "sxm"},  // MIG slice: the name wins
    {"NVIDIA A10G", 23028, "a10g-24gb", ""},
    {"NVIDIA A40", 46068, "a40-48gb", ""},
    {"GRID P4-1Q", 1024, "p4vgpu-1gb", ""},
    {"NVIDIA GeForce GTX 1050 Ti", 4096, "gtx1050ti-4gb", ""},
    {"GeForce GTX 1070 Ti", 4096, "gtx1070ti-4gb", ""},
    {"NVIDIA GeForce GTX 680", 2000, "gtx680-2gb", ""},
    {"NVIDIA H100 NVL", 95830, "h100nvl-94gb", "nvl"},
    {"NVIDIA H100 80GB HBM3", 81559, "h100-80gb", "sxm"},
    {"NVIDIA L4", 23034, "l4-24gb", ""},
    {"Quadro P2000", 5120, "p2000-5gb", ""},
    {"NVIDIA RTX 2000 Ada Generation", 16380, "rtx2000ada-16gb", ""},
    {"NVIDIA GeForce RTX 2070", 8192, "rtx2070-8gb", ""},
    {"NVIDIA GeForce RTX 2080", 8192, "rtx2080-8gb", ""},
    {"NVIDIA GeForce RTX 3060", 12288, "rtx3060-12gb", ""},
    {"NVIDIA GeForce RTX 3080", 10240, "rtx3080-10gb", ""},
    {"NVIDIA GeForce RTX 3090", 24576, "rtx3090-24gb", ""},
    {"NVIDIA RTX 4000 SFF Ada Generation", 20475, "rtx4000sffada-20gb", ""},
    {"NVIDIA RTX 4000 Ada Generation", 20475, "rtx4000ada-20gb", ""},
    {"NVIDIA GeForce RTX 4060 Ti", 16380, "rtx4060ti-16gb", ""},
    {"NVIDIA RTX 6000 Ada Generation", 49140, "rtx6000ada-48gb", ""},
    {"NVIDIA RTX A6000", 46068, "rtxa6000-48gb", ""},
    {"Tesla T4", 15360, "t4-16gb", ""},
    // Names from the brief and other NVML outputs.
    {"NVIDIA A100-SXM4-40GB", 40960, "a100-40gb", "sxm"},
    {"NVIDIA A100-PCIE-40GB", 40536, "a100-40gb", "pcie"},
    {"NVIDIA H100 PCIe", 81559, "h100-80gb", "pcie"},
    {"Tesla V100-SXM2-16GB", 16160, "v100-16gb", "sxm"},
    {"Tesla V100-SXM2-32GB", 32510, "v100-32gb", "sxm"},
    {"NVIDIA GeForce RTX 2080 Ti", 11264, "rtx2080ti-11gb", ""},
    {"NVIDIA GeForce RTX 4090", 24564, "rtx4090-24gb", ""},
    {"NVIDIA H200", 143771, "h200-141gb", ""},
};

TEST(CanonicalGpuLabel, EveryFixtureProductName) {
  for (const auto& c : kProducts) {
    EXPECT_EQ(CanonicalGpuLabel(c.product_name, c.memory_mib), c.label) << c.product_name;
    EXPECT_EQ(FormFactor(c.product_name), c.form_factor) << c.product_name;
  }
}

TEST(CanonicalGpuLabel, MemoryFallsBackToRoundingWhenNoNominalSizeFits) {
  EXPECT_EQ(CanonicalGpuLabel("Mystery Card", 27 * 1024), "mysterycard-27gb");
  EXPECT_EQ(CanonicalGpuLabel("", 8192), "gpu-8gb");
}

TEST(KnownGpuLabels, IncludeCsvModelsWithEveryMemoryVariantAndFixtureModels) {
  const std::vector<std::string> known = KnownGpuLabels();
  EXPECT_TRUE(std::is_sorted(known.begin(), known.end()));
  for (const char* want :
       {"a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb", "l4-24gb", "t4-16gb", "v100-16gb",
        "v100-32gb", "rtx4090-24gb", "a10-24gb", "a10g-24gb", "h100nvl-94gb", "rtx3090-24gb",
        "gh200-96gb", "gh200-141gb", "b200-180gb", "l40s-48gb", "rtx6000ada-48gb", "p2000-5gb"}) {
    EXPECT_TRUE(std::binary_search(known.begin(), known.end(), want)) << want;
  }
  for (const auto& c : kProducts) {
    if (std::string_view(c.product_name).starts_with("NVIDIA A100-PCIE")) break;  // brief-only
    EXPECT_TRUE(std::binary_search(known.begin(), known.end(), c.label)) << c.label;
  }
}

TEST(EmbeddedCsv, IsTheDataFileWithQuotesIntact) {
  EXPECT_TRUE(kGpuSpecsCsv.starts_with("gpu_model,vendor,memory_gb"));
  EXPECT_NE(kGpuSpecsCsv.find("\"NVLink 2: 6 links, 300 GB/s bidirectional\""), std::string::npos);
  EXPECT_NE(kGpuSpecsCsv.find("'FP16 Tensor Core'"), std::string::npos);
}

TEST(ResolveGpuLabel, ExactLabel) {
  auto r = ResolveGpuLabel("a100-80gb");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_THAT(r->labels, ElementsAre("a100-80gb"));
  EXPECT_EQ(r->note, "");
}

TEST(ResolveGpuLabel, ShortForms) {
  struct Case {
    const char* text;
    std::vector<std::string> labels;
    const char* note;
  };
  const Case cases[] = {
      {"A100", {"a100-40gb", "a100-80gb"}, "a100 covers a100-40gb, a100-80gb"},
      {"a100", {"a100-40gb", "a100-80gb"}, "a100 covers a100-40gb, a100-80gb"},
      {"nvidia a100", {"a100-40gb", "a100-80gb"}, "a100 covers a100-40gb, a100-80gb"},
      // The 64, 94 and 96 GB SXM5 variants are known by their PCI ids (gpu_identity.h).
      {"h100",
       {"h100-64gb", "h100-80gb", "h100-94gb", "h100-96gb"},
       "h100 covers h100-64gb, h100-80gb, h100-94gb, h100-96gb"},
      {"V100", {"v100-16gb", "v100-32gb"}, "v100 covers v100-16gb, v100-32gb"},
      {"H100-80GB", {"h100-80gb"}, ""},
      {"  T4 ", {"t4-16gb"}, ""},
      {"NVIDIA GeForce RTX 4090", {"rtx4090-24gb"}, "rtx4090 covers rtx4090-24gb"},
      {"NVIDIA A100-SXM4-80GB", {"a100-80gb"}, "`NVIDIA A100-SXM4-80GB` is a100-80gb"},
      {"rtx 3090", {"rtx3090-24gb"}, "rtx3090 covers rtx3090-24gb"},
  };
  for (const auto& c : cases) {
    auto r = ResolveGpuLabel(c.text);
    ASSERT_TRUE(r.ok()) << c.text << ": " << r.status().message();
    EXPECT_EQ(r->labels, c.labels) << c.text;
    if (*c.note) {
      EXPECT_EQ(r->note, c.note) << c.text;
    }
  }
}

TEST(ResolveGpuLabel, MisspellingsGetSuggestions) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"a1000", "unknown GPU `a1000`; did you mean a100-40gb, a100-80gb?"},
      {"rtx-4090", "unknown GPU `rtx-4090`; did you mean rtx4090-24gb?"},
      {"a100-48gb", "unknown GPU `a100-48gb`; did you mean a100-40gb, a100-80gb?"},
      {"h2o", "unknown GPU `h2o`; did you mean"},
      // A memory size without its unit (issue 13 item 4).
      {"a100-40", "unknown GPU `a100-40`; did you mean a100-40gb? (memory is written"},
      {"h100 80", "unknown GPU `h100 80`; did you mean h100-80gb?"},
      {"NVIDIA A100 80G", "did you mean a100-80gb?"},
  };
  for (const auto& c : cases) {
    auto r = ResolveGpuLabel(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr(c.message)) << c.text;
  }
  auto h10 = ResolveGpuLabel("h10");
  ASSERT_FALSE(h10.ok());
  EXPECT_THAT(h10.status().message(), HasSubstr("h100-80gb"));
  auto junk = ResolveGpuLabel("zzzzzzzzzzzz");
  ASSERT_FALSE(junk.ok());
  EXPECT_THAT(junk.status().message(), HasSubstr("unknown GPU `zzzzzzzzzzzz`"));
  EXPECT_FALSE(ResolveGpuLabel("").ok());
}

}  // namespace
}  // namespace sluice::market
