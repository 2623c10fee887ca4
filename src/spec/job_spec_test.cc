#include "spec/job_spec.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>

namespace sluice::spec {
namespace {

constexpr char kFull[] = R"(name: train-resnet
resources:
  gpu: a100-80gb
  gpus: 2
  cpus: 8
  memory_gb: 32.5
run: |
  python3 train.py --epochs 3
env:
  LR: 0.1
  DEBUG: true
  MODE: fast
workdir: ./src
max_price_per_hour: 3.5
priority: -7
expected_hours: 12.5
lifecycle:
  capacity: interruptible-then-on-demand
  checkpoint_interval: 2h30m
  checkpoint_size_gb: 40.5
runtime:
  cuda: "12.1"
  driver: ">=535"
  torch: 2.1.0+cu121
  python: "3.10"
)";

// kFull as it was before expected_hours and lifecycle existed.
constexpr char kOldFull[] = R"(name: train-resnet
resources: {gpu: a100-80gb, gpus: 2, cpus: 8, memory_gb: 32.5}
run: python3 train.py
env: {LR: 0.1}
workdir: ./src
max_price_per_hour: 3.5
priority: -7
)";

TEST(JobSpecYaml, FullSpecParsesToExpectedStruct) {
  auto r = ParseJobSpecYaml(kFull, "job.yaml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  JobSpec want;
  want.name = "train-resnet";
  want.resources.gpu = "a100-80gb";
  want.resources.gpus = 2;
  want.resources.cpus = 8;
  want.resources.memory_gb = 32.5;
  want.run = "python3 train.py --epochs 3\n";
  want.env = {{"LR", "0.1"}, {"DEBUG", "true"}, {"MODE", "fast"}};
  want.workdir = "./src";
  want.max_price_per_hour = 3.5;
  want.priority = -7;
  want.expected_hours = 12.5;
  want.lifecycle.capacity = Capacity::kInterruptibleThenOnDemand;
  want.lifecycle.checkpoint_interval_s = 9000;
  want.lifecycle.checkpoint_size_gb = 40.5;
  want.runtime.cuda = VersionConstraint{VersionOp::kGe, "12.1"};
  want.runtime.driver = VersionConstraint{VersionOp::kGe, "535"};
  want.runtime.torch = VersionConstraint{VersionOp::kEq, "2.1.0+cu121"};
  want.runtime.python = VersionConstraint{VersionOp::kEq, "3.10"};
  EXPECT_EQ(*r, want);
}

TEST(JobSpecYaml, SpecWithoutNewFieldsKeepsDefaultsAndSerializesAsBefore) {
  auto r = ParseJobSpecYaml(kOldFull, "job.yaml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->expected_hours.has_value());
  EXPECT_EQ(r->lifecycle.capacity, Capacity::kOnDemand);
  EXPECT_FALSE(r->lifecycle.checkpoint_interval_s.has_value());
  EXPECT_EQ(r->lifecycle.checkpoint_size_gb, 0.0);
  EXPECT_TRUE(r->runtime.empty());
  EXPECT_EQ(r->lifecycle, Lifecycle{});
  const Json j = ToJson(*r);
  std::set<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.insert(k);
  EXPECT_EQ(keys, (std::set<std::string>{"name", "resources", "run", "env", "workdir",
                                         "max_price_per_hour", "priority"}));
  auto back = JobSpecFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, *r);

  // An empty or null lifecycle is the default too.
  for (const char* text : {"run: x\nlifecycle: {}\n", "run: x\nlifecycle:\n",
                           "run: x\nlifecycle:\n  capacity:\n  checkpoint_interval:\n"}) {
    auto e = ParseJobSpecYaml(text, "job.yaml");
    ASSERT_TRUE(e.ok()) << text << ": " << e.status().message();
    EXPECT_EQ(e->lifecycle, Lifecycle{}) << text;
    EXPECT_FALSE(ToJson(*e).contains("lifecycle")) << text;
  }
}

TEST(JobSpecYaml, EveryCapacityParses) {
  const std::pair<const char*, Capacity> cases[] = {
      {"on-demand", Capacity::kOnDemand},
      {"interruptible", Capacity::kInterruptible},
      {"interruptible-then-on-demand", Capacity::kInterruptibleThenOnDemand},
  };
  for (const auto& [name, want] : cases) {
    auto r =
        ParseJobSpecYaml("run: x\nlifecycle:\n  capacity: " + std::string(name) + "\n", "job.yaml");
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().message();
    EXPECT_EQ(r->lifecycle.capacity, want) << name;
    EXPECT_FALSE(r->lifecycle.checkpoint_interval_s.has_value()) << name;
    EXPECT_EQ(Name(want), name);
    EXPECT_EQ(CapacityFromName(name), want);
    auto j = JobSpecFromJson({{"run", "x"}, {"lifecycle", {{"capacity", name}}}});
    ASSERT_TRUE(j.ok()) << name << ": " << j.status().message();
    EXPECT_EQ(j->lifecycle.capacity, want) << name;
  }
  EXPECT_EQ(CapacityFromName("On-Demand"), std::nullopt);
  EXPECT_EQ(CapacityFromName("spot"), std::nullopt);
  EXPECT_EQ(CapacityFromName(""), std::nullopt);
}

TEST(JobSpecYaml, MaxRestartsAndGracePeriod) {
  auto r = ParseJobSpecYaml("run: x\nlifecycle: {max_restarts: 5, grace_period: 2m}\n", "job.yaml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->lifecycle.max_restarts, 5);
  EXPECT_EQ(r->lifecycle.grace_period_s, 120);
  auto back = JobSpecFromJson(ToJson(*r));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->lifecycle, r->lifecycle);
  auto defaults = ParseJobSpecYaml("run: x\n", "job.yaml");
  EXPECT_EQ(defaults->lifecycle.max_restarts, 3);
  EXPECT_EQ(defaults->lifecycle.grace_period_s, 30);
  auto zero = ParseJobSpecYaml("run: x\nlifecycle: {max_restarts: 0, grace_period: 0}\n", "j.yaml");
  ASSERT_TRUE(zero.ok()) << zero.status().message();
  EXPECT_EQ(zero->lifecycle.max_restarts, 0);
  auto bad = ParseJobSpecYaml("run: x\nlifecycle: {max_restarts: -1}\n", "job.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "job.yaml:2:27: lifecycle.max_restarts: must be between 0 and 1000, got -1");
  auto fb = ParseJobSpecYaml(
      "run: x\nlifecycle: {fallback_after_preemptions: 1, fallback_after: 5m}\n", "job.yaml");
  ASSERT_TRUE(fb.ok()) << fb.status().message();
  EXPECT_EQ(fb->lifecycle.fallback_after_preemptions, 1);
  EXPECT_EQ(fb->lifecycle.fallback_after_s, 300);
  EXPECT_EQ(JobSpecFromJson(ToJson(*fb))->lifecycle, fb->lifecycle);
  auto long_grace = ParseJobSpecYaml("run: x\nlifecycle: {grace_period: 2h}\n", "job.yaml");
  ASSERT_FALSE(long_grace.ok());
  EXPECT_NE(long_grace.status().message().find("lifecycle.grace_period: must be at most 1h"),
            std::string::npos)
      << long_grace.status().message();
}

TEST(JobSpecYaml, ObjectiveIsCostTimeOrPrice) {
  for (const char* o : {"cost", "time", "price"}) {
    auto r = ParseJobSpecYaml("run: x\nobjective: " + std::string(o) + "\n", "job.yaml");
    ASSERT_TRUE(r.ok()) << o << ": " << r.status().message();
    EXPECT_EQ(r->objective, o);
    auto back = JobSpecFromJson(ToJson(*r));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->objective, o);
  }
  auto none = ParseJobSpecYaml("run: x\n", "job.yaml");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->objective, "");
  EXPECT_FALSE(ToJson(*none).contains("objective"));
  auto bad = ParseJobSpecYaml("run: x\nobjective: fastest\n", "job.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "job.yaml:2:12: objective: expected one of cost, time, price, got string \"fastest\"");
}

