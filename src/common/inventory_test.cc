#include "common/inventory.h"

#include <gtest/gtest.h>

namespace sluice {

TEST(InventoryTest, RoundTrip) {
  Inventory inv;
  inv.hostname = "h";
  inv.cpu_cores = 8;
  inv.memory_mib = 1024;
  inv.gpu_source = "nvml";
  GpuInfo g;
  g.index = 1;
  g.name = "NVIDIA H100 80GB HBM3";
  g.memory_mib = 81559;
  g.uuid = "GPU-1";
  inv.gpus.push_back(g);
  auto back = InventoryFromJson(ToJson(inv));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, inv);
}

TEST(InventoryTest, WrongTypeNamesField) {
  auto j =
      ParseJson(
          R"({"cpu_cores": 4, "memory_mib": 10, "gpus": [{"index": 0, "name": "x", "memory_mib": "big"}]})")
          .value();
  auto r = InventoryFromJson(j);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("inventory.gpus[0].memory_mib"), std::string::npos);
}

}  // namespace sluice
