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
  inv.cuda_toolkits = {"12.1", "11.8"};
  inv.python_version = "3.11.2";
  inv.torch_builds = {"2.1.0+cu121", "2.0.1"};
  inv.board = "Dell Inc. PowerEdge R750xa / Dell Inc. 0PJ5NY";
  inv.container_runtimes = {"docker 24.0.7", "nvidia-container-cli 1.14.3"};
  auto back = InventoryFromJson(ToJson(inv));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, inv);
}

TEST(InventoryTest, SoftwareFactsAreJsonArraysAndAString) {
  Inventory inv;
  inv.cuda_toolkits = {"12.4"};
  inv.python_version = "3.12.1";
  inv.torch_builds = {"2.3.0+cu121"};
  Json j = ToJson(inv);
  EXPECT_EQ(j["cuda_toolkits"], Json::array({"12.4"}));
  EXPECT_EQ(j["python_version"], "3.12.1");
  EXPECT_EQ(j["torch_builds"], Json::array({"2.3.0+cu121"}));
}

TEST(InventoryTest, OldAgentsWithoutSoftwareFactsStillParse) {
  // What an agent from before software probing sent: no cuda_toolkits, python_version or
  // torch_builds at all.
  auto j = ParseJson(R"({"hostname": "old", "cpu_cores": 4, "memory_mib": 10, "gpus": []})");
  ASSERT_TRUE(j.ok());
  auto r = InventoryFromJson(*j);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->cuda_toolkits.empty());
  EXPECT_EQ(r->python_version, "");
  EXPECT_TRUE(r->torch_builds.empty());
  EXPECT_EQ(r->board, "");
  EXPECT_TRUE(r->container_runtimes.empty());

  // Explicit nulls read as absent too.
  auto n = ParseJson(
      R"({"cpu_cores": 4, "memory_mib": 10, "cuda_toolkits": null, "python_version": null,
          "torch_builds": null})");
  ASSERT_TRUE(n.ok());
  auto rn = InventoryFromJson(*n);
  ASSERT_TRUE(rn.ok()) << rn.status().ToString();
  EXPECT_TRUE(rn->cuda_toolkits.empty());
  EXPECT_TRUE(rn->torch_builds.empty());
}

TEST(InventoryTest, WrongSoftwareTypesNameTheField) {
  struct Case {
    const char* extra;
    const char* field;
  };
  for (const Case& c : {
           Case{R"("cuda_toolkits": "12.1")", "inventory.cuda_toolkits: expected an array"},
           Case{R"("cuda_toolkits": ["12.1", 11.8])",
                "inventory.cuda_toolkits[1]: expected a string"},
           Case{R"("python_version": 3.11)", "inventory.python_version: expected a string"},
           Case{R"("torch_builds": {"a": 1})", "inventory.torch_builds: expected an array"},
           Case{R"("torch_builds": [null])", "inventory.torch_builds[0]: expected a string"},
           Case{R"("board": ["x"])", "inventory.board: expected a string"},
           Case{R"("container_runtimes": "docker 24.0.7")",
                "inventory.container_runtimes: expected an array"},
           Case{R"("container_runtimes": [1])",
                "inventory.container_runtimes[0]: expected a string"},
       }) {
    auto j = ParseJson(std::string(R"({"cpu_cores": 4, "memory_mib": 10, )") + c.extra + "}");
    ASSERT_TRUE(j.ok()) << c.extra;
    auto r = InventoryFromJson(*j);
    ASSERT_FALSE(r.ok()) << c.extra;
    EXPECT_NE(r.status().message().find(c.field), std::string::npos) << r.status().message();
  }
}

TEST(InventoryTest, TooManyToolkitsIsAnError) {
  Json j = {{"cpu_cores", 1}, {"memory_mib", 1}, {"cuda_toolkits", Json::array()}};
  for (int i = 0; i < 65; ++i) j["cuda_toolkits"].push_back("12." + std::to_string(i));
  auto r = InventoryFromJson(j);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("inventory.cuda_toolkits"), std::string::npos);
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