TEST(JobSpecYaml, ExpectedHoursAndCheckpointSizeBounds) {
  struct Case {
    std::string yaml;
    double hours;
    double size_gb;
  };
  const Case cases[] = {
      {"expected_hours: 0.001", 0.001, 0},
      {"expected_hours: 100000", 100000, 0},
      {"expected_hours: 3", 3, 0},
      {"lifecycle: {checkpoint_size_gb: 0}", 0, 0},
      {"lifecycle: {checkpoint_size_gb: 100000}", 0, 100000},
      {"lifecycle: {checkpoint_size_gb: 2.5}", 0, 2.5},
  };
  for (const auto& c : cases) {
    auto r = ParseJobSpecYaml("run: x\n" + c.yaml + "\n", "job.yaml");
    ASSERT_TRUE(r.ok()) << c.yaml << ": " << r.status().message();
    EXPECT_EQ(r->expected_hours.value_or(0), c.hours) << c.yaml;
    EXPECT_EQ(r->lifecycle.checkpoint_size_gb, c.size_gb) << c.yaml;
  }
}

TEST(JobSpecYaml, CapacityErrorWithoutACloseNameHasNoSuggestion) {
  auto r = ParseJobSpecYaml("run: x\nlifecycle:\n  capacity: cheapest\n", "job.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "job.yaml:3:13: lifecycle.capacity: expected one of on-demand, interruptible, "
            "interruptible-then-on-demand, got string \"cheapest\"");
}

// Each text goes through ParseDurationSeconds and, quoted, through a YAML spec, where the range
// (1 s .. 7 days) applies too.
struct DurationCase {
  std::string text;
  std::optional<int64_t> seconds;  // the parse; nullopt: `error` is its whole message
  std::string error;
};

const DurationCase kDurations[] = {
    {"900", 900, ""},
    {"007", 7, ""},
    {"1s", 1, ""},
    {"90s", 90, ""},
    {"30m", 1800, ""},
    {"90m", 5400, ""},
    {"1h", 3600, ""},
    {"1.5h", 5400, ""},
    {"1.50h", 5400, ""},
    {"0.1h", 360, ""},
    {"1.25m", 75, ""},
    {"2h30m", 9000, ""},
    {"1h30s", 3630, ""},
    {"1h1m1s", 3661, ""},
    {"0h30m", 1800, ""},
    {"1.0000000000h", 3600, ""},
    {"168h", 604800, ""},
    {"0s", 0, ""},           // parses; the spec's range rejects it
    {"168h1s", 604801, ""},  // parses; the spec's range rejects it
    {"", std::nullopt, "expected a duration such as 90s, 30m, 1h or 2h30m, got \"\""},
    {"1x", std::nullopt, "expected a duration such as 90s, 30m, 1h or 2h30m, got \"1x\""},
    {"1d", std::nullopt, "expected a duration such as 90s, 30m, 1h or 2h30m, got \"1d\""},
    {"5M", std::nullopt, "expected a duration such as 90s, 30m, 1h or 2h30m, got \"5M\""},
    {"h", std::nullopt, "expected a duration such as 90s, 30m, 1h or 2h30m, got \"h\""},
    {"-5m", std::nullopt, "expected a duration such as 90s, 30m, 1h or 2h30m, got \"-5m\""},
    {"+5m", std::nullopt, "expected a duration such as 90s, 30m, 1h or 2h30m, got \"+5m\""},
    {"5 m", std::nullopt, "expected a duration such as 90s, 30m, 1h or 2h30m, got \"5 m\""},
    {"2h 30m", std::nullopt, "expected a duration such as 90s, 30m, 1h or 2h30m, got \"2h 30m\""},
    {".5h", std::nullopt, "expected a duration such as 90s, 30m, 1h or 2h30m, got \".5h\""},
    {"1.h", std::nullopt, "expected a duration such as 90s, 30m, 1h or 2h30m, got \"1.h\""},
    {"1.5", std::nullopt, "expected a duration such as 90s, 30m, 1h or 2h30m, got \"1.5\""},
    {"1h30", std::nullopt, "expected a duration such as 90s, 30m, 1h or 2h30m, got \"1h30\""},
    {"30m2h", std::nullopt,
     "expected a duration such as 90s, 30m, 1h or 2h30m (units in the order h, m, s, each once), "
     "got \"30m2h\""},
    {"1h1h", std::nullopt,
     "expected a duration such as 90s, 30m, 1h or 2h30m (units in the order h, m, s, each once), "
     "got \"1h1h\""},
    {"1.5s", std::nullopt, "expected a whole number of seconds, got \"1.5s\""},
    {"1.333h", std::nullopt, "expected a whole number of seconds, got \"1.333h\""},
    {"0.0000000001h", std::nullopt, "expected a whole number of seconds, got \"0.0000000001h\""},
    {"9999999999999h", std::nullopt, "the duration \"9999999999999h\" is out of range"},
    {"99999999999999999999", std::nullopt, "the duration \"99999999999999999999\" is out of range"},
};

