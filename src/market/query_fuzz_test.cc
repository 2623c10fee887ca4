// Property tests for the query language, with fixed seeds so a failure reproduces:
//  - random well-formed queries over random offers: Matches agrees with a brute-force evaluator
//    written here independently, over ToJson(offer) and the generator's own idea of each term;
//  - random bytes and mutated queries never crash and either parse (and then round-trip
//    through ToString) or fail with an InvalidArgument that names a column.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/text.h"
#include "market/gpu_labels.h"
#include "market/query.h"

namespace sluice::market {
namespace {

using Rng = std::mt19937_64;

template <typename T>
const T& Pick(Rng& rng, const std::vector<T>& v) {
  return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
}

bool Chance(Rng& rng, double p) { return std::bernoulli_distribution(p)(rng); }

const std::vector<std::string> kLabels = {"a100-40gb",    "a100-80gb", "h100-80gb",
                                          "rtx4090-24gb", "t4-16gb",   "l4-24gb"};

Offer RandomOffer(Rng& rng, int i) {
  Offer o;
  o.id = "o" + std::to_string(i);
  o.provider = Pick(rng, std::vector<std::string>{"aws", "Lambda", "home", "runpod"});
  o.node = Pick(rng, std::vector<std::string>{"n1", "n2", "my box", "p4d.24xlarge"});
  o.region = Pick(rng, std::vector<std::string>{"us-east-1", "us-west-2", "eu-west-1",
                                                "US-Central1", "ap-south-1"});
  o.zone = Pick(rng, std::vector<std::string>{"", "a", "us-east-1a"});
  o.gpu_label = Pick(rng, kLabels);
  o.gpu_model = o.gpu_label.substr(0, o.gpu_label.find('-'));
  o.gpus = std::uniform_int_distribution<int>(1, 8)(rng);
  o.gpus_available = std::uniform_int_distribution<int>(0, o.gpus)(rng);
  o.vram_gb = Pick(rng, std::vector<double>{16, 24, 40, 80});
  o.form_factor = Pick(rng, std::vector<std::string>{"sxm", "pcie", "nvl", ""});
  o.interconnect = Pick(rng, std::vector<std::string>{"nvlink", "pcie", ""});
  o.compute_capability = Pick(rng, std::vector<std::string>{"7.5", "8.0", "8.6", "8.9", "9.0", ""});
  o.driver_version =
      Pick(rng, std::vector<std::string>{"535.104.05", "535.86.05", "550.54.15", "470.1", ""});
  o.cuda_version = Pick(rng, std::vector<std::string>{"11.8", "12.1", "12.2", "12.4", ""});
  for (const char* t : {"11.8", "12.1", "12.4", "12.1.1"}) {
    if (Chance(rng, 0.4)) o.toolkits.push_back(t);
  }
  for (const char* t : {"2.1.0+cu121", "2.0.1+cu118", "2.3.0+cu124", "2.1.2"}) {
    if (Chance(rng, 0.4)) o.torch_builds.push_back(t);
  }
  o.cpus = Pick(rng, std::vector<int>{8, 16, 32, 64});
  o.memory_gb = Pick(rng, std::vector<double>{64, 128, 256.5, 1024});
  o.disk_gb = Pick(rng, std::vector<double>{100, 500, 2048, 8000});
  o.price_per_gpu_hour = Pick(rng, std::vector<double>{0.35, 1.99, 2.5, 4.1});
  o.interruptible_price_per_gpu_hour = Pick(rng, std::vector<double>{0, 0.2, 1.2});
  o.reliability = Pick(rng, std::vector<double>{0.9, 0.98, 0.99, 0.999, 1});
  o.health_score = Pick(rng, std::vector<double>{40, 70, 90, 100});
  o.perf_score = Pick(rng, std::vector<double>{0.6, 1, 2.1});
  o.verified =
      Pick(rng, std::vector<VerifiedState>{VerifiedState::kVerified, VerifiedState::kUnverified,
                                           VerifiedState::kDeverified});
  o.source = Chance(rng, 0.5) ? OfferSource::kAgent : OfferSource::kCatalog;
  return o;
}

// ---- The independent evaluator: it knows each term as the generator meant it. ----

enum class Kind { kString, kLabel, kNumber, kVersion, kVersionList, kEnum };

struct FieldSpec {
  std::vector<std::string> names;  // how the query may spell the field
  std::string json_key;            // where the value is in ToJson(offer)
  Kind kind;
  std::vector<std::string> pool;  // values to draw from (numbers: in base units)
  bool sized = false;             // accepts GB/MiB/TB units
};

const std::vector<FieldSpec>& Specs() {
  static const std::vector<FieldSpec> specs = {
      {{"gpu", "gpu_label", "label"},
       "gpu_label",
       Kind::kLabel,
       {"a100", "A100", "h100", "a100-80gb", "rtx4090-24gb", "t4", "nvidia a100", "*-80gb", "a100*",
        "l4-24gb"}},
      {{"model", "gpu_model"}, "gpu_model", Kind::kString, {"a100", "H100", "rtx*", "t?", "l4"}},
      {{"provider"}, "provider", Kind::kString, {"aws", "lambda", "HOME", "run*", "*a*"}},
      {{"node"}, "node", Kind::kString, {"n1", "n?", "my box", "p4d.*", "*"}},
      {{"region"},
       "region",
       Kind::kString,
       {"us-*", "us-east-1", "eu-west-1", "us-central1", "*-?"}},
      {{"zone"}, "zone", Kind::kString, {"", "a", "us-east-1a", "*1a"}},
      {{"form", "form_factor"}, "form_factor", Kind::kString, {"sxm", "pcie", "nvl", ""}},
      {{"interconnect"}, "interconnect", Kind::kString, {"nvlink", "pcie", ""}},
      {{"id"}, "id", Kind::kString, {"o1", "o1*", "o?"}},
      {{"gpus", "gpus_available"}, "gpus_available", Kind::kNumber, {"0", "1", "2", "4", "8"}},
      {{"cpus", "cpu"}, "cpus", Kind::kNumber, {"8", "16", "32", "64"}},
      {{"vram", "vram_gb"}, "vram_gb", Kind::kNumber, {"16", "24", "40", "80", "30"}, true},
      {{"memory", "ram", "memory_gb"},
       "memory_gb",
       Kind::kNumber,
       {"64", "256.5", "1024", "100"},
       true},
      {{"disk", "disk_gb"}, "disk_gb", Kind::kNumber, {"100", "500", "2048", "8000"}, true},
      {{"price", "price_per_gpu_hour"},
       "price_per_gpu_hour",
       Kind::kNumber,
       {"0.35", "1.99", "2.5", "4.1", "3"}},
      {{"spot_price", "interruptible", "spot"},
       "interruptible_price_per_gpu_hour",
       Kind::kNumber,
       {"0", "0.2", "1.2", "1"}},
      {{"reliability"}, "reliability", Kind::kNumber, {"0.9", "0.98", "0.99", "0.999", "1"}},
      {{"health", "health_score"}, "health_score", Kind::kNumber, {"40", "70", "90", "100"}},
      {{"perf", "perf_score"}, "perf_score", Kind::kNumber, {"0.6", "1", "2.1", "1.5"}},
      {{"cc", "compute_capability"},
       "compute_capability",
       Kind::kVersion,
       {"7.5", "8.0", "8.6", "8.9", "9", "8.*"}},
      {{"driver", "driver_version"},
       "driver_version",
       Kind::kVersion,
       {"535.104.05", "535.86.05", "550", "470.1.0", "535.*"}},
      {{"cuda", "cuda_version"},
       "cuda_version",
       Kind::kVersion,
       {"11.8", "12.1", "12.1.0", "12.4", "12", "12.?"}},
      {{"toolkit", "toolkits"},
       "toolkits",
       Kind::kVersionList,
       {"11.8", "12.1", "12.4", "12.1.1", "12.*"}},
      {{"torch", "torch_builds", "pytorch"},
       "torch_builds",
       Kind::kVersionList,
       {"2.1.0", "2.1.0+cu121", "2.1", "2.3.0+cu124", "2.0.1", "*cu118", "2.1.2"}},
      {{"verified"}, "verified", Kind::kEnum, {"verified", "unverified", "Deverified"}},
      {{"source"}, "source", Kind::kEnum, {"agent", "catalog", "AGENT"}},
  };
  return specs;
}

struct GenTerm {
  const FieldSpec* spec;
  Op op;
  std::vector<std::string> values;  // as the generator meant them (numbers in base units)
};

bool IsGlob(const std::string& v) { return v.find_first_of("*?") != std::string::npos; }

// Recursive, unlike the matcher's iterative glob, so the two share no logic.
bool GlobOracle(std::string_view pattern, std::string_view s) {
  if (pattern.empty()) return s.empty();
  if (pattern[0] == '*') {
    return GlobOracle(pattern.substr(1), s) || (!s.empty() && GlobOracle(pattern, s.substr(1)));
  }
  if (s.empty()) return false;
  const bool same = pattern[0] == '?' || std::tolower(static_cast<unsigned char>(pattern[0])) ==
                                             std::tolower(static_cast<unsigned char>(s[0]));
  return same && GlobOracle(pattern.substr(1), s.substr(1));
}

bool OpHolds(Op op, int c) {
  switch (op) {
    case Op::kEq:
    case Op::kIn:
      return c == 0;
    case Op::kNe:
    case Op::kNotIn:
      return c != 0;
    case Op::kLt:
      return c < 0;
    case Op::kLe:
      return c <= 0;
    case Op::kGt:
      return c > 0;
    case Op::kGe:
      return c >= 0;
  }
  return false;
}

// Does one offer value satisfy the positive form of the term for one term value?
bool OneHolds(const GenTerm& t, Op positive, const std::string& value, const Json& offer_value) {
  switch (t.spec->kind) {
    case Kind::kString:
    case Kind::kEnum:
      return GlobOracle(value, offer_value.get<std::string>());
    case Kind::kLabel: {
      const std::string label = offer_value.get<std::string>();
      if (IsGlob(value)) return GlobOracle(value, label);
      auto res = ResolveGpuLabel(value);
      if (!res.ok()) return false;
      return std::find(res->labels.begin(), res->labels.end(), ToLower(label)) != res->labels.end();
    }
    case Kind::kNumber: {
      const double x = offer_value.get<double>();
      const double v = std::stod(value);
      return OpHolds(positive, x < v ? -1 : (x > v ? 1 : 0));
    }
    case Kind::kVersion:
    case Kind::kVersionList: {
      std::string s = offer_value.get<std::string>();
      if (IsGlob(value)) return GlobOracle(value, s);
      if (value.find('+') == std::string::npos) s = s.substr(0, s.find('+'));
      return OpHolds(positive, CompareVersions(s, ToLower(value)));
    }
  }
  return false;
}

bool TermOracle(const GenTerm& t, const Json& offer) {
  const Json& v = offer[t.spec->json_key];
  const bool negated = t.op == Op::kNe || t.op == Op::kNotIn;
  const Op positive = t.op == Op::kNe ? Op::kEq : t.op == Op::kNotIn ? Op::kIn : t.op;
  // Unknown values (no interruptible capacity, unknown version) satisfy nothing.
  if (t.spec->json_key == "interruptible_price_per_gpu_hour" && v.get<double>() == 0) return false;
  if (t.spec->kind == Kind::kVersion && v.get<std::string>().empty()) return false;
  bool any = false;
  if (t.spec->kind == Kind::kVersionList) {
    for (const Json& e : v) {
      for (const auto& val : t.values) any = any || OneHolds(t, positive, val, e);
    }
  } else {
    for (const auto& val : t.values) any = any || OneHolds(t, positive, val, v);
  }
  return any != negated;
}

// The query text for a generated term: random spelling, spacing, quoting and units.
std::string ValueText(Rng& rng, const FieldSpec& spec, const std::string& v) {
  std::string text = v;
  if (spec.kind == Kind::kNumber && spec.sized && Chance(rng, 0.5)) {
    const double gb = std::stod(v);
    switch (std::uniform_int_distribution<int>(0, 3)(rng)) {
      case 0:
        text = v + Pick(rng, std::vector<std::string>{"GB", "gb", "G", "GiB"});
        break;
      case 1: {
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%.17g%s", gb * 1024,
                      Pick(rng, std::vector<std::string>{"MiB", "MB", "m"}).c_str());
        text = buf;
        break;
      }
      default: {
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%.17gTB", gb / 1024);
        text = buf;
      }
    }
  }
  if (spec.json_key == "price_per_gpu_hour" && Chance(rng, 0.2)) text = "$" + text;
  const bool must_quote = text.empty() || text.find(' ') != std::string::npos;
  if (must_quote || Chance(rng, 0.15)) {
    const char q = Chance(rng, 0.5) ? '\'' : '"';
    text = q + text + q;
  }
  return text;
}

std::string RandomTerm(Rng& rng, GenTerm* out) {
  const FieldSpec& spec = Pick(rng, Specs());
  out->spec = &spec;
  std::vector<Op> ops = {Op::kEq, Op::kNe, Op::kIn, Op::kNotIn};
  const bool ordered =
      spec.kind == Kind::kNumber || spec.kind == Kind::kVersion || spec.kind == Kind::kVersionList;
  if (ordered) ops.insert(ops.end(), {Op::kLt, Op::kLe, Op::kGt, Op::kGe});
  out->op = Pick(rng, ops);
  const int n = (out->op == Op::kIn || out->op == Op::kNotIn)
                    ? std::uniform_int_distribution<int>(1, 3)(rng)
                    : 1;
  std::string name = Pick(rng, spec.names);
  if (Chance(rng, 0.2)) {
    for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  std::string text = name;
  if (out->op == Op::kIn || out->op == Op::kNotIn) {
    text += std::string(Chance(rng, 0.5) ? " " : "  ") + std::string(OpName(out->op)) + " [";
    for (int i = 0; i < n; ++i) {
      std::string v = Pick(rng, spec.pool);
      // Patterns are only valid with equality operators, which in/notin are.
      out->values.push_back(v);
      if (i > 0) text += Chance(rng, 0.5) ? "," : ", ";
      text += ValueText(rng, spec, v);
    }
    text += "]";
  } else {
    std::string v;
    do {
      v = Pick(rng, spec.pool);
    } while (IsGlob(v) && out->op != Op::kEq && out->op != Op::kNe);
    out->values.push_back(v);
    text += (out->op == Op::kEq && Chance(rng, 0.1)) ? "==" : std::string(OpName(out->op));
    text += ValueText(rng, spec, v);
  }
  return text;
}

TEST(QueryPropertyTest, MatchesAgreesWithBruteForceOverJson) {
  Rng rng(20261129);
  std::vector<Offer> offers;
  std::vector<Json> jsons;
  for (int i = 0; i < 150; ++i) {
    offers.push_back(RandomOffer(rng, i));
    jsons.push_back(ToJson(offers.back()));
  }
  int matched = 0, total = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    const int n = std::uniform_int_distribution<int>(1, 3)(rng);
    std::vector<GenTerm> terms(n);
    std::string text;
    for (int i = 0; i < n; ++i) {
      if (i > 0) text += Chance(rng, 0.8) ? " " : "\t ";
      text += RandomTerm(rng, &terms[i]);
    }
    auto q = ParseQuery(text);
    ASSERT_TRUE(q.ok()) << text << "\n" << q.status().message();
    ASSERT_EQ(q->terms.size(), terms.size()) << text;
    for (size_t k = 0; k < offers.size(); ++k) {
      bool want = true;
      for (int i = 0; i < n; ++i) {
        const bool term_want = TermOracle(terms[i], jsons[k]);
        ASSERT_EQ(MatchesTerm(q->terms[i], offers[k]), term_want)
            << "term " << i << " of `" << text << "` on " << DumpJson(jsons[k]);
        want = want && term_want;
      }
      ASSERT_EQ(Matches(*q, offers[k]), want) << text;
      matched += want;
      ++total;
    }
  }
  // The generator must exercise both outcomes, or the agreement above proves little.
  EXPECT_GT(matched, total / 20);
  EXPECT_LT(matched, total - total / 20);
}

// Sorting with random keys is a strict weak order that puts unknown values last.
TEST(QueryPropertyTest, OfferLessIsAStrictOrder) {
  Rng rng(7);
  std::vector<Offer> offers;
  for (int i = 0; i < 60; ++i) offers.push_back(RandomOffer(rng, i));
  const std::vector<std::string> names = {"price", "-price", "spot_price", "-spot_price", "driver",
                                          "-cuda", "region", "-gpu",       "verified",    "-perf"};
  for (int iter = 0; iter < 50; ++iter) {
    std::string text = Pick(rng, names) + "," + Pick(rng, names);
    auto keys = ParseSortKeys(text);
    ASSERT_TRUE(keys.ok()) << text;
    std::vector<Offer> sorted = offers;
    std::sort(sorted.begin(), sorted.end(),
              [&](const Offer& a, const Offer& b) { return OfferLess(*keys, a, b); });
    for (size_t i = 0; i + 1 < sorted.size(); ++i) {
      ASSERT_TRUE(OfferLess(*keys, sorted[i], sorted[i + 1])) << text << " at " << i;
      ASSERT_FALSE(OfferLess(*keys, sorted[i + 1], sorted[i])) << text << " at " << i;
    }
    if ((*keys)[0].field == Field::kSpotPrice) {
      // Offers without interruptible capacity form the tail.
      auto first_none = std::find_if(sorted.begin(), sorted.end(), [](const Offer& o) {
        return o.interruptible_price_per_gpu_hour == 0;
      });
      EXPECT_TRUE(std::all_of(first_none, sorted.end(), [](const Offer& o) {
        return o.interruptible_price_per_gpu_hour == 0;
      })) << text;
    }
  }
}

// Anything that parses must print and parse back to the same query; anything that does not
// must say where.
void CheckParseOrPointedError(const std::string& text) {
  auto q = ParseQuery(text);
  if (q.ok()) {
    const std::string canonical = ToString(*q);
    auto again = ParseQuery(canonical);
    ASSERT_TRUE(again.ok()) << canonical << "\n" << again.status().message();
    EXPECT_EQ(*again, *q) << canonical;
  } else {
    EXPECT_EQ(q.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(q.status().message().find("column"), std::string::npos) << q.status().message();
  }
}

TEST(QueryFuzzTest, RandomBytesNeverCrash) {
  Rng rng(42);
  const std::string alphabet = "gpuricecda= !<>[],'\"*?$%.-_019GBMiTb\t\n";
  int parsed = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    const size_t len = std::uniform_int_distribution<size_t>(0, 40)(rng);
    std::string text;
    for (size_t i = 0; i < len; ++i) {
      text += Chance(rng, 0.8) ? Pick(rng, std::vector<char>(alphabet.begin(), alphabet.end()))
                               : static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
    }
    ASSERT_NO_FATAL_FAILURE(CheckParseOrPointedError(text)) << text;
    parsed += ParseQuery(text).ok();
  }
  EXPECT_GT(parsed, 0);  // some inputs (at least the empty ones) parse
}

TEST(QueryFuzzTest, MutatedQueriesNeverCrash) {
  Rng rng(1234);
  const std::vector<std::string> seeds = {
      "gpu=a100-80gb gpus>=4 price<2.5 region=us-* cuda>=12.1 reliability>0.99",
      "gpu notin [a100,'nvidia h100'] vram>=40960MiB torch>=2.1 verified in [verified]",
      "node=\"my box\" spot_price<=1.2 toolkit!=12.1 source=agent cc in [8.0, 9.0]",
  };
  const std::string inserts = "=<>!['\"], *?$%\xc3\xff";
  int errors = 0;
  for (int iter = 0; iter < 6000; ++iter) {
    std::string text = Pick(rng, seeds);
    const int edits = std::uniform_int_distribution<int>(1, 4)(rng);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t at = std::uniform_int_distribution<size_t>(0, text.size() - 1)(rng);
      switch (std::uniform_int_distribution<int>(0, 3)(rng)) {
        case 0:
          text.erase(at, 1);
          break;
        case 1:
          text.insert(at, 1, Pick(rng, std::vector<char>(inserts.begin(), inserts.end())));
          break;
        case 2:
          text[at] = Pick(rng, std::vector<char>(inserts.begin(), inserts.end()));
          break;
        default:
          text = text.substr(0, at);  // truncation: unterminated quotes and lists
      }
    }
    ASSERT_NO_FATAL_FAILURE(CheckParseOrPointedError(text)) << text;
    errors += !ParseQuery(text).ok();
  }
  EXPECT_GT(errors, 1000);  // the mutations do reach the error paths
}

TEST(QueryFuzzTest, RandomSortKeysNeverCrash) {
  Rng rng(99);
  const std::string alphabet = "pricefdsv-+, _\xff";
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text;
    const size_t len = std::uniform_int_distribution<size_t>(0, 16)(rng);
    for (size_t i = 0; i < len; ++i) {
      text += Pick(rng, std::vector<char>(alphabet.begin(), alphabet.end()));
    }
    auto keys = ParseSortKeys(text);
    if (!keys.ok()) {
      EXPECT_NE(keys.status().message().find("column"), std::string::npos)
          << keys.status().message();
    }
  }
}

}  // namespace
}  // namespace sluice::market
