#include "spec/runtime_contract.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "common/crypto.h"
#include "spec/job_spec.h"

namespace sluice::spec {
namespace {

RuntimeContract ParseRuntime(const std::string& yaml) {
  auto r = ParseJobSpecYaml("run: x\n" + yaml, "job.yaml");
  EXPECT_TRUE(r.ok()) << yaml << "\n" << r.status().message();
  return r.ok() ? r->runtime : RuntimeContract{};
}

std::string RuntimeError(const std::string& yaml) {
  auto r = ParseJobSpecYaml("run: x\n" + yaml, "job.yaml");
  EXPECT_FALSE(r.ok()) << yaml;
  return r.ok() ? "" : r.status().message();
}

VersionConstraint C(VersionOp op, std::string v) { return {op, std::move(v)}; }

TEST(RuntimeContract, TheDocumentedExampleParses) {
  const RuntimeContract c = ParseRuntime(
      "runtime: {cuda: \"12.1\", driver: \">=535\", torch: \"2.1.0+cu121\", python: \"3.10\"}\n");
  EXPECT_EQ(c.cuda, C(VersionOp::kGe, "12.1"));
  EXPECT_EQ(c.driver, C(VersionOp::kGe, "535"));
  EXPECT_EQ(c.torch, C(VersionOp::kEq, "2.1.0+cu121"));
  EXPECT_EQ(c.python, C(VersionOp::kEq, "3.10"));
}

TEST(RuntimeContract, EveryKeyIsOptional) {
  EXPECT_TRUE(ParseRuntime("").empty());
  EXPECT_TRUE(ParseRuntime("runtime:\n").empty());
  EXPECT_TRUE(ParseRuntime("runtime: {}\n").empty());
  EXPECT_TRUE(ParseRuntime("runtime:\n  cuda:\n  python:\n").empty());
  const RuntimeContract only_python = ParseRuntime("runtime:\n  python: \"3.11\"\n");
  EXPECT_FALSE(only_python.cuda || only_python.driver || only_python.torch);
  EXPECT_EQ(only_python.python, C(VersionOp::kEq, "3.11"));
}

TEST(RuntimeContract, OperatorsAndSpellings) {
  const struct {
    const char* yaml;
    RuntimeFact fact;
    VersionConstraint want;
  } cases[] = {
      // cuda: a bare version is a minimum; every operator is accepted.
      {"cuda: \"12.1\"", RuntimeFact::kCuda, C(VersionOp::kGe, "12.1")},
      {"cuda: \">=12.1\"", RuntimeFact::kCuda, C(VersionOp::kGe, "12.1")},
      {"cuda: \"> 12.1\"", RuntimeFact::kCuda, C(VersionOp::kGt, "12.1")},
      {"cuda: \"<=12.4\"", RuntimeFact::kCuda, C(VersionOp::kLe, "12.4")},
      {"cuda: \"<12\"", RuntimeFact::kCuda, C(VersionOp::kLt, "12")},
      {"cuda: \"=12.1\"", RuntimeFact::kCuda, C(VersionOp::kEq, "12.1")},
      {"cuda: \"==12.1\"", RuntimeFact::kCuda, C(VersionOp::kEq, "12.1")},
      // YAML keeps a number's spelling, so an unquoted 12.10 is not 12.1.
      {"cuda: 12.10", RuntimeFact::kCuda, C(VersionOp::kGe, "12.10")},
      // driver, torch, python: a bare version pins.
      {"driver: \"535.104\"", RuntimeFact::kDriver, C(VersionOp::kEq, "535.104")},
      {"driver: 535", RuntimeFact::kDriver, C(VersionOp::kEq, "535")},
      {"driver: \" < 550 \"", RuntimeFact::kDriver, C(VersionOp::kLt, "550")},
      {"torch: 2.1.0", RuntimeFact::kTorch, C(VersionOp::kEq, "2.1.0")},
      {"torch: 2.1.0+CU121", RuntimeFact::kTorch, C(VersionOp::kEq, "2.1.0+cu121")},
      {"torch: \">=2.1\"", RuntimeFact::kTorch, C(VersionOp::kGe, "2.1")},
      {"torch: 2.2.0a0+git8ac9b20", RuntimeFact::kTorch, C(VersionOp::kEq, "2.2.0a0+git8ac9b20")},
      {"python: 3.10", RuntimeFact::kPython, C(VersionOp::kEq, "3.10")},
      {"python: '>=3.9'", RuntimeFact::kPython, C(VersionOp::kGe, "3.9")},
      {"python: 3", RuntimeFact::kPython, C(VersionOp::kEq, "3")},
  };
  for (const auto& c : cases) {
    const RuntimeContract got = ParseRuntime(std::string("runtime:\n  ") + c.yaml + "\n");
    EXPECT_EQ(got.Get(c.fact), c.want) << c.yaml;
    // The canonical text parses back to the same constraint.
    auto back = ParseVersionConstraint(c.fact, ToString(c.fact, c.want));
    ASSERT_TRUE(back.ok()) << c.yaml << ": " << back.status().message();
    EXPECT_EQ(*back, c.want) << c.yaml;
  }
}

TEST(RuntimeContract, CanonicalTextLeavesOutTheDefaultOperator) {
  EXPECT_EQ(ToString(RuntimeFact::kCuda, C(VersionOp::kGe, "12.1")), "12.1");
  EXPECT_EQ(ToString(RuntimeFact::kCuda, C(VersionOp::kEq, "12.1")), "=12.1");
  EXPECT_EQ(ToString(RuntimeFact::kDriver, C(VersionOp::kGe, "535")), ">=535");
  EXPECT_EQ(ToString(RuntimeFact::kDriver, C(VersionOp::kEq, "535.104")), "535.104");
  EXPECT_EQ(ToString(RuntimeFact::kPython, C(VersionOp::kLt, "3.12")), "<3.12");
}

struct ErrorCase {
  std::string what;
  std::string yaml;  // after "run: x\n", so the runtime block starts on line 2
  std::string want;  // the whole message
};

TEST(RuntimeContract, EveryInvalidFormNamesFieldAndLine) {
  const ErrorCase cases[] = {
      {"not a mapping", "runtime: \"12.1\"\n",
       "job.yaml:2:10: runtime: expected a mapping such as {cuda: \"12.1\", python: \"3.10\"}, "
       "got string \"12.1\""},
      {"a sequence", "runtime:\n  - cuda\n",
       "job.yaml:3:3: runtime: expected a mapping such as {cuda: \"12.1\", python: \"3.10\"}, "
       "got a sequence"},
      {"unknown key with suggestion", "runtime:\n  pyton: \"3.10\"\n",
       "job.yaml:3:3: runtime.pyton: unknown field; did you mean `python`? (runtime takes cuda, "
       "driver, torch, python)"},
      {"an alias people type", "runtime:\n  pytorch: \"2.1.0\"\n",
       "job.yaml:3:3: runtime.pytorch: unknown field; did you mean `torch`? (runtime takes "
       "cuda, driver, torch, python)"},
      {"unknown key far from any", "runtime:\n  tensorflow: \"2.15\"\n",
       "job.yaml:3:3: runtime.tensorflow: unknown field (runtime takes cuda, driver, torch, "
       "python)"},
      {"given twice", "runtime:\n  cuda: \"12.1\"\n  cuda: \"12.4\"\n",
       "job.yaml:4:3: runtime.cuda: is given twice"},
      {"empty string", "runtime:\n  python: \"\"\n",
       "job.yaml:3:11: runtime.python: must not be empty"},
      {"a word", "runtime:\n  cuda: twelve\n",
       "job.yaml:3:9: runtime.cuda: expected a CUDA version such as \"12.1\" or \">=12.1\", got "
       "\"twelve\""},
      {"operator alone", "runtime:\n  driver: \">=\"\n",
       "job.yaml:3:11: runtime.driver: expected a driver version such as \"535.104\" or "
       "\">=535\", got \">=\""},
      {"an operator pip has but we do not", "runtime:\n  torch: \"~=2.1\"\n",
       "job.yaml:3:10: runtime.torch: expected a PyTorch version such as \"2.1.0\" or "
       "\"2.1.0+cu121\", got \"~=2.1\""},
      {"empty component", "runtime:\n  cuda: \"12..1\"\n",
       "job.yaml:3:9: runtime.cuda: expected a CUDA version such as \"12.1\" or \">=12.1\", got "
       "\"12..1\""},
      {"python with a pattern", "runtime:\n  python: \"3.10.x\"\n",
       "job.yaml:3:11: runtime.python: expected a Python version such as \"3.10\" or \">=3.10\", "
       "got \"3.10.x\""},
      {"driver with a local suffix", "runtime:\n  driver: \"535+open\"\n",
       "job.yaml:3:11: runtime.driver: expected a driver version such as \"535.104\" or "
       "\">=535\", got \"535+open\""},
      {"two operators", "runtime:\n  cuda: \">=<12\"\n",
       "job.yaml:3:9: runtime.cuda: expected a CUDA version such as \"12.1\" or \">=12.1\", got "
       "\">=<12\""},
      {"a boolean", "runtime:\n  torch: true\n",
       "job.yaml:3:10: runtime.torch: expected a PyTorch version such as \"2.1.0\" or "
       "\"2.1.0+cu121\", got boolean true"},
      {"a mapping", "runtime:\n  python: {min: 3.9}\n",
       "job.yaml:3:11: runtime.python: expected a Python version such as \"3.10\" or \">=3.10\", "
       "got a mapping"},
      {"too long", "runtime:\n  torch: \"2.1.0+" + std::string(70, 'a') + "\"\n", ""},
      {"a fact at the top level", "cuda: \"12.1\"\n",
       "job.yaml:2:1: cuda: unknown field; `cuda` belongs under `runtime`"},
  };
  for (const auto& c : cases) {
    const std::string got = RuntimeError(c.yaml);
    if (c.what == "too long") {
      EXPECT_EQ(got.rfind("job.yaml:3:10: runtime.torch: the version \"2.1.0+aaa", 0), 0u) << got;
      EXPECT_NE(got.find("is over the limit of 64 bytes"), std::string::npos) << got;
      continue;
    }
    EXPECT_EQ(got, c.want) << c.what;
  }
}

TEST(RuntimeContract, JsonFormRoundTripsAndWantsStrings) {
  auto spec = ParseJobSpecYaml(
      "run: x\nruntime: {cuda: \">=12.1\", driver: \">=535\", torch: \"2.1.0+cu121\", "
      "python: \"3.10\"}\n",
      "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  const Json j = ToJson(*spec);
  EXPECT_EQ(
      j["runtime"],
      (Json{{"cuda", "12.1"}, {"driver", ">=535"}, {"torch", "2.1.0+cu121"}, {"python", "3.10"}}));
  auto back = JobSpecFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, *spec);

  // An empty contract is left out, so specs without one serialize as before.
  auto plain = ParseJobSpecYaml("run: x\nruntime: {}\n", "job.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(ToJson(*plain).contains("runtime"));

  // JSON numbers have lost their spelling (3.10 is 3.1): the API form wants strings.
  auto number = JobSpecFromJson({{"run", "x"}, {"runtime", {{"python", 3.10}}}});
  ASSERT_FALSE(number.ok());
  EXPECT_EQ(number.status().message(),
            "runtime.python: expected a Python version such as \"3.10\" or \">=3.10\", got 3.1 "
            "(write versions as strings)");
  auto unknown = JobSpecFromJson({{"run", "x"}, {"runtime", {{"cudnn", "8.9"}}}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().message().rfind("runtime.cudnn: unknown field", 0), 0u)
      << unknown.status().message();
}

TEST(EnvironmentFingerprint, CanonicalJsonAndKnownDigest) {
  const RuntimeContract c = ParseRuntime(
      "runtime: {python: \"3.10\", torch: \"2.1.0+cu121\", driver: \">=535\", cuda: \"12.1\"}\n");
  const Fingerprint fp = EnvironmentFingerprint(c);
  EXPECT_EQ(fp.canonical_json,
            R"({"cuda":"12.1","driver":">=535","python":"3.10","torch":"2.1.0+cu121"})");
  // `printf '%s' '<canonical_json>' | sha256sum`: pinned so the fingerprint never drifts.
  EXPECT_EQ(fp.sha256, "fcb81fa73b799be12215bfe664647d34dd502503cee9d0018334efbdce3ffd48");
  EXPECT_EQ(fp.sha256, Sha256Hex(fp.canonical_json));
  EXPECT_EQ(EnvironmentFingerprint(RuntimeContract{}).canonical_json, "{}");
}

TEST(EnvironmentFingerprint, StableUnderKeyOrderWhitespaceAndSpelling) {
  const char* same[] = {
      "runtime: {cuda: \"12.1\", driver: \">=535\", torch: \"2.1.0+cu121\", python: \"3.10\"}\n",
      "runtime:\n  python: '3.10'\n  torch: 2.1.0+cu121\n  driver: '>=535'\n  cuda: 12.1\n",
      "runtime:\n    driver:   \">= 535\"   # a comment\n    cuda: \">=12.1\"\n"
      "    torch: \"2.1.0+CU121\"\n\n    python: 3.10\n",
      "runtime: {torch: \"==2.1.0+cu121\", python: \"=3.10\", cuda: \" 12.1 \", driver: "
      "\">=535\"}\n",
  };
  const Fingerprint want = EnvironmentFingerprint(ParseRuntime(same[0]));
  for (const char* yaml : same) {
    const Fingerprint got = EnvironmentFingerprint(ParseRuntime(yaml));
    EXPECT_EQ(got.canonical_json, want.canonical_json) << yaml;
    EXPECT_EQ(got.sha256, want.sha256) << yaml;
  }
  // Other fields of the spec are not part of the environment.
  auto other = ParseJobSpecYaml(
      std::string("name: other\nrun: y\nresources: {gpus: 2, gpu: h100}\n") + same[1], "x.yaml");
  ASSERT_TRUE(other.ok()) << other.status().message();
  EXPECT_EQ(EnvironmentFingerprint(other->runtime).sha256, want.sha256);
}

TEST(EnvironmentFingerprint, DiffersForDifferentContracts) {
  const char* distinct[] = {
      "",
      "runtime: {cuda: \"12.1\"}\n",
      "runtime: {cuda: \"12.4\"}\n",
      "runtime: {cuda: \"=12.1\"}\n",   // exactly 12.1 is not at least 12.1
      "runtime: {cuda: \"12.10\"}\n",   // 12.10 is not 12.1
      "runtime: {driver: \"12.1\"}\n",  // the same text on another fact
      "runtime: {driver: \">=535\"}\n",
      "runtime: {driver: \"535\"}\n",
      "runtime: {torch: \"2.1.0\"}\n",
      "runtime: {torch: \"2.1.0+cu121\"}\n",
      "runtime: {python: \"3.10\"}\n",
      "runtime: {python: \"3.1\"}\n",
      "runtime: {python: \"3.10\", torch: \"2.1.0\"}\n",
  };
  std::set<std::string> digests;
  for (const char* yaml : distinct) {
    EXPECT_TRUE(digests.insert(EnvironmentFingerprint(ParseRuntime(yaml)).sha256).second) << yaml;
  }
}

}  // namespace
}  // namespace sluice::spec