TEST(Duration, ParsesTheDocumentedForms) {
  for (const auto& c : kDurations) {
    auto r = ParseDurationSeconds(c.text);
    if (c.seconds) {
      ASSERT_TRUE(r.ok()) << c.text << ": " << r.status().message();
      EXPECT_EQ(*r, *c.seconds) << c.text;
    } else {
      ASSERT_FALSE(r.ok()) << c.text << " parsed as " << *r;
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(r.status().message(), c.error) << c.text;
    }
  }
}

TEST(Duration, InASpecErrorsNameThePositionAndRangeApplies) {
  for (const auto& c : kDurations) {
    const std::string yaml = "run: x\nlifecycle:\n  checkpoint_interval: \"" + c.text + "\"\n";
    auto r = ParseJobSpecYaml(yaml, "job.yaml");
    const std::string prefix = "job.yaml:3:24: lifecycle.checkpoint_interval: ";
    if (!c.seconds) {
      ASSERT_FALSE(r.ok()) << c.text;
      EXPECT_EQ(r.status().message(), prefix + c.error);
    } else if (*c.seconds < 1 || *c.seconds > 7 * 24 * 3600) {
      ASSERT_FALSE(r.ok()) << c.text;
      EXPECT_EQ(r.status().message(),
                prefix + "must be at least 1s and at most 7 days (168h), got " + c.text);
    } else {
      ASSERT_TRUE(r.ok()) << c.text << ": " << r.status().message();
      EXPECT_EQ(r->lifecycle.checkpoint_interval_s, *c.seconds) << c.text;
    }
  }
}

TEST(Duration, PlainNumbersAreSeconds) {
  auto r = ParseJobSpecYaml("run: x\nlifecycle: {checkpoint_interval: 604800}\n", "job.yaml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->lifecycle.checkpoint_interval_s, 604800);
  auto one = ParseJobSpecYaml("run: x\nlifecycle: {checkpoint_interval: 1}\n", "job.yaml");
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(one->lifecycle.checkpoint_interval_s, 1);
}

TEST(JobSpecYaml, MinimalSpecGetsDefaults) {
  auto r = ParseJobSpecYaml("run: echo hi\n", "job.yaml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->name, "job");
  EXPECT_EQ(r->resources.gpus, 0);
  EXPECT_EQ(r->resources.cpus, 1);
  EXPECT_EQ(r->resources.memory_gb, 1.0);
  EXPECT_FALSE(r->max_price_per_hour.has_value());
}

TEST(JobSpecYaml, GpuLabelOrVramImpliesOneGpu) {
  auto a = ParseJobSpecYaml("resources: {gpu: h100-80gb}\nrun: x\n", "j.yaml");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->resources.gpus, 1);
  auto b = ParseJobSpecYaml("resources: {min_vram_gb: 40}\nrun: x\n", "j.yaml");
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->resources.gpus, 1);
  EXPECT_EQ(b->resources.min_vram_gb, 40.0);
}

struct ErrorCase {
  const char* what;
  std::string yaml;
  std::string want;  // substring of the error, including file:line:col and field
};

class JobSpecYamlErrors : public testing::TestWithParam<ErrorCase> {};

TEST_P(JobSpecYamlErrors, ReportsPositionAndField) {
  const ErrorCase& c = GetParam();
  auto r = ParseJobSpecYaml(c.yaml, "job.yaml");
  ASSERT_FALSE(r.ok()) << c.what;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(c.want), std::string::npos)
      << c.what << "\n got: " << r.status().message() << "\nwant: " << c.want;
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << "errors are one line";
}

