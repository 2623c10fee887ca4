#include "market/query.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

namespace sluice::market {
namespace {

using testing::ElementsAre;
using testing::HasSubstr;
using testing::Not;

// Four offers chosen so that every operator on every field type separates them differently.
// Short names in the tables: A = aws a100-40gb, L = lambda a100-80gb, H = home h100, R = rtx.
std::vector<Offer> Fleet() {
  Offer a;
  a.id = "A";
  a.provider = "aws";
  a.node = "p4d.24xlarge";
  a.region = "us-east-1";
  a.zone = "us-east-1a";
  a.gpu_label = "a100-40gb";
  a.gpu_model = "a100";
  a.gpus = 8;
  a.gpus_available = 8;
  a.vram_gb = 40;
  a.form_factor = "sxm";
  a.interconnect = "nvlink";
  a.compute_capability = "8.0";
  a.driver_version = "535.104.05";
  a.cuda_version = "12.2";
  a.toolkits = {"11.8", "12.1"};
  a.torch_builds = {"2.1.0+cu121"};
  a.python_version = "3.10.12";
  a.cpus = 96;
  a.memory_gb = 1152;
  a.disk_gb = 8000;
  a.price_per_gpu_hour = 4.1;
  a.interruptible_price_per_gpu_hour = 1.2;
  a.reliability = 0.999;
  a.health_score = 95;
  a.perf_score = 0.8;
  a.verified = VerifiedState::kVerified;
  a.source = OfferSource::kCatalog;

  Offer l = a;
  l.id = "L";
  l.provider = "lambda";
  l.node = "gpu_8x_a100_80gb";
  l.region = "us-west-2";
  l.zone = "us-west-2b";
  l.gpu_label = "a100-80gb";
  l.gpus_available = 4;
  l.vram_gb = 80;
  l.driver_version = "535.86.05";
  l.cuda_version = "12.1";
  l.toolkits = {"12.1"};
  l.torch_builds = {"2.0.1+cu118"};
  l.python_version = "3.1.4";  // 3.1 is not 3.10: the prefix is on dotted parts, not bytes
  l.cpus = 64;
  l.memory_gb = 512;
  l.disk_gb = 2048;
  l.price_per_gpu_hour = 1.99;
  l.interruptible_price_per_gpu_hour = 0;  // no interruptible capacity
  l.reliability = 0.995;
  l.health_score = 90;
  l.perf_score = 1.0;
  l.verified = VerifiedState::kUnverified;

  Offer h;
  h.id = "H";
  h.provider = "home";
  h.node = "n1";
  h.node_name = "gpu-box-7";  // what `sluice nodes` shows
  h.region = "eu-west-1";
  h.zone = "";
  h.gpu_label = "h100-80gb";
  h.gpu_model = "h100";
  h.gpus = 2;
  h.gpus_available = 2;
  h.vram_gb = 80;
  h.form_factor = "pcie";
  h.interconnect = "pcie";
  h.compute_capability = "9.0";
  h.driver_version = "550.54.15";
  h.cuda_version = "12.4";
  h.python_version = "3.11.2";
  h.cpus = 32;
  h.memory_gb = 256;
  h.disk_gb = 1000;
  h.price_per_gpu_hour = 2.5;
  h.interruptible_price_per_gpu_hour = 1.5;
  h.reliability = 0.98;
  h.health_score = 70;
  h.perf_score = 2.1;
  h.verified = VerifiedState::kVerified;
  h.source = OfferSource::kAgent;

  Offer r = h;
  r.id = "R";
  r.node = "my box";
  r.node_name = "";
  r.region = "us-central1";
  r.zone = "us-central1-a";
  r.gpu_label = "rtx4090-24gb";
  r.gpu_model = "rtx4090";
  r.gpus = 1;
  r.gpus_available = 1;
  r.vram_gb = 24;
  r.form_factor = "";
  r.compute_capability = "8.9";
  r.driver_version = "";  // unknown
  r.cuda_version = "";
  r.toolkits = {"12.4"};
  r.torch_builds = {"2.3.0+cu124", "2.1.2+cu121"};
  r.python_version = "";  // no interpreter answered: unknown, matches nothing
  r.cpus = 16;
  r.memory_gb = 64;
  r.disk_gb = 500;
  r.price_per_gpu_hour = 0.35;
  r.interruptible_price_per_gpu_hour = 0.2;
  r.reliability = 0.9;
  r.health_score = 40;
  r.perf_score = 0.6;
  r.verified = VerifiedState::kDeverified;
  return {a, l, h, r};
}

// The ids (in fleet order, concatenated) of the offers that match, or "error: ..." .
std::string Ids(std::string_view text) {
  auto q = ParseQuery(text);
  if (!q.ok()) return "error: " + q.status().message();
  std::string out;
  for (const Offer& o : Fleet()) {
    if (Matches(*q, o)) out += o.id;
  }
  return out;
}

struct MatchCase {
  const char* query;
  const char* ids;
};

// gtest prints parameters through these, so a failure names the query rather than bytes.
void PrintTo(const MatchCase& c, std::ostream* os) { *os << c.query; }

class MatchTable : public testing::TestWithParam<MatchCase> {};

TEST_P(MatchTable, MatchesExpectedOffers) {
  EXPECT_EQ(Ids(GetParam().query), GetParam().ids) << GetParam().query;
}

// Label sets: short forms resolve through the registry; globs match labels directly.
const MatchCase kLabelCases[] = {
    {"gpu=a100-80gb", "L"},
    {"gpu=a100", "AL"},
    {"gpu=A100", "AL"},
    {"gpu==a100", "AL"},
    {"gpu!=a100", "HR"},
    {"gpu in [h100-80gb,rtx4090-24gb]", "HR"},
    {"gpu notin [a100,h100]", "R"},
    {"gpu=a100*", "AL"},
    {"gpu=*-80gb", "LH"},
    {"gpu!=*-80gb", "AR"},
    {"gpu in [a100-40gb, *4090*]", "AR"},
    {"label=h100-80gb", "H"},
    {"gpu_label='nvidia a100'", "AL"},
};
INSTANTIATE_TEST_SUITE_P(Label, MatchTable, testing::ValuesIn(kLabelCases));

// Strings: case-insensitive, globs on = != in notin, quoting.
const MatchCase kStringCases[] = {
    {"model=a100", "AL"},
    {"gpu_model=RTX4090", "R"},
    {"provider=home", "HR"},
    {"provider=HOME", "HR"},
    {"provider!=home", "AL"},
    {"region=us-*", "ALR"},
    {"region=us-?ast-1", "A"},
    {"region!=us-*", "H"},
    {"region in [eu-*,us-west-2]", "LH"},
    {"region notin [eu-*,us-west-2]", "AR"},
    {"region=\"us-east-1\"", "A"},
    {"provider='home'", "HR"},
    {"zone=\"\"", "H"},
    {"zone!=''", "ALR"},
    {"form=sxm", "AL"},
    {"form_factor=pcie", "H"},
    {"interconnect=nvlink", "AL"},
    {"node=n*", "H"},
    {"node=\"my box\"", "R"},
    {"node in ['my box',n1]", "HR"},
    {"node=*box", "R"},
    // A node's name as `sluice nodes` shows it matches as well as its id (issue 13 item 4).
    {"node=gpu-box-7", "H"},
    {"node=GPU-BOX-*", "H"},
    {"node!=gpu-box-7", "ALR"},
    {"node in [gpu-box-7,'my box']", "HR"},
    {"id=?", "ALHR"},
    {"id in [a,r]", "AR"},
};
INSTANTIATE_TEST_SUITE_P(String, MatchTable, testing::ValuesIn(kStringCases));

// Integers and numbers with every operator, units and aliases.
const MatchCase kNumberCases[] = {
    {"gpus>=4", "AL"},
    {"gpus>4", "A"},
    {"gpus=2", "H"},
    {"gpus!=2", "ALR"},
    {"gpus<2", "R"},
    {"gpus<=2", "HR"},
    {"gpus in [1,2]", "HR"},
    {"gpus notin [1, 2]", "AL"},
    {"gpus_available>=8", "A"},
    {"cpus>=64", "AL"},
    {"cpu<32", "R"},
    {"price<2.5", "LR"},
    {"price<=2.5", "LHR"},
    {"price>4", "A"},
    {"price>=2", "AH"},
    {"price=$1.99", "L"},
    {"price!=1.99", "AHR"},
    {"price in [0.35,2.5]", "HR"},
    {"price_per_gpu_hour>=2", "AH"},
    {"vram>=40GB", "ALH"},
    {"vram>=40gb", "ALH"},
    {"vram>=40G", "ALH"},
    {"vram>=40GiB", "ALH"},
    {"vram>=40960MiB", "ALH"},
    {"vram>=40960MB", "ALH"},
    {"vram>40", "LH"},
    {"vram>=0.078125TB", "LH"},
    {"vram_gb=24", "R"},
    {"vram<=24576M", "R"},
    {"memory>=512GB", "AL"},
    {"ram<=64", "R"},
    {"memory>=1TB", "A"},
    {"memory_gb>1tib", "A"},
    {"disk>=2TB", "AL"},
    {"disk<1000GB", "R"},
    {"reliability>0.99", "AL"},
    {"reliability>=98%", "ALH"},
    {"health>=90", "AL"},
    {"health_score<50", "R"},
    {"perf>1", "H"},
    {"perf_score<=0.8", "AR"},
};
INSTANTIATE_TEST_SUITE_P(Number, MatchTable, testing::ValuesIn(kNumberCases));

// Interruptible price 0 means "not offered": like SQL NULL it satisfies no term at all.
const MatchCase kSpotCases[] = {
    {"spot_price<1", "R"},     {"spot_price<2", "AHR"},      {"spot_price>=0", "AHR"},
    {"spot_price!=1.2", "HR"}, {"interruptible<=1.2", "AR"}, {"spot notin [1.5]", "AR"},
    {"spot_price=0", ""},
};
INSTANTIATE_TEST_SUITE_P(Spot, MatchTable, testing::ValuesIn(kSpotCases));

// Versions in version order; an unknown (empty) version matches nothing.
const MatchCase kVersionCases[] = {
    {"driver>535.86.05", "AH"},
    {"driver>=535.86.05", "ALH"},
    {"driver<550", "AL"},
    {"driver=535.104.05", "A"},
    {"driver!=535.104.05", "LH"},
    {"driver=535.*", "AL"},
    {"driver in [535.86.05,550.54.15]", "LH"},
    {"driver notin [535.86.05]", "AH"},
    {"cuda>=12.1", "ALH"},
    {"cuda>12.1", "AH"},
    {"cuda<=12.1", "L"},
    {"cuda=12.1.0", "L"},
    {"cuda_version<12.4", "AL"},
    {"cc>=8.9", "HR"},
    {"cc in [8.0,9.0]", "ALH"},
    {"cc notin [8.0]", "HR"},
    {"compute_capability=9.0", "H"},
};
INSTANTIATE_TEST_SUITE_P(Version, MatchTable, testing::ValuesIn(kVersionCases));

// Lists: any element satisfies; != and notin mean no element equals / is listed.
const MatchCase kListCases[] = {
    {"toolkit=12.1", "AL"},
    {"toolkit>=12.4", "R"},
    {"toolkit<12", "A"},
    {"toolkit!=12.1", "HR"},
    {"toolkit in [11.8,12.4]", "AR"},
    {"toolkit notin [12.1]", "HR"},
    {"toolkits>11.8", "ALR"},
    {"torch>=2.1", "AR"},
    {"torch=2.1.0", "A"},
    {"torch=2.1.0+cu121", "A"},
    {"torch=2.1.2+cu121", "R"},
    {"torch=*cu118", "L"},
    {"pytorch<2.1", "L"},
    {"torch!=2.1.0", "LHR"},
    {"torch_builds in [2.0.1, 2.3.0]", "LR"},
};
INSTANTIATE_TEST_SUITE_P(List, MatchTable, testing::ValuesIn(kListCases));

// `python` compares at the precision the value is written: A 3.10.12, L 3.1.4, H 3.11.2, R
// unknown.
const MatchCase kPythonCases[] = {
    {"python=3.10", "A"},          {"python=3.1", "L"},
    {"python=3", "ALH"},           {"python=3.10.12", "A"},
    {"python=3.10.1", ""},         {"python!=3.10", "LH"},
    {"python>=3.10", "AH"},        {"python>3.10", "H"},
    {"python<=3.10", "AL"},        {"python<3.10", "L"},
    {"python<3.11", "AL"},         {"python in [3.10, 3.11]", "AH"},
    {"python notin [3.10]", "LH"}, {"python_version=3.11", "H"},
    {"python=3.1*", "ALH"},  // a pattern is on the text: 3.11.2 starts with 3.1
};
INSTANTIATE_TEST_SUITE_P(Python, MatchTable, testing::ValuesIn(kPythonCases));

const MatchCase kEnumCases[] = {
    {"verified=verified", "AH"},
    {"verified=VERIFIED", "AH"},
    {"verified!=verified", "LR"},
    {"verified in [unverified,deverified]", "LR"},
    {"verified notin [deverified]", "ALH"},
    {"source=agent", "HR"},
    {"source=catalog", "AL"},
    {"source!=catalog", "HR"},
    {"source notin [agent]", "AL"},
};
INSTANTIATE_TEST_SUITE_P(Enum, MatchTable, testing::ValuesIn(kEnumCases));

const MatchCase kCombinedCases[] = {
    {"", "ALHR"},
    {"   ", "ALHR"},
    {"gpu=a100-80gb gpus>=4 price<2.5 region=us-* cuda>=12.1 reliability>0.99", "L"},
    {"gpus>=4\tprice<2.5\n", "L"},
    {"gpu=a100 gpus>=4 spot_price<2", "A"},
    {"source=agent verified=verified perf>2", "H"},
    {"gpu in [a100,h100] region notin [us-west-*] driver>=535.104.05", "AH"},
};
INSTANTIATE_TEST_SUITE_P(Combined, MatchTable, testing::ValuesIn(kCombinedCases));

struct ErrorCase {
  const char* query;
  int column;
  const char* message;  // expected substring, including " at column N"
};

void PrintTo(const ErrorCase& c, std::ostream* os) { *os << c.query; }

class ErrorTable : public testing::TestWithParam<ErrorCase> {};

TEST_P(ErrorTable, PointsAtTheOffendingToken) {
  const ErrorCase& c = GetParam();
  auto q = ParseQuery(c.query);
  ASSERT_FALSE(q.ok()) << c.query;
  EXPECT_EQ(q.status().code(), StatusCode::kInvalidArgument);
  const std::string msg = q.status().message();
  EXPECT_THAT(msg, HasSubstr(c.message)) << c.query;
  EXPECT_THAT(msg, HasSubstr(" at column " + std::to_string(c.column))) << c.query;
  // The last line is the caret line; its `^` sits under the column (after a 2-space indent).
  const std::string caret_line = msg.substr(msg.rfind('\n') + 1);
  EXPECT_EQ(caret_line.find('^'), static_cast<size_t>(c.column - 1 + 2)) << msg;
}

const ErrorCase kErrorCases[] = {
    {"gpu=a100-80gb prce<2", 15,
     "unknown field `prce` at column 15 (did you mean `price`?); valid fields: cc, cpus, cuda, "
     "disk, driver, form, gpu, gpus, health, id, interconnect, memory, model, node, perf, price, "
     "provider, python, region, reliability, source, spot_price, toolkit, torch, verified, vram, "
     "zone"},
    {"price<cheap", 7, "expected a number for `price`, got `cheap` at column 7"},
    {"gpus>=4 price<cheap", 15, "expected a number for `price`, got `cheap` at column 15"},
    {"region<us", 7, "`<` is not valid for `region` (a string field): use = or != at column 7"},
    {"gpu>=a100", 4, "`>=` is not valid for `gpu` (a GPU label field)"},
    {"source<agent", 7, "`<` is not valid for `source` (an enum field)"},
    {"region='us", 8, "unterminated quote at column 8"},
    {"region in [\"us, eu]", 12, "unterminated quote at column 12"},
    {"gpu in [a100,h100", 8, "missing `]` for the list opened at column 8"},
    {"gpu in [a100 h100]", 14, "expected `,` or `]` in the list, got `h` at column 14"},
    {"gpu in []", 9, "empty list for `gpu` at column 9"},
    {"gpu in [a100,]", 14, "missing list item before `]` at column 14"},
    {"gpus in [1,,2]", 12, "missing value for `gpus` at column 12"},
    {"gpus in [1,2]x", 14, "expected whitespace after `]` at column 14"},
    {"gpu in a100", 8, "expected `[` after `in`"},
    {"gpu=[a100]", 5, "a list needs `in` or `notin`"},
    {"gpu=a10o", 5, "unknown GPU `a10o` at column 5"},
    {"gpus>=1.5", 7, "expected a whole number for `gpus`, got `1.5` at column 7"},
    {"gpus>=-9223372036854775808", 7, "expected a whole number for `gpus`"},
    {"cpus<99999999999999999999", 6, "expected a whole number for `cpus`"},
    {"gpu=\xc3\xa9\xc3\xa9x", 5, "unknown GPU"},
    {"vram>=40XB", 7, "unknown unit `xb` in `40XB` for `vram`"},
    {"price<2GB", 7, "expected a number for `price`, got `2GB`"},
    {"price<inf", 7, "expected a number for `price`"},
    {"price<nan", 7, "expected a number for `price`"},
    {"price", 1, "expected an operator (=, !=, <, <=, >, >=, in, notin) after `price` at column 1"},
    {"gpus >=4", 1, "expected an operator (=, !=, <, <=, >, >=, in, notin) after `gpus`"},
    {"price<", 6, "missing value after `price<` at column 6"},
    {"price~3", 6, "expected an operator (=, !=, <, <=, >, >=, in, notin) after `price`, got `~3`"},
    {"=3", 1, "expected a field name, got `=3` at column 1; valid fields: cc"},
    {"cuda>=abc", 7, "expected a version for `cuda` (like 12.1), got `abc` at column 7"},
    {"cuda>12.*", 6, "a pattern (`*`, `?`) in `12.*` is only valid with =, !=, in or notin"},
    {"verified=yes", 10, "expected one of verified, unverified, deverified for `verified`"},
    {"source in [agent,cloud]", 18, "expected one of agent, catalog for `source`, got `cloud`"},
    {"region='a'b", 11, "expected whitespace after the closing quote at column 11"},
    // Columns count characters, not bytes: `é` is two bytes but one column.
    {"provider=\xc3\xa9 price<x", 18, "expected a number for `price`, got `x` at column 18"},
    {"gpu=\xff", 5, "invalid UTF-8 at column 5"},
};
INSTANTIATE_TEST_SUITE_P(Malformed, ErrorTable, testing::ValuesIn(kErrorCases));

TEST(QueryErrorTest, CaretUnderlinesTheWholeToken) {
  auto q = ParseQuery("price<cheap");
  ASSERT_FALSE(q.ok());
  EXPECT_THAT(q.status().message(), testing::EndsWith("\n  price<cheap\n        ^~~~~"));
}

TEST(QueryErrorTest, CaretWidthCountsCharacters) {
  auto q = ParseQuery("region<\xc3\xa9\xc3\xa9");
  ASSERT_FALSE(q.ok());
  EXPECT_THAT(q.status().message(), testing::EndsWith("\n        ^"));  // under `<`
  q = ParseQuery("cuda>\xc3\xa9\xc3\xa9");
  ASSERT_FALSE(q.ok());
  EXPECT_THAT(q.status().message(), testing::EndsWith("\n       ^~"));  // two characters
}

TEST(QueryErrorTest, UnknownGpuKeepsTheRegistrySuggestions) {
  auto q = ParseQuery("gpu=a10o");
  ASSERT_FALSE(q.ok());
  EXPECT_THAT(q.status().message(), HasSubstr("did you mean"));
  EXPECT_THAT(q.status().message(), HasSubstr("a100-80gb"));
}

TEST(QueryErrorTest, OversizedQueryIsRejectedWithAColumn) {
  auto q = ParseQuery(std::string(20000, 'a'));
  ASSERT_FALSE(q.ok());
  EXPECT_THAT(q.status().message(), HasSubstr("longer than 16384 bytes at column 16385"));
}

TEST(QueryParseTest, TermsExposeResolvedValuesForTheIndex) {
  auto q = ParseQuery("gpu=A100  price<$2.5 gpus>=4 vram>=40960MiB verified=deverified");
  ASSERT_TRUE(q.ok()) << q.status().message();
  ASSERT_EQ(q->terms.size(), 5u);
  const Term* gpu = FindTerm(*q, Field::kGpu, Op::kEq);
  ASSERT_NE(gpu, nullptr);
  EXPECT_THAT(gpu->labels, ElementsAre("a100-40gb", "a100-80gb"));
  EXPECT_THAT(gpu->values, ElementsAre("a100"));
  EXPECT_EQ(gpu->column, 1);
  const Term* price = FindTerm(*q, Field::kPrice, Op::kLt);
  ASSERT_NE(price, nullptr);
  EXPECT_THAT(price->numbers, ElementsAre(2.5));
  EXPECT_EQ(price->column, 11);
  EXPECT_THAT(FindTerm(*q, Field::kGpus, Op::kGe)->numbers, ElementsAre(4));
  EXPECT_THAT(FindTerm(*q, Field::kVram, Op::kGe)->numbers, ElementsAre(40));
  EXPECT_THAT(FindTerm(*q, Field::kVerified, Op::kEq)->numbers,
              ElementsAre(static_cast<int>(VerifiedState::kDeverified)));
  EXPECT_EQ(FindTerm(*q, Field::kPrice, Op::kGt), nullptr);
  EXPECT_EQ(FindTerm(*q, Field::kRegion, Op::kEq), nullptr);
}

TEST(QueryParseTest, FieldNamesAndAliases) {
  const auto names = QueryFieldNames();
  EXPECT_EQ(names.size(), 27u);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  for (const auto& n : names) {
    auto f = FieldFromName(n);
    ASSERT_TRUE(f.has_value()) << n;
    EXPECT_EQ(FieldName(*f), n);
  }
  EXPECT_EQ(FieldFromName("gpus_available"), Field::kGpus);
  EXPECT_EQ(FieldFromName("interruptible"), Field::kSpotPrice);
  EXPECT_EQ(FieldFromName("RAM"), Field::kMemory);
  EXPECT_EQ(FieldFromName("form_factor"), Field::kForm);
  EXPECT_EQ(FieldFromName("compute_capability"), Field::kCc);
  EXPECT_EQ(FieldFromName("prce"), std::nullopt);
  EXPECT_EQ(TypeOf(Field::kDriver), FieldType::kVersion);
  EXPECT_EQ(TypeOf(Field::kTorch), FieldType::kVersionList);
  EXPECT_EQ(FieldFromName("python_version"), Field::kPython);
  EXPECT_EQ(TypeOf(Field::kPython), FieldType::kVersion);
}

TEST(MakeTermTest, BuildsTheTermTheParserWould) {
  const std::pair<Field, std::string> cases[] = {
      {Field::kCuda, "cuda>=12.1"},   {Field::kDriver, "driver<550"},
      {Field::kTorch, "torch=2.1.0"}, {Field::kPython, "python=3.10"},
      {Field::kPrice, "price<=2.5"},  {Field::kRegion, "region=us-*"},
  };
  for (const auto& [field, text] : cases) {
    auto parsed = ParseQuery(text);
    ASSERT_TRUE(parsed.ok()) << text;
    const Term& want = parsed->terms[0];
    auto made = MakeTerm(field, want.op, want.values);
    ASSERT_TRUE(made.ok()) << text << ": " << made.status().message();
    EXPECT_EQ(*made, want) << text;
    EXPECT_EQ(ToString(Query{{*made}}), text);
  }
  auto list = MakeTerm(Field::kDriver, Op::kIn, {"535.104", "535.104.*"});
  ASSERT_TRUE(list.ok()) << list.status().message();
  EXPECT_EQ(ToString(Query{{*list}}), "driver in [535.104,535.104.*]");
  EXPECT_THAT(MakeTerm(Field::kCuda, Op::kGe, {"twelve"}).status().message(),
              HasSubstr("expected a version for `cuda` (like 12.1), got `twelve`"));
  EXPECT_FALSE(MakeTerm(Field::kCuda, Op::kGe, {}).ok());
  EXPECT_FALSE(MakeTerm(Field::kCuda, Op::kGe, {"12.1", "12.4"}).ok());
  EXPECT_THAT(MakeTerm(Field::kRegion, Op::kLt, {"x"}).status().message(),
              HasSubstr("`<` is not valid for `region`"));
}

TEST(QueryToStringTest, CanonicalForm) {
  auto q = ParseQuery(
      "GPU=A100 vram>=40960MiB price<$2.5 region in [US-*, 'eu west'] node=\"my box\" "
      "reliability>=99% Torch=2.1.0+CU121 zone=''");
  ASSERT_TRUE(q.ok()) << q.status().message();
  EXPECT_EQ(ToString(*q),
            "gpu=a100 vram>=40 price<2.5 region in [us-*,\"eu west\"] node=\"my box\" "
            "reliability>=0.99 torch=2.1.0+cu121 zone=\"\"");
}

TEST(QueryToStringTest, RoundTripsToAnEqualQuery) {
  const char* queries[] = {
      "gpu=a100-80gb gpus>=4 price<2.5 region=us-* cuda>=12.1 reliability>0.99",
      "gpu notin [a100,*4090*] vram<=24576M spot_price!=0.1 memory>1tb disk<0.5",
      "node in ['my box',\"it's\",'a,b',\"x]y\"] provider!=\"\" verified in [verified]",
      "toolkit notin [12.1,11.*] torch>=2.1 driver=535.* cc!=8.0 source=catalog id=a?",
      "region='us east' form==sxm interconnect!=pcie model=a100 health>=50 perf<1e-3",
  };
  for (const char* text : queries) {
    auto q = ParseQuery(text);
    ASSERT_TRUE(q.ok()) << text << ": " << q.status().message();
    const std::string canonical = ToString(*q);
    auto again = ParseQuery(canonical);
    ASSERT_TRUE(again.ok()) << canonical << ": " << again.status().message();
    EXPECT_EQ(*again, *q) << text << " -> " << canonical;
    EXPECT_EQ(ToString(*again), canonical);
    for (const Offer& o : Fleet()) EXPECT_EQ(Matches(*again, o), Matches(*q, o)) << canonical;
  }
}

TEST(QueryFromResourcesTest, SameQueryAsTheHandWrittenOne) {
  // 4 GPUs for at most $10/h in total → $2.5 per GPU-hour.
  auto from_spec = QueryFromResources({"A100"}, 40.0, 4, 32, 256, 10.0);
  ASSERT_TRUE(from_spec.ok()) << from_spec.status().message();
  auto typed = ParseQuery("gpu=a100 vram>=40 gpus>=4 cpus>=32 memory>=256 price<=2.5");
  ASSERT_TRUE(typed.ok());
  EXPECT_EQ(*from_spec, *typed);
  EXPECT_EQ(ToString(*from_spec), ToString(*typed));
  std::string ids;
  for (const Offer& o : Fleet()) {
    EXPECT_EQ(Matches(*from_spec, o), Matches(*typed, o)) << o.id;
    if (Matches(*from_spec, o)) ids += o.id;
  }
  EXPECT_EQ(ids, "L");  // A is too expensive per GPU; H and R are not A100s
}

TEST(QueryFromResourcesTest, SeveralLabelsAndNoOptionalBounds) {
  auto q = QueryFromResources({"a100-80gb", "h100"}, std::nullopt, 2, 0, 0, std::nullopt);
  ASSERT_TRUE(q.ok()) << q.status().message();
  EXPECT_EQ(ToString(*q), "gpu in [a100-80gb,h100] gpus>=2");
  std::string ids;
  for (const Offer& o : Fleet()) {
    if (Matches(*q, o)) ids += o.id;
  }
  EXPECT_EQ(ids, "LH");
}

TEST(QueryFromResourcesTest, BudgetIsSplitAcrossGpus) {
  auto q = QueryFromResources({}, std::nullopt, 8, 0, 0, 40.0);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(ToString(*q), "gpus>=8 price<=5");
  EXPECT_TRUE(Matches(*q, Fleet()[0]));  // 8 × $4.1 = $32.8 ≤ $40
  auto cpu_only = QueryFromResources({}, std::nullopt, 0, 4, 8, 1.5);
  ASSERT_TRUE(cpu_only.ok());
  // Offers are priced per GPU; a CPU job's budget is checked on its allocation price instead.
  EXPECT_EQ(ToString(*cpu_only), "cpus>=4 memory>=8");
  EXPECT_TRUE(QueryFromResources({}, std::nullopt, 0, 0, 0, std::nullopt)->terms.empty());
}

TEST(QueryFromResourcesTest, CapacityPicksThePriceTheBudgetBounds) {
  auto spot = QueryFromResources({}, std::nullopt, 2, 0, 0, 3.0, PriceBasis::kInterruptible);
  ASSERT_TRUE(spot.ok());
  EXPECT_EQ(ToString(*spot), "gpus>=2 spot_price<=1.5");
  // Without a budget, interruptible work still needs offers that sell interruptible capacity.
  auto any_spot =
      QueryFromResources({}, std::nullopt, 1, 0, 0, std::nullopt, PriceBasis::kInterruptible);
  EXPECT_EQ(ToString(*any_spot), "gpus>=1 spot_price>0");
  for (const Offer& o : Fleet()) {
    EXPECT_EQ(Matches(*any_spot, o),
              o.interruptible_price_per_gpu_hour > 0 && o.gpus_available >= 1)
        << o.id;
  }
  auto either = QueryFromResources({}, std::nullopt, 2, 0, 0, 3.0, PriceBasis::kEither);
  EXPECT_EQ(ToString(*either), "gpus>=2");
}

TEST(QueryFromResourcesTest, UnknownLabelAndBadNumbersAreErrors) {
  auto q = QueryFromResources({"a10o"}, std::nullopt, 1, 0, 0, std::nullopt);
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(q.status().message(), HasSubstr("unknown GPU `a10o`; did you mean"));
  EXPECT_THAT(q.status().message(), Not(HasSubstr("column")));
  EXPECT_FALSE(QueryFromResources({}, std::nullopt, 1, 0, NAN, std::nullopt).ok());
  EXPECT_FALSE(QueryFromResources({}, INFINITY, 1, 0, 0, std::nullopt).ok());
}

TEST(SortKeysTest, ParsesDirectionsAndAliases) {
  auto keys = ParseSortKeys("price,-perf");
  ASSERT_TRUE(keys.ok());
  EXPECT_THAT(*keys, ElementsAre(SortKey{Field::kPrice, false}, SortKey{Field::kPerf, true}));
  keys = ParseSortKeys(" +price , -interruptible,ram ");
  ASSERT_TRUE(keys.ok()) << keys.status().message();
  EXPECT_THAT(*keys, ElementsAre(SortKey{Field::kPrice, false}, SortKey{Field::kSpotPrice, true},
                                 SortKey{Field::kMemory, false}));
  keys = ParseSortKeys("");
  ASSERT_TRUE(keys.ok());
  EXPECT_TRUE(keys->empty());
}

TEST(SortKeysTest, ErrorsPointAndListTheValidFields) {
  auto keys = ParseSortKeys("price,pref");
  ASSERT_FALSE(keys.ok());
  EXPECT_THAT(keys.status().message(),
              HasSubstr("unknown sort field `pref` at column 7 (did you mean `perf`?); valid "
                        "sort fields: cc, cpus, cuda, disk"));
  EXPECT_THAT(keys.status().message(), Not(HasSubstr("toolkit")));
  keys = ParseSortKeys("price,,perf");
  ASSERT_FALSE(keys.ok());
  EXPECT_THAT(keys.status().message(), HasSubstr("empty sort key at column 7"));
  keys = ParseSortKeys("-toolkit");
  ASSERT_FALSE(keys.ok());
  EXPECT_THAT(keys.status().message(),
              HasSubstr("holds a list and cannot be sorted on at column 2"));
  keys = ParseSortKeys("-");
  ASSERT_FALSE(keys.ok());
  EXPECT_THAT(keys.status().message(), HasSubstr("column 2"));
}

std::string Sorted(std::string_view keys_text, std::vector<Offer> offers = Fleet()) {
  auto keys = ParseSortKeys(keys_text);
  if (!keys.ok()) return "error";
  std::sort(offers.begin(), offers.end(),
            [&](const Offer& a, const Offer& b) { return OfferLess(*keys, a, b); });
  std::string out;
  for (const Offer& o : offers) out += o.id;
  return out;
}

TEST(SortKeysTest, OrdersByKeysWithDirectionAndNullsLast) {
  EXPECT_EQ(Sorted("price"), "RLHA");
  EXPECT_EQ(Sorted("-price"), "AHLR");
  EXPECT_EQ(Sorted("-perf"), "HLAR");
  EXPECT_EQ(Sorted("spot_price"), "RAHL");   // L offers no interruptible capacity: last
  EXPECT_EQ(Sorted("-spot_price"), "HARL");  // ... in either direction
  EXPECT_EQ(Sorted("driver"), "LAHR");       // version order; R's driver is unknown
  EXPECT_EQ(Sorted("-driver"), "HALR");
  EXPECT_EQ(Sorted("provider,-price"), "AHRL");
  EXPECT_EQ(Sorted("verified"), "AHLR");  // verified, unverified, deverified; ties by id
  EXPECT_EQ(Sorted("gpu"), "ALHR");
  EXPECT_EQ(Sorted("-gpus,price"), "ALHR");
  EXPECT_EQ(Sorted("source,price"), "RHLA");
}

TEST(SortKeysTest, TiesBreakByIdAndTheOrderIsStrict) {
  std::vector<Offer> offers = Fleet();
  for (Offer& o : offers) o.price_per_gpu_hour = 1;
  offers[0].id = "z";
  offers[3].id = "b";
  EXPECT_EQ(Sorted("price", offers), "HLbz");
  EXPECT_EQ(Sorted("-price", offers), "HLbz");
  auto keys = ParseSortKeys("price,-perf");
  ASSERT_TRUE(keys.ok());
  for (const Offer& a : offers) {
    EXPECT_FALSE(OfferLess(*keys, a, a)) << a.id;
    for (const Offer& b : offers) {
      if (a.id == b.id) continue;
      EXPECT_NE(OfferLess(*keys, a, b), OfferLess(*keys, b, a));
    }
  }
}

TEST(OfferTest, HealthScoreFollowsTheSeedFormula) {
  EXPECT_DOUBLE_EQ(HealthScore(0, 0, 0), 100);
  EXPECT_DOUBLE_EQ(HealthScore(100, 0, 0), 90);   // 0.1 per ms
  EXPECT_DOUBLE_EQ(HealthScore(0, 0.02, 0), 90);  // 5 per failure percent
  EXPECT_DOUBLE_EQ(HealthScore(0, 0, 0.1), 80);   // 2 per premium percent
  EXPECT_DOUBLE_EQ(HealthScore(50, 0.01, 0.05), 80);
  EXPECT_DOUBLE_EQ(HealthScore(10000, 0, 0), 0);   // clamped below
  EXPECT_DOUBLE_EQ(HealthScore(0, 0, -0.5), 100);  // clamped above
  EXPECT_DOUBLE_EQ(HealthScore(NAN, 0, 0), 0);     // a broken measurement ranks last
}

TEST(OfferTest, NamesAndJsonCarryEveryField) {
  EXPECT_EQ(Name(OfferSource::kAgent), "agent");
  EXPECT_EQ(Name(OfferSource::kCatalog), "catalog");
  EXPECT_EQ(Name(VerifiedState::kVerified), "verified");
  EXPECT_EQ(Name(VerifiedState::kUnverified), "unverified");
  EXPECT_EQ(Name(VerifiedState::kDeverified), "deverified");
  const Offer o = Fleet()[0];
  const Json j = ToJson(o);
  EXPECT_EQ(j.size(), 37u);
  EXPECT_EQ(j["sandbox"], "");  // a fleet offer made by hand: no agent said how it boxes jobs
  EXPECT_EQ(j["id"], "A");
  EXPECT_EQ(j["python_version"], "3.10.12");
  EXPECT_EQ(j["price_per_cpu_hour"], 0.0);
  EXPECT_TRUE(j["interruptions_per_hour"].is_null());  // no history
  EXPECT_EQ(j["gpu_label"], "a100-40gb");
  EXPECT_EQ(j["gpus_available"], 8);
  EXPECT_EQ(j["toolkits"], Json({"11.8", "12.1"}));
  EXPECT_EQ(j["torch_builds"], Json({"2.1.0+cu121"}));
  EXPECT_EQ(j["interruptible_price_per_gpu_hour"], 1.2);
  EXPECT_EQ(j["latency_ms"], 0);
  EXPECT_EQ(j["failure_rate"], 0);
  EXPECT_EQ(j["verified"], "verified");
  EXPECT_EQ(j["source"], "catalog");
  EXPECT_EQ(j["spec_perf"], o.spec_perf);
  EXPECT_TRUE(j["measured_perf"].is_null());  // nothing measured
  EXPECT_EQ(j["perf_flag"], "");
  Offer measured = o;
  measured.measured_perf = 0.31;
  measured.perf_flag = "measures 31% of the a100-40gb spec";
  EXPECT_EQ(ToJson(measured)["measured_perf"], 0.31);
  EXPECT_EQ(ToJson(measured)["perf_flag"], "measures 31% of the a100-40gb spec");
}

}  // namespace
}  // namespace sluice::market
