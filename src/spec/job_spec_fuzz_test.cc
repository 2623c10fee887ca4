// Property test: whatever bytes arrive, ParseJobSpecYaml returns (no crash, no exception) either a
// spec or a one-line error that starts with the filename.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "spec/job_spec.h"

namespace sluice::spec {
namespace {

const std::vector<std::string> kSeeds = {
    "name: a\nresources:\n  gpu: a100-80gb\n  gpus: 2\n  cpus: 4\n  memory_gb: 8\nrun: |\n  echo "
    "hi\nenv:\n  A: 1\n  B: \"two\"\nworkdir: .\nmax_price_per_hour: 2.5\npriority: 3\n"
    "expected_hours: 1.5\nlifecycle:\n  capacity: interruptible\n  checkpoint_interval: 1h30m\n"
    "  checkpoint_size_gb: 4\n",
    "resources: {min_vram_gb: 40, gpus: 1}\nrun: python3 train.py\nenv: {X: y}\n",
    "run: >\n  folded\n  text\n# comment\nname: 'quoted ''name'''\n",
    "? run\n: x\n",
};

// Pieces that tend to reach interesting parser states.
const std::vector<std::string> kTokens = {
    "[",    "]",         "{",   "}",        ":",  ": ",          "- ",       "\n",   "  ",
    "\t",   "'",         "\"",  "&a ",      "*a", "!!str ",      "---\n",    "...",  "#",
    "|",    ">",         "?",   ",",        "\\", "%YAML 1.2\n", "\xc3\xa9", "\xff", "\x00",
    "gpus", "resources", "env", "SLUICE_X", "-1", "1e999",       ".nan",     "~",    "null"};

std::string Mutate(std::string s, std::mt19937& rng) {
  const int edits = 1 + static_cast<int>(rng() % 6);
  for (int e = 0; e < edits; ++e) {
    const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 5) {
      case 0:  // flip a byte
        if (!s.empty()) s[pos % s.size()] = static_cast<char>(rng());
        break;
      case 1:  // delete a span
        if (!s.empty()) s.erase(pos % s.size(), 1 + rng() % 8);
        break;
      case 2:  // insert a token
      case 3: {
        const std::string& t = kTokens[rng() % kTokens.size()];
        s.insert(pos, t);
        break;
      }
      case 4:  // duplicate a span
        if (!s.empty()) {
          const size_t from = pos % s.size();
          s.insert(pos, s.substr(from, 1 + rng() % 20));
        }
        break;
    }
  }
  return s;
}

void ExpectWellFormed(const std::string& input) {
  auto r = ParseJobSpecYaml(input, "fuzz.yaml");
  if (r.ok()) {
    EXPECT_FALSE(r->run.empty());
    return;
  }
  const std::string m = r.status().message();
  ASSERT_FALSE(m.empty());
  EXPECT_EQ(m.rfind("fuzz.yaml", 0), 0u) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

TEST(JobSpecFuzz, MutatedSpecsNeverCrash) {
  std::mt19937 rng(20240611);
  int ok = 0;
  for (int i = 0; i < 3000; ++i) {
    const std::string input = Mutate(kSeeds[i % kSeeds.size()], rng);
    ExpectWellFormed(input);
    ok += ParseJobSpecYaml(input, "fuzz.yaml").ok();
  }
  // The mutations must leave some specs valid, or the test is only exercising the first check.
  EXPECT_GT(ok, 50);
  EXPECT_LT(ok, 3000);
}

TEST(JobSpecFuzz, RandomBytesNeverCrash) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string input(rng() % 512, '\0');
    for (char& c : input) c = static_cast<char>(rng() % 4 ? 0x20 + rng() % 0x5f : rng());
    ExpectWellFormed(input);
  }
}

TEST(JobSpecFuzz, RoundTripThroughJsonIsIdentityForValidMutants) {
  std::mt19937 rng(99);
  for (int i = 0; i < 1000; ++i) {
    auto r = ParseJobSpecYaml(Mutate(kSeeds[0], rng), "fuzz.yaml");
    if (!r.ok()) continue;
    auto back = JobSpecFromJson(ToJson(*r));
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(*back, *r);
  }
}

}  // namespace
}  // namespace sluice::spec