const ErrorCase kErrorCases[] = {
    {"malformed yaml", "run: [a, b\n", "job.yaml:2:1: invalid YAML"},
    {"malformed mapping", "run: x\n  bad: : :\n", "job.yaml:2:"},
    {"top level not a mapping", "- run: x\n", "job.yaml:1:1: expected a mapping"},
    {"top level scalar", "hello\n", "job.yaml:1:1: expected a mapping"},
    {"empty text", "", "job.yaml: the spec is empty"},
    {"unknown top field with suggestion", "run: x\nnmae: a\n",
     "job.yaml:2:1: nmae: unknown field; did you mean `name`?"},
    {"unknown nested field with suggestion", "run: x\nresources:\n  gpuz: 2\n",
     "job.yaml:3:3: resources.gpuz: unknown field; did you mean `gpu`?"},
    {"unknown field far from any", "run: x\nzzzzzzzz: 1\n",
     "job.yaml:2:1: zzzzzzzz: unknown field"},
    {"resource field at top level", "run: x\nmemory_gb: 3\n",
     "job.yaml:2:1: memory_gb: unknown field; `memory_gb` belongs under `resources`"},
    {"gpus is a word", "run: x\nresources:\n  gpus: two\n",
     "job.yaml:3:9: resources.gpus: expected a non-negative integer, got string \"two\""},
    {"gpus negative", "run: x\nresources: {gpus: -1}\n",
     "job.yaml:2:19: resources.gpus: expected a non-negative integer, got -1"},
    {"gpus not integer", "run: x\nresources:\n  gpus: 1.5\n",
     "job.yaml:3:9: resources.gpus: expected a non-negative integer, got 1.5"},
    {"gpus quoted", "run: x\nresources:\n  gpus: \"2\"\n",
     "job.yaml:3:9: resources.gpus: expected a non-negative integer, got string \"2\""},
    {"gpus too many", "run: x\nresources:\n  gpus: 65\n",
     "job.yaml:3:9: resources.gpus: 65 is over the limit of 64"},
    {"gpus overflow", "run: x\nresources:\n  gpus: 99999999999999999999999\n",
     "job.yaml:3:9: resources.gpus: the number 99999999999999999999999 is out of range"},
    {"cpus negative", "run: x\nresources:\n  cpus: -4\n",
     "job.yaml:3:9: resources.cpus: expected a positive integer, got -4"},
    {"cpus not integer", "run: x\nresources:\n  cpus: 2.5\n",
     "job.yaml:3:9: resources.cpus: expected a positive integer, got 2.5"},
    {"cpus too many", "run: x\nresources:\n  cpus: 5000\n",
     "job.yaml:3:9: resources.cpus: 5000 is over the limit of 4096"},
    {"memory zero", "run: x\nresources:\n  memory_gb: 0\n",
     "job.yaml:3:14: resources.memory_gb: must be more than 0"},
    {"memory negative", "run: x\nresources:\n  memory_gb: -2\n",
     "job.yaml:3:14: resources.memory_gb: must be more than 0"},
    {"memory absurd", "run: x\nresources:\n  memory_gb: 1e9\n",
     "job.yaml:3:14: resources.memory_gb: must be more than 0 and at most 65536, got 1e9"},
    {"memory infinite", "run: x\nresources:\n  memory_gb: .inf\n",
     "job.yaml:3:14: resources.memory_gb: expected a positive number, got .inf"},
    {"min vram zero", "run: x\nresources:\n  min_vram_gb: 0\n",
     "job.yaml:3:16: resources.min_vram_gb: must be more than 0"},
    {"gpus zero with label", "run: x\nresources:\n  gpu: a100-80gb\n  gpus: 0\n",
     "job.yaml:4:9: resources.gpus: is 0 but `gpu`/`min_vram_gb` ask for a GPU"},
    {"gpu label is a mapping", "run: x\nresources:\n  gpu: {a: 1}\n",
     "job.yaml:3:8: resources.gpu: expected a string, got a mapping"},
    {"resources not a mapping", "run: x\nresources: 4\n",
     "job.yaml:2:12: resources: expected a mapping, got 4"},
    {"price negative", "run: x\nmax_price_per_hour: -1\n",
     "job.yaml:2:21: max_price_per_hour: must be between 0 and"},
    {"price is text", "run: x\nmax_price_per_hour: cheap\n",
     "job.yaml:2:21: max_price_per_hour: expected a non-negative number, got string \"cheap\""},
    {"priority too high", "run: x\npriority: 1001\n",
     "job.yaml:2:11: priority: must be between -1000 and 1000, got 1001"},
    {"priority too low", "run: x\npriority: -5000\n",
     "job.yaml:2:11: priority: must be between -1000 and 1000, got -5000"},
    {"run missing", "name: a\n", "job.yaml:1:1: run: is required"},
    {"run empty", "run: \"\"\n", "job.yaml:1:6: run: must not be empty"},
    {"run blank", "run: \"   \"\n", "job.yaml:1:6: run: must not be empty"},
    {"run null", "run:\nname: a\n", "run: must not be empty"},
    {"run too long", "run: " + std::string(kMaxRunBytes + 1, 'x') + "\n",
     "job.yaml:1:6: run: is 65537 bytes, over the limit of 65536 bytes"},
    {"run is a list", "run: [a, b]\n", "job.yaml:1:6: run: expected a string, got a sequence"},
    {"spec too big", "run: x\n#" + std::string(kMaxSpecBytes, 'x') + "\n",
     "job.yaml: the spec is 1048585 bytes, over the limit of 1048576 bytes"},
    {"invalid utf8 in a comment", "run: x\n# caf\xc3\n", "job.yaml:2:6: invalid UTF-8 byte 0xc3"},
    {"invalid utf8 in a value", "name: a\xff\nrun: x\n", "job.yaml:1:8: invalid UTF-8 byte 0xff"},
    {"overlong utf8", "run: \xc0\xaf\n", "job.yaml:1:6: invalid UTF-8 byte 0xc0"},
    {"env bad name", "run: x\nenv:\n  1ABC: v\n",
     "job.yaml:3:3: env: invalid variable name \"1ABC\""},
    {"env name with dash", "run: x\nenv: {MY-VAR: v}\n",
     "job.yaml:2:7: env: invalid variable name \"MY-VAR\""},
    {"env reserved sluice", "run: x\nenv:\n  SLUICE_TOKEN: v\n",
     "job.yaml:3:3: env.SLUICE_TOKEN: is reserved"},
    {"env reserved cuda", "run: x\nenv:\n  CUDA_VISIBLE_DEVICES: \"0\"\n",
     "job.yaml:3:3: env.CUDA_VISIBLE_DEVICES: is reserved"},
    {"env value is a map", "run: x\nenv:\n  FOO: {a: 1}\n",
     "job.yaml:3:8: env.FOO: expected a scalar value, got a mapping"},
    {"env value is a list", "run: x\nenv:\n  FOO: [1]\n",
     "job.yaml:3:8: env.FOO: expected a scalar value, got a sequence"},
    {"env value missing", "run: x\nenv:\n  FOO:\n", "env.FOO: has no value"},
    {"env not a mapping", "run: x\nenv: [A]\n", "job.yaml:2:6: env: expected a mapping"},
    {"env duplicate", "run: x\nenv:\n  A: 1\n  A: 2\n", "job.yaml:4:3: env.A: is set twice"},
    {"name too long", "run: x\nname: " + std::string(kMaxNameBytes + 1, 'n') + "\n",
     "job.yaml:2:7: name: is 129 bytes, over the limit of 128"},
    {"name control char", "run: x\nname: \"a\\tb\"\n",
     "job.yaml:2:7: name: must not contain control characters, got \"a\\x09b\""},
    {"name empty", "run: x\nname: \"\"\n", "job.yaml:2:7: name: must not be empty"},
    {"duplicate top key", "run: x\nrun: y\n", "job.yaml:2:1: run: is given twice"},
    {"duplicate nested key", "run: x\nresources:\n  gpus: 1\n  gpus: 2\n",
     "job.yaml:4:3: resources.gpus: is given twice"},
    {"alias rejected", "run: &r x\nname: *r\n", "job.yaml:2:7: YAML aliases"},
    {"two documents", "run: x\n---\nrun: y\n",
     "job.yaml:2:1: a job spec is a single YAML document"},
    {"complex key", "? [a]\n: b\nrun: x\n", "mapping keys must be plain scalars"},
    {"deep flow nesting", "run: x\nenv: " + std::string(100, '[') + std::string(100, ']') + "\n",
     "job.yaml:2:"},
    {"too many values",
     "run: x\nenv: [" +
         [] {
           std::string s;
           for (int i = 0; i < 5000; ++i) s += "1,";
           return s;
         }() +
         "]\n",
     "job.yaml:2:"},
    {"deep flow nesting message", "a: " + std::string(200, '{'), "nesting deeper than 64 levels"},
    {"expected hours zero", "run: x\nexpected_hours: 0\n",
     "job.yaml:2:17: expected_hours: must be more than 0 and at most 100000 hours, got 0"},
    {"expected hours negative", "run: x\nexpected_hours: -2\n",
     "job.yaml:2:17: expected_hours: must be more than 0 and at most 100000 hours, got -2"},
    {"expected hours too many", "run: x\nexpected_hours: 100000.5\n",
     "job.yaml:2:17: expected_hours: must be more than 0 and at most 100000 hours, got 100000.5"},
    {"expected hours is a duration", "run: x\nexpected_hours: 3h\n",
     "job.yaml:2:17: expected_hours: expected a positive number of hours, got string \"3h\""},
    {"expected hours infinite", "run: x\nexpected_hours: .inf\n",
     "job.yaml:2:17: expected_hours: expected a positive number of hours, got .inf"},
    {"expected hours under resources", "run: x\nresources:\n  expected_hours: 2\n",
     "job.yaml:3:3: resources.expected_hours: unknown field"},
    {"lifecycle not a mapping", "run: x\nlifecycle: interruptible\n",
     "job.yaml:2:12: lifecycle: expected a mapping, got string \"interruptible\""},
    {"lifecycle is a list", "run: x\nlifecycle: [a]\n",
     "job.yaml:2:12: lifecycle: expected a mapping, got a sequence"},
    {"unknown lifecycle field with suggestion", "run: x\nlifecycle:\n  checkpoint_intervl: 30m\n",
     "job.yaml:3:3: lifecycle.checkpoint_intervl: unknown field; did you mean "
     "`checkpoint_interval`?"},
    {"lifecycle capasity", "run: x\nlifecycle:\n  capasity: interruptible\n",
     "job.yaml:3:3: lifecycle.capasity: unknown field; did you mean `capacity`?"},
    {"seconds field is JSON only", "run: x\nlifecycle:\n  checkpoint_interval_s: 900\n",
     "job.yaml:3:3: lifecycle.checkpoint_interval_s: unknown field; did you mean "
     "`checkpoint_interval`?"},
    {"capacity at top level", "run: x\ncapacity: interruptible\n",
     "job.yaml:2:1: capacity: unknown field; `capacity` belongs under `lifecycle`"},
    {"duplicate lifecycle key",
     "run: x\nlifecycle:\n  capacity: on-demand\n  capacity: on-demand\n",
     "job.yaml:4:3: lifecycle.capacity: is given twice"},
    {"capacity misspelt", "run: x\nlifecycle:\n  capacity: interuptible\n",
     "job.yaml:3:13: lifecycle.capacity: expected one of on-demand, interruptible, "
     "interruptible-then-on-demand, got string \"interuptible\"; did you mean `interruptible`?"},
    {"capacity spot", "run: x\nlifecycle: {capacity: spot}\n",
     "job.yaml:2:23: lifecycle.capacity: expected one of on-demand, interruptible, "
     "interruptible-then-on-demand, got string \"spot\"; did you mean `interruptible`?"},
    {"capacity wrong case", "run: x\nlifecycle:\n  capacity: On-Demand\n",
     "job.yaml:3:13: lifecycle.capacity: expected one of on-demand, interruptible, "
     "interruptible-then-on-demand, got string \"On-Demand\"; did you mean `on-demand`?"},
    {"capacity underscore", "run: x\nlifecycle:\n  capacity: interruptible_then_on_demand\n",
     "got string \"interruptible_then_on_demand\"; did you mean "
     "`interruptible-then-on-demand`?"},
    {"capacity number", "run: x\nlifecycle:\n  capacity: 1\n",
     "job.yaml:3:13: lifecycle.capacity: expected one of on-demand, interruptible, "
     "interruptible-then-on-demand, got 1"},
    {"capacity mapping", "run: x\nlifecycle:\n  capacity: {a: 1}\n",
     "job.yaml:3:13: lifecycle.capacity: expected a string, got a mapping"},
    {"interval unit unknown", "run: x\nlifecycle:\n  checkpoint_interval: 1x\n",
     "job.yaml:3:24: lifecycle.checkpoint_interval: expected a duration such as 90s, 30m, 1h or "
     "2h30m, got \"1x\""},
    {"interval zero seconds", "run: x\nlifecycle:\n  checkpoint_interval: 0\n",
     "job.yaml:3:24: lifecycle.checkpoint_interval: must be at least 1s and at most 7 days (168h), "
     "got 0"},
    {"interval negative seconds", "run: x\nlifecycle:\n  checkpoint_interval: -5\n",
     "job.yaml:3:24: lifecycle.checkpoint_interval: must be at least 1s and at most 7 days (168h), "
     "got -5"},
    {"interval over a week", "run: x\nlifecycle:\n  checkpoint_interval: 604801\n",
     "job.yaml:3:24: lifecycle.checkpoint_interval: must be at least 1s and at most 7 days (168h), "
     "got 604801"},
    {"interval over a week as text", "run: x\nlifecycle:\n  checkpoint_interval: 200h\n",
     "job.yaml:3:24: lifecycle.checkpoint_interval: must be at least 1s and at most 7 days (168h), "
     "got 200h"},
    {"interval fractional number", "run: x\nlifecycle:\n  checkpoint_interval: 1.5\n",
     "job.yaml:3:24: lifecycle.checkpoint_interval: expected a whole number of seconds or a "
     "duration such as 90s, 30m, 1h or 2h30m, got 1.5"},
    {"interval huge number", "run: x\nlifecycle:\n  checkpoint_interval: 99999999999999999999\n",
     "job.yaml:3:24: lifecycle.checkpoint_interval: the number 99999999999999999999 is out of "
     "range"},
    {"interval boolean", "run: x\nlifecycle:\n  checkpoint_interval: true\n",
     "job.yaml:3:24: lifecycle.checkpoint_interval: expected a duration such as 90s, 30m, 1h or "
     "2h30m, got boolean true"},
    {"interval wrong order", "run: x\nlifecycle:\n  checkpoint_interval: 30m2h\n",
     "job.yaml:3:24: lifecycle.checkpoint_interval: expected a duration such as 90s, 30m, 1h or "
     "2h30m (units in the order h, m, s, each once), got \"30m2h\""},
    {"checkpoint size negative", "run: x\nlifecycle:\n  checkpoint_size_gb: -1\n",
     "job.yaml:3:23: lifecycle.checkpoint_size_gb: must be between 0 and 100000, got -1"},
    {"checkpoint size huge", "run: x\nlifecycle:\n  checkpoint_size_gb: 1e6\n",
     "job.yaml:3:23: lifecycle.checkpoint_size_gb: must be between 0 and 100000, got 1e6"},
    {"checkpoint size text", "run: x\nlifecycle:\n  checkpoint_size_gb: big\n",
     "job.yaml:3:23: lifecycle.checkpoint_size_gb: expected a non-negative number, got string "
     "\"big\""},
};

