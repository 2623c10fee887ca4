#include "cli/dry_run.h"

#include <gtest/gtest.h>

#include "spec/job_spec.h"

namespace sluice::cli {
namespace {

spec::RuntimeContract Contract(const std::string& runtime_yaml) {
  auto r = spec::ParseJobSpecYaml("run: x\nruntime: " + runtime_yaml + "\n", "job.yaml");
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r->runtime : spec::RuntimeContract{};
}

TEST(CheckLocal, JudgesEachFactByTheServersTerm) {
  LocalFacts gpu_box;
  gpu_box.gpu_source = "nvml";
  gpu_box.driver_version = "535.104.05";
  gpu_box.cuda_version = "12.2";
  gpu_box.torch_builds = {"2.1.0+cu121"};
  gpu_box.python_version = "3.11.4";
  const auto checks = CheckLocal(
      Contract("{python: \"3.10\", torch: \"2.1.0\", driver: \">=535\", cuda: \"12.1\"}"), gpu_box);
  ASSERT_EQ(checks.size(), 4u);  // contract order, whatever the YAML order
  EXPECT_EQ(checks[0].fact, spec::RuntimeFact::kCuda);
  EXPECT_EQ(checks[0].wants, "12.1");
  EXPECT_EQ(checks[0].term, "cuda>=12.1");
  EXPECT_EQ(checks[0].local, "12.2");
  EXPECT_TRUE(checks[0].ok);
  EXPECT_EQ(checks[1].term, "driver>=535");
  EXPECT_TRUE(checks[1].ok);
  EXPECT_EQ(checks[2].term, "torch=2.1.0");
  EXPECT_TRUE(checks[2].ok);
  EXPECT_EQ(checks[3].term, "python=3.10");
  EXPECT_EQ(checks[3].local, "3.11.4");
  EXPECT_FALSE(checks[3].ok);
  EXPECT_EQ(ToJson(checks[3]), (Json{{"fact", "python"},
                                     {"wants", "3.10"},
                                     {"term", "python=3.10"},
                                     {"local", "3.11.4"},
                                     {"ok", false}}));
}

TEST(CheckLocal, AMachineWithoutDriverOrPythonSaysWhy) {
  LocalFacts cpu_box;
  cpu_box.gpu_source = "none";
  const auto checks = CheckLocal(
      Contract("{cuda: \"12.1\", driver: \"535\", torch: \"2.1.0\", python: \"3.10\"}"), cpu_box);
  ASSERT_EQ(checks.size(), 4u);
  for (const auto& c : checks) EXPECT_FALSE(c.ok) << spec::Name(c.fact);
  EXPECT_EQ(checks[0].local, "none (no NVIDIA driver)");
  EXPECT_EQ(checks[1].local, "none (no NVIDIA driver)");
  EXPECT_EQ(checks[1].term, "driver in [535,535.*]");
  EXPECT_EQ(checks[2].local, "none (no python3)");
  EXPECT_EQ(checks[3].local, "none (no python3 on PATH)");
  cpu_box.python_version = "3.10.12";
  const auto with_python = CheckLocal(Contract("{torch: \"2.1.0\", python: \"3.10\"}"), cpu_box);
  ASSERT_EQ(with_python.size(), 2u);
  EXPECT_EQ(with_python[0].local, "none (python3 cannot import torch)");
  EXPECT_TRUE(with_python[1].ok);
  EXPECT_TRUE(CheckLocal(spec::RuntimeContract{}, cpu_box).empty());
}

}  // namespace
}  // namespace sluice::cli