INSTANTIATE_TEST_SUITE_P(Rules, JobSpecYamlErrors, testing::ValuesIn(kErrorCases));

TEST(JobSpecYaml, DeepBlockNestingIsRejectedWithoutCrashing) {
  std::string text = "run: x\nenv:\n";
  for (int i = 0; i < 300; ++i) text += std::string(i + 2, ' ') + "k" + std::to_string(i) + ":\n";
  auto r = ParseJobSpecYaml(text, "deep.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("deep.yaml:"), std::string::npos);
  EXPECT_NE(r.status().message().find("nesting deeper than 64"), std::string::npos)
      << r.status().message();
}

TEST(JobSpecYaml, DeepDashNestingIsRejectedWithoutCrashing) {
  std::string text = "run: x\nenv:\n  A: ";
  for (int i = 0; i < 100000; ++i) text += "- ";
  text += "x\n";
  auto r = ParseJobSpecYaml(text, "deep.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nesting deeper than 64"), std::string::npos)
      << r.status().message();
}

TEST(JobSpecYaml, BracketsInsideScriptsDoNotCountAsNesting) {
  std::string run = "run: |\n";
  for (int i = 0; i < 200; ++i) run += "  echo \"[[{{\" '{{[[' ${a[0]}\n";
  run += "name: \"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"\n";
  auto r = ParseJobSpecYaml(run, "job.yaml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->run.substr(0, 10), "echo \"[[{{");
}

TEST(JobSpecYaml, BillionLaughsIsRejectedQuickly) {
  std::string text = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int i = 1; i < 10; ++i) {
    text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 9; ++k) text += (k ? ", *a" : "*a") + std::to_string(i - 1);
    text += "]\n";
  }
  text += "run: x\n";
  auto r = ParseJobSpecYaml(text, "lol.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("lol.yaml:2:"), std::string::npos) << r.status().message();
}

TEST(JobSpecYaml, TenMegabyteRunNamesTheLimit) {
  const std::string text = "run: " + std::string(10 * 1024 * 1024, 'x') + "\n";
  auto start = std::chrono::steady_clock::now();
  auto r = ParseJobSpecYaml(text, "big.yaml");
  auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("over the limit of 1048576 bytes"), std::string::npos)
      << r.status().message();
  EXPECT_LT(elapsed, std::chrono::milliseconds(500));
  // The same script through the API form reaches the run limit itself.
  Json j = {{"run", std::string(10 * 1024 * 1024, 'x')}};
  auto api = JobSpecFromJson(j);
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().message(),
            "run: is 10485760 bytes, over the limit of 65536 bytes; put long scripts in a file "
            "under workdir");
}

TEST(JobSpecYaml, OneMebibyteInputIsFast) {
  std::string text = "run: x\nenv:\n";
  for (int i = 0; text.size() < kMaxSpecBytes - 64; ++i) {
    text += "  # padding comment line number " + std::to_string(i) + "\n";
  }
  auto start = std::chrono::steady_clock::now();
  auto r = ParseJobSpecYaml(text, "big.yaml");
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(r.ok()) << r.status().message();
  EXPECT_LT(elapsed, std::chrono::milliseconds(1000));

  std::string flow = "run: x\nenv: {";
  for (int i = 0; flow.size() < kMaxSpecBytes - 64; ++i) flow += "K" + std::to_string(i) + ": v, ";
  flow += "}\n";
  start = std::chrono::steady_clock::now();
  auto f = ParseJobSpecYaml(flow, "flow.yaml");
  elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("flow.yaml:2:"), std::string::npos) << f.status().message();
  EXPECT_LT(elapsed, std::chrono::milliseconds(1000));
}

TEST(JobSpecJson, FullSpecRoundTrips) {
  auto parsed = ParseJobSpecYaml(kFull, "job.yaml");
  ASSERT_TRUE(parsed.ok());
  Json j = ToJson(*parsed);
  EXPECT_EQ(j["resources"]["gpus"], 2);
  EXPECT_EQ(j["env"]["LR"], "0.1");
  EXPECT_EQ(j["runtime"]["driver"], ">=535");
  auto back = JobSpecFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, *parsed);

  JobSpec odd;
  odd.name = "x";
  odd.run = "echo \"quotes\" \\ and ünïcode";
  odd.resources.min_vram_gb = 0.1 + 0.2;  // not exactly representable in short decimal
  odd.resources.gpus = 3;
  odd.resources.memory_gb = 1.0 / 3.0;
  odd.max_price_per_hour = 0;
  auto odd_back = JobSpecFromJson(ToJson(odd));
  ASSERT_TRUE(odd_back.ok()) << odd_back.status().message();
  EXPECT_EQ(*odd_back, odd);
}

TEST(JobSpecJson, NewFieldsRoundTripInTheDocumentedShape) {
  JobSpec spec;
  spec.name = "ckpt";
  spec.run = "python3 train.py";
  spec.expected_hours = 3.5;
  spec.lifecycle.capacity = Capacity::kInterruptible;
  spec.lifecycle.checkpoint_interval_s = 1800;
  spec.lifecycle.checkpoint_size_gb = 2;
  const Json j = ToJson(spec);
  EXPECT_EQ(j["expected_hours"], 3.5);
  EXPECT_EQ(j["lifecycle"], Json::parse(R"({"capacity": "interruptible",
      "checkpoint_interval_s": 1800, "checkpoint_size_gb": 2, "max_restarts": 3,
      "grace_period": 30, "fallback_after_preemptions": 2, "fallback_after": 600})"));
  auto back = JobSpecFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, spec);

  // Only a capacity: no interval key.
  JobSpec cap_only;
  cap_only.name = "cap";
  cap_only.run = "x";
  cap_only.lifecycle.capacity = Capacity::kInterruptibleThenOnDemand;
  const Json cj = ToJson(cap_only);
  EXPECT_EQ(cj["lifecycle"], Json::parse(R"({"capacity": "interruptible-then-on-demand",
      "checkpoint_size_gb": 0, "max_restarts": 3, "grace_period": 30,
      "fallback_after_preemptions": 2, "fallback_after": 600})"));
  EXPECT_FALSE(cj.contains("expected_hours"));
  auto cap_back = JobSpecFromJson(cj);
  ASSERT_TRUE(cap_back.ok()) << cap_back.status().message();
  EXPECT_EQ(*cap_back, cap_only);

  // YAML and JSON agree.
  auto yaml = ParseJobSpecYaml(
      "name: ckpt\nrun: python3 train.py\nexpected_hours: 3.5\nlifecycle:\n"
      "  capacity: interruptible\n  checkpoint_interval: 30m\n  checkpoint_size_gb: 2\n",
      "job.yaml");
  ASSERT_TRUE(yaml.ok()) << yaml.status().message();
  EXPECT_EQ(*yaml, spec);
}

struct JsonErrorCase {
  Json j;
  std::string want;  // the whole message: no file, no position
};

TEST(JobSpecJson, SameRulesNameThePath) {
  const JsonErrorCase cases[] = {
      {{{"run", "x"}, {"resources", {{"gpus", "two"}}}},
       "resources.gpus: expected a non-negative integer, got string \"two\""},
      {{{"run", "x"}, {"resources", {{"gpus", -1}}}},
       "resources.gpus: expected a non-negative integer, got -1"},
      {{{"run", "x"}, {"resources", {{"gpus", 2.5}}}},
       "resources.gpus: expected a non-negative integer, got 2.5"},
      {{{"run", "x"}, {"resources", {{"gpuz", 1}}}},
       "resources.gpuz: unknown field; did you mean `gpu`?"},
      {{{"run", "x"}, {"env", {{"SLUICE_X", "1"}}}},
       "env.SLUICE_X: is reserved: Sluice sets it for the job"},
      {{{"run", "x"}, {"env", {{"A", {1, 2}}}}}, "env.A: expected a scalar value, got a sequence"},
      {{{"run", ""}}, "run: must not be empty"},
      {{{"name", "a"}}, "run: is required: the bash script the job runs"},
      {Json::array({1, 2}),
       "expected a mapping of job fields (run, resources, ...), got a sequence"},
      {{{"run", "x"}, {"priority", 1e9}}, "priority: expected an integer, got 1000000000.0"},
  };
  for (const auto& c : cases) {
    auto r = JobSpecFromJson(c.j);
    ASSERT_FALSE(r.ok()) << c.j.dump();
    EXPECT_EQ(r.status().message(), c.want) << c.j.dump();
  }
}

TEST(JobSpecJson, IntervalAlsoTakesADurationOrSeconds) {
  for (const Json& interval : {Json("30m"), Json("1800"), Json(1800)}) {
    auto r = JobSpecFromJson({{"run", "x"}, {"lifecycle", {{"checkpoint_interval", interval}}}});
    ASSERT_TRUE(r.ok()) << interval.dump() << ": " << r.status().message();
    EXPECT_EQ(r->lifecycle.checkpoint_interval_s, 1800) << interval.dump();
  }
}

TEST(JobSpecJson, NewFieldErrorsNameThePath) {
  const JsonErrorCase cases[] = {
      {{{"run", "x"}, {"expected_hours", 0}},
       "expected_hours: must be more than 0 and at most 100000 hours, got 0"},
      {{{"run", "x"}, {"expected_hours", "3"}},
       "expected_hours: expected a positive number of hours, got string \"3\""},
      {{{"run", "x"}, {"lifecycle", {{"checkpoint_interval_s", 1800.5}}}},
       "lifecycle.checkpoint_interval_s: expected a whole number of seconds, got 1800.5"},
      {{{"run", "x"}, {"lifecycle", {{"checkpoint_interval_s", "30m"}}}},
       "lifecycle.checkpoint_interval_s: expected a whole number of seconds, got string \"30m\""},
      {{{"run", "x"}, {"lifecycle", {{"checkpoint_interval_s", 0}}}},
       "lifecycle.checkpoint_interval_s: must be at least 1s and at most 7 days (168h), got 0"},
      {{{"run", "x"}, {"lifecycle", {{"checkpoint_interval", "2x"}}}},
       "lifecycle.checkpoint_interval: expected a duration such as 90s, 30m, 1h or 2h30m, got "
       "\"2x\""},
      {{{"run", "x"},
        {"lifecycle", {{"checkpoint_interval", "30m"}, {"checkpoint_interval_s", 1800}}}},
       "lifecycle.checkpoint_interval_s: the interval is already given as `checkpoint_interval`; "
       "give one of checkpoint_interval and checkpoint_interval_s"},
      {{{"run", "x"}, {"lifecycle", {{"capacity", "spot"}}}},
       "lifecycle.capacity: expected one of on-demand, interruptible, "
       "interruptible-then-on-demand, got string \"spot\"; did you mean `interruptible`?"},
      {{{"run", "x"}, {"lifecycle", {{"checkpoint_sise_gb", 1}}}},
       "lifecycle.checkpoint_sise_gb: unknown field; did you mean `checkpoint_size_gb`?"},
      {{{"run", "x"}, {"lifecycle", {{"checkpoint_size_gb", -0.5}}}},
       "lifecycle.checkpoint_size_gb: must be between 0 and 100000, got -0.5"},
      {{{"run", "x"}, {"lifecycle", 3}}, "lifecycle: expected a mapping, got 3"},
      {{{"run", "x"}, {"checkpoint_interval_s", 60}},
       "checkpoint_interval_s: unknown field; `checkpoint_interval_s` belongs under `lifecycle`"},
  };
  for (const auto& c : cases) {
    auto r = JobSpecFromJson(c.j);
    ASSERT_FALSE(r.ok()) << c.j.dump();
    EXPECT_EQ(r.status().message(), c.want) << c.j.dump();
  }
}

TEST(JobSpecJson, ValuesOfEveryScalarTypeBecomeText) {
  Json j = {{"run", "x"}, {"env", {{"N", 3}, {"B", false}, {"S", "s"}}}};
  auto r = JobSpecFromJson(j);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->env.at("N"), "3");
  EXPECT_EQ(r->env.at("B"), "false");
  EXPECT_EQ(r->env.at("S"), "s");
}

TEST(JobSpecJson, DeepCallerBuiltJsonIsHandled) {
  Json deep = "leaf";
  // Deep enough to be far past the converter's depth cap; nlohmann's own copy is recursive, so
  // the test keeps it within what building the fixture itself can afford.
  for (int i = 0; i < 1000; ++i) {
    Json wrap = Json::array();
    wrap.push_back(std::move(deep));
    deep = std::move(wrap);
  }
  Json j = {{"run", "x"}, {"env", {{"A", deep}}}};
  auto r = JobSpecFromJson(j);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "env.A: expected a scalar value, got a sequence");
}

TEST(JobSpecYaml, BudgetAndBidParseRoundTripAndNameTheirErrors) {
  auto r = ParseJobSpecYaml(
      "run: x\nmax_total_cost: 12.5\nlifecycle: {capacity: interruptible, max_bid_per_hour: "
      "2.25}\n",
      "job.yaml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->max_total_cost, 12.5);
  EXPECT_EQ(r->lifecycle.max_bid_per_hour, 2.25);
  auto back = JobSpecFromJson(ToJson(*r));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, *r);

  const std::pair<const char*, const char*> bad[] = {
      {"run: x\nmax_total_cost: 0\n", "job.yaml:2:17: max_total_cost: must be more than 0"},
      {"run: x\nmax_total_cost: -3\n", "job.yaml:2:17: max_total_cost: must be more than 0"},
      {"run: x\nmax_total_cost: lots\n", "job.yaml:2:17: max_total_cost: expected a positive"},
      {"run: x\nlifecycle: {capacity: interruptible, max_bid_per_hour: 0}\n",
       "lifecycle.max_bid_per_hour: must be more than 0"},
      // On-demand capacity is sold at its price: a bid there is a mistake, named as such.
      {"run: x\nlifecycle: {max_bid_per_hour: 2}\n",
       "job.yaml:2:31: lifecycle.max_bid_per_hour: bids are for interruptible capacity"},
  };
  for (const auto& [text, want] : bad) {
    auto e = ParseJobSpecYaml(text, "job.yaml");
    ASSERT_FALSE(e.ok()) << text;
    EXPECT_NE(e.status().message().find(want), std::string::npos)
        << text << " -> " << e.status().message();
  }
}

}  // namespace
}  // namespace sluice::spec
