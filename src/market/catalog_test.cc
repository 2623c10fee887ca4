#include "market/catalog.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "market/gpu_labels.h"
#include "market/perf.h"

namespace sluice::market {
namespace {

using testing::HasSubstr;

std::string CatalogDir() {
  const char* env = std::getenv("SLUICE_SOURCE_DIR");
  return std::string(env != nullptr ? env : SLUICE_SOURCE_DIR_DEFAULT) + "/data/catalog";
}

std::vector<std::string> CatalogFiles() {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(CatalogDir())) {
    if (entry.path().extension() == ".csv") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The data lines of a catalog file, without the header or blank lines. No catalog quotes a
// newline (checked below), so a line is a row.
std::vector<std::string> DataLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  std::string line;
  bool header = true;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (header) {
      header = false;
    } else if (!line.empty()) {
      lines.push_back(line);
    }
  }
  return lines;
}

// Comma split that ignores quoting: right for every column up to `region`, the first one a
// catalog (Vast) quotes.
std::vector<std::string> NaiveFields(const std::string& line) {
  std::vector<std::string> out(1);
  for (char c : line) {
    if (c == ',') {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

constexpr int kName = 2, kCount = 3, kMemory = 4, kPrice = 7, kSpot = 8;

std::vector<Offer> AllOffers() {
  std::vector<Offer> all;
  for (const std::string& path : CatalogFiles()) {
    auto import = ImportCatalogFile(path);
    EXPECT_TRUE(import.ok()) << import.status().ToString();
    if (import.ok()) all.insert(all.end(), import->offers.begin(), import->offers.end());
  }
  return all;
}

TEST(CatalogFiles, EveryFileImportsWithOneOfferPerPricedRow) {
  const std::vector<std::string> files = CatalogFiles();
  ASSERT_EQ(files.size(), 10u);  // aws cudo fluidstack gcp hyperbolic lambda nebius ...
  int total = 0;
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    const std::vector<std::string> lines = DataLines(path);
    int unpriced = 0;
    for (const std::string& line : lines) {
      // Quoted newlines would make this count wrong; a quote is only ever balanced on a line.
      EXPECT_EQ(std::count(line.begin(), line.end(), '"') % 2, 0) << line;
      if (NaiveFields(line)[kPrice].empty()) ++unpriced;
    }
    auto import = ImportCatalogFile(path);
    ASSERT_TRUE(import.ok()) << import.status().ToString();
    EXPECT_EQ(import->offers.size(), lines.size() - unpriced);
    EXPECT_EQ(import->provider, std::filesystem::path(path).stem().string());
    total += static_cast<int>(import->offers.size());
  }
  // 1,736 rows in the shared catalogs, less the 9 AWS p5e.48xlarge rows with no on-demand price.
  EXPECT_EQ(total, 1736 - 9);
}

TEST(CatalogFiles, RowsWithoutOnDemandPriceAreSkippedWithAWarning) {
  auto import = ImportCatalogFile(CatalogDir() + "/aws.csv");
  ASSERT_TRUE(import.ok()) << import.status().ToString();
  int skipped = 0;
  for (const std::string& w : import->warnings) {
    if (w.find("no on-demand price") != std::string::npos) {
      ++skipped;
      EXPECT_THAT(w, HasSubstr("p5e.48xlarge"));
      EXPECT_THAT(w, testing::StartsWith("aws.csv:"));
    }
  }
  EXPECT_EQ(skipped, 9);
  for (const Offer& o : import->offers) EXPECT_NE(o.node, "p5e.48xlarge");
}

TEST(CatalogFiles, EveryOfferIsLabelledPricedAndUnique) {
  const std::vector<Offer> all = AllOffers();
  ASSERT_FALSE(all.empty());
  std::set<std::string> ids;
  for (const Offer& o : all) {
    SCOPED_TRACE(o.id);
    EXPECT_FALSE(o.gpu_label.empty());
    EXPECT_GT(o.price_per_gpu_hour, 0);
    EXPECT_GE(o.interruptible_price_per_gpu_hour, 0);
    EXPECT_GT(o.gpus, 0);
    EXPECT_EQ(o.gpus_available, o.gpus);
    EXPECT_GT(o.vram_gb, 0);
    EXPECT_EQ(o.source, OfferSource::kCatalog);
    EXPECT_EQ(o.verified, VerifiedState::kUnverified);
    EXPECT_GE(o.health_score, 0);  // 0 from a 50 % premium on: the formula's floor
    EXPECT_LE(o.health_score, 100);
    EXPECT_TRUE(ids.insert(o.id).second) << "duplicate id";
  }
}

TEST(CatalogFiles, UnmappedNamesAreCountedNotDropped) {
  int unmapped = 0;
  int unknown_labels = 0;
  const std::vector<std::string> known = KnownGpuLabels();
  for (const std::string& path : CatalogFiles()) {
    auto import = ImportCatalogFile(path);
    ASSERT_TRUE(import.ok());
    unmapped += import->unmapped_gpu_names;
    for (const Offer& o : import->offers) {
      if (!std::binary_search(known.begin(), known.end(), o.gpu_label)) ++unknown_labels;
    }
  }
  EXPECT_EQ(unmapped, unknown_labels);
  EXPECT_GT(unmapped, 0);  // B300, RTX 5090, A800... are not in the specs yet
  auto aws = ImportCatalogFile(CatalogDir() + "/aws.csv");
  ASSERT_TRUE(aws.ok());
  EXPECT_THAT(aws->warnings, testing::Contains(HasSubstr("\"B300\" maps to no known label")));
  // With the nearest known labels, so an operator can tell a new model from a misspelling.
  for (const std::string& w : aws->warnings) {
    if (w.find("maps to no known label") == std::string::npos) continue;
    EXPECT_TRUE(w.find("; closest known: ") != std::string::npos ||
                w.find("; no known label is close") != std::string::npos)
        << w;
  }
  EXPECT_THAT(NearestGpuLabels("rtx4095-24gb"), testing::ElementsAre("rtx4090-24gb"));
  EXPECT_TRUE(NearestGpuLabels("zzzzzzzzzzzz-8gb").empty());
}

TEST(CatalogFiles, CheapestEightH100MatchesTheRawCsv) {
  // Independent scan: any H100 name (H100, H100-SXM, H100-MEGA, H100-NVLINK) with 8 GPUs of
  // 80 GB class memory (not the 94 GB NVL card), cheapest instance price / 8.
  double expected = std::numeric_limits<double>::infinity();
  std::string expected_provider;
  for (const std::string& path : CatalogFiles()) {
    for (const std::string& line : DataLines(path)) {
      const std::vector<std::string> f = NaiveFields(line);
      if (!f[kName].starts_with("H100") || f[kCount] != "8" || f[kPrice].empty()) continue;
      if (!f[kMemory].empty() && std::stod(f[kMemory]) > 90) continue;
      const double per_gpu = std::stod(f[kPrice]) / 8;
      if (per_gpu < expected) {
        expected = per_gpu;
        expected_provider = f[0];
      }
    }
  }
  ASSERT_TRUE(std::isfinite(expected));

  const std::vector<Offer> all = AllOffers();
  const Offer* best = nullptr;
  for (const Offer& o : all) {
    if (o.gpu_label != "h100-80gb" || o.gpus != 8) continue;
    if (best == nullptr || o.price_per_gpu_hour < best->price_per_gpu_hour) best = &o;
  }
  ASSERT_NE(best, nullptr);
  EXPECT_DOUBLE_EQ(best->price_per_gpu_hour, expected);
  EXPECT_EQ(best->provider, expected_provider);
}

TEST(CatalogFiles, A100EightyInterruptibleUnderOneFiftyMatchesTheRawCsv) {
  int expected_count = 0;
  double expected_min = std::numeric_limits<double>::infinity();
  for (const std::string& path : CatalogFiles()) {
    for (const std::string& line : DataLines(path)) {
      const std::vector<std::string> f = NaiveFields(line);
      const bool a100_80 = f[kName] == "A100-80GB" || (f[kName] == "A100" && f[kMemory] == "80");
      if (!a100_80 || f[kPrice].empty() || f[kSpot].empty()) continue;
      const double spot = std::stod(f[kSpot]) / std::stoi(f[kCount]);
      if (spot > 0 && spot < 1.5) {
        ++expected_count;
        expected_min = std::min(expected_min, spot);
      }
    }
  }
  ASSERT_GT(expected_count, 0);

  int count = 0;
  double min = std::numeric_limits<double>::infinity();
  for (const Offer& o : AllOffers()) {
    const double spot = o.interruptible_price_per_gpu_hour;
    if (o.gpu_label == "a100-80gb" && spot > 0 && spot < 1.5) {
      ++count;
      min = std::min(min, spot);
    }
  }
  EXPECT_EQ(count, expected_count);
  EXPECT_DOUBLE_EQ(min, expected_min);
}

TEST(CatalogFiles, VastQuotedRegionsKeepTheirCommas) {
  auto vast = ImportCatalogFile(CatalogDir() + "/vast.csv");
  ASSERT_TRUE(vast.ok()) << vast.status().ToString();
  const Offer& first = vast->offers.front();  // line 2 of the file
  EXPECT_EQ(first.region, "Denmark, DK, EU");
  EXPECT_EQ(first.node, "1x-RTX_5090-32-65536");
  EXPECT_DOUBLE_EQ(first.price_per_gpu_hour, 0.44);
  EXPECT_EQ(first.interruptible_price_per_gpu_hour, 0);  // Vast lists spot 0.00: not offered
  EXPECT_EQ(first.zone, "");
  EXPECT_EQ(vast->offers[1].region, ", CA, NA");  // the source's leading comma is data
  EXPECT_EQ(vast->offers[1].id, "vast/1x-RTX_5090-32-65536/, CA, NA/");
}

TEST(CatalogFiles, FieldsOfKnownRows) {
  auto aws = ImportCatalogFile(CatalogDir() + "/aws.csv");
  ASSERT_TRUE(aws.ok());
  // aws,g5.48xlarge,A10G,8,22.4,192,768,22.79672,3.846100,ap-southeast-3,apse3-az3
  const Offer& g5 = aws->offers.front();
  EXPECT_EQ(g5.id, "aws/g5.48xlarge/ap-southeast-3/apse3-az3");
  EXPECT_EQ(g5.gpu_label, "a10g-24gb");
  EXPECT_EQ(g5.gpu_model, "a10g");
  EXPECT_EQ(g5.gpus, 8);
  EXPECT_DOUBLE_EQ(g5.vram_gb, 22.4);
  EXPECT_EQ(g5.cpus, 192);
  EXPECT_DOUBLE_EQ(g5.memory_gb, 768);
  EXPECT_DOUBLE_EQ(g5.price_per_gpu_hour, 22.79672 / 8);
  EXPECT_DOUBLE_EQ(g5.interruptible_price_per_gpu_hour, 3.8461 / 8);
  EXPECT_EQ(g5.form_factor, "pcie");
  EXPECT_EQ(g5.interconnect, "pcie");
  EXPECT_EQ(g5.perf_score, 0);  // no citable TFLOPS for the A10G

  for (const Offer& o : aws->offers) {
    if (o.node == "gr6.4xlarge") {
      EXPECT_EQ(o.form_factor, "pcie");
    }
    if (o.node == "p5.48xlarge") {
      EXPECT_EQ(o.gpu_label, "h100-80gb");
      EXPECT_EQ(o.form_factor, "sxm");
      EXPECT_EQ(o.interconnect, "nvlink");
      EXPECT_DOUBLE_EQ(o.perf_score, PerfScore("h100-80gb", "sxm"));
    }
  }

  auto gcp = ImportCatalogFile(CatalogDir() + "/gcp.csv");
  ASSERT_TRUE(gcp.ok());
  // gcp,,L4,2,24,,,1.29694,0.5838,asia-east1,asia-east1-c: GPU attachment, no machine type.
  const Offer& l4 = gcp->offers.front();
  EXPECT_EQ(l4.node, "gcp-l4-x2");
  EXPECT_EQ(l4.id, "gcp/gcp-l4-x2/asia-east1/asia-east1-c");
  EXPECT_EQ(l4.gpu_label, "l4-24gb");
  EXPECT_EQ(l4.cpus, 0);

  auto nebius = ImportCatalogFile(CatalogDir() + "/nebius.csv");
  ASSERT_TRUE(nebius.ok());
  // nebius,gpu-h100-sxm_1gpu-16vcpu-200gb,H100,1,,16,200,2.95,1.25,eu-north1,: no memory column.
  const Offer& h100 = nebius->offers.front();
  EXPECT_EQ(h100.gpu_label, "h100-80gb");
  EXPECT_DOUBLE_EQ(h100.vram_gb, 80);  // from the label when the catalog has no figure
  EXPECT_EQ(h100.form_factor, "sxm");
  EXPECT_EQ(h100.interconnect, "");  // one GPU
  EXPECT_DOUBLE_EQ(h100.interruptible_price_per_gpu_hour, 1.25);
}

TEST(CatalogFiles, RunPodSpotEqualsPriceAsTheSourceSays) {
  auto runpod = ImportCatalogFile(CatalogDir() + "/runpod.csv");
  ASSERT_TRUE(runpod.ok());
  const Offer& o = runpod->offers.front();
  EXPECT_EQ(o.gpu_label, "a100-80gb");
  EXPECT_DOUBLE_EQ(o.price_per_gpu_hour, 1.39);
  EXPECT_DOUBLE_EQ(o.interruptible_price_per_gpu_hour, 1.39);
}

TEST(CatalogParse, HealthIsHundredForTheCheapestAndLowerForAPremium) {
  const std::string csv =
      "cloud,instance_type,accelerator_name,accelerator_count,gpu_memory_gib,vcpus,memory_gib,"
      "price,spot_price,region,zone\n"
      "x,a,H100,1,80,8,64,2.00,,r1,\n"
      "x,b,H100,2,80,8,64,5.00,,r1,\n";  // 2.50 per GPU-h: 25 % premium
  auto offers = ParseCatalogCsv(csv, "x.csv");
  ASSERT_TRUE(offers.ok()) << offers.status().ToString();
  ASSERT_EQ(offers->size(), 2u);
  EXPECT_DOUBLE_EQ((*offers)[0].health_score, 100);
  EXPECT_DOUBLE_EQ((*offers)[1].health_score, HealthScore(0, 0, 0.25));
  EXPECT_LT((*offers)[1].health_score, 100);
}

TEST(CatalogParse, DuplicateKeysGetTheirLineNumbers) {
  const std::string csv =
      "cloud,instance_type,accelerator_name,accelerator_count,gpu_memory_gib,vcpus,memory_gib,"
      "price,spot_price,region,zone\n"
      "x,a,L4,1,24,8,64,1.00,,r1,z\n"
      "x,a,L4,1,24,8,64,1.10,,r1,z\n"
      "x,a,L4,1,24,8,64,1.10,,r2,z\n";
  auto offers = ParseCatalogCsv(csv, "x.csv");
  ASSERT_TRUE(offers.ok());
  ASSERT_EQ(offers->size(), 3u);
  EXPECT_EQ((*offers)[0].id, "x/a/r1/z#2");
  EXPECT_EQ((*offers)[1].id, "x/a/r1/z#3");
  EXPECT_EQ((*offers)[2].id, "x/a/r2/z");
}

// A catalog of `n` good rows with `bad_row` (a whole line) as data line `bad_at` (1-based).
std::string CatalogWith(int n, int bad_at, const std::string& bad_row) {
  std::string csv =
      "cloud,instance_type,accelerator_name,accelerator_count,gpu_memory_gib,vcpus,memory_gib,"
      "price,spot_price,region,zone\n";
  for (int i = 1; i <= n; ++i) {
    csv += i == bad_at
               ? bad_row
               : "aws,p5.48xlarge,H100,8,80,192,2048,98.32,,us-east-1,z" + std::to_string(i);
    csv += "\n";
  }
  return csv;
}

TEST(CatalogParse, NonNumericPriceNamesFileLineAndColumn) {
  // Data line 16 is file line 17.
  auto r = ParseCatalogCsv(
      CatalogWith(20, 16, "aws,p5.48xlarge,H100,8,80,192,2048,abc,,us-east-1,z"), "aws.csv");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "aws.csv:17: price: expected a number, got \"abc\"");
}

TEST(CatalogParse, MalformedRowsFailTheWholeImport) {
  struct Case {
    std::string row;
    std::string message;
  };
  const Case cases[] = {
      {"aws,p5.48xlarge,H100,8,80,192,2048,98.32,,us-east-1",
       "aws.csv:4: expected 11 columns, got 10"},
      {"aws,p5.48xlarge,H100,8,80,192,2048,98.32,,us-east-1,z,extra",
       "aws.csv:4: expected 11 columns, got 12"},
      {"aws,p5.48xlarge,H100,8,80,192,2048,98.32,-1,us-east-1,z",
       "aws.csv:4: spot_price: expected a number, got \"-1\""},
      {"aws,p5.48xlarge,H100,8,80,192,2048,nan,,us-east-1,z",
       "aws.csv:4: price: expected a number, got \"nan\""},
      {"aws,p5.48xlarge,H100,eight,80,192,2048,98.32,,us-east-1,z",
       "aws.csv:4: accelerator_count: expected a number, got \"eight\""},
      {"aws,p5.48xlarge,H100,0,80,192,2048,98.32,,us-east-1,z",
       "aws.csv:4: accelerator_count: expected a whole number of GPUs from 1 to 1024, got \"0\""},
      {"aws,p5.48xlarge,H100,2.5,80,192,2048,98.32,,us-east-1,z",
       "aws.csv:4: accelerator_count: expected a whole number of GPUs from 1 to 1024, got \"2.5\""},
      {"aws,p5.48xlarge,H100,8,80GB,192,2048,98.32,,us-east-1,z",
       "aws.csv:4: gpu_memory_gib: expected a number, got \"80GB\""},
      {"aws,p5.48xlarge,H100,8,1e300,192,2048,98.32,,us-east-1,z",
       "aws.csv:4: gpu_memory_gib: implausibly large, got \"1e300\""},
      {"aws,p5.48xlarge,H100,8,80,1e12,2048,98.32,,us-east-1,z",
       "aws.csv:4: vcpus: implausibly large, got \"1e12\""},
      {"aws,p5.48xlarge,,8,80,192,2048,98.32,,us-east-1,z",
       "aws.csv:4: accelerator_name: empty (GPU rows only)"},
      {"aws,p5.48xlarge,H100,8,80,192,2048,98.32,,\"us-east-1,z",
       "aws.csv:4: unterminated quoted field"},
      {"aws,p5.48xlarge,H100,8,80,192,2048,98.32,,\"us\"east,z",
       "aws.csv:4: text after a closing quote"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.row);
    auto r = ParseCatalog(CatalogWith(5, 3, c.row), "aws.csv");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message(), c.message);
  }
}

TEST(CatalogParse, HeaderMustNameEveryColumn) {
  auto r = ParseCatalogCsv("cloud,instance_type,accelerator_name\naws,x,H100\n", "aws.csv");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "aws.csv:1: missing column \"accelerator_count\"");
  EXPECT_FALSE(ParseCatalogCsv("", "e.csv").ok());
}

TEST(CatalogParse, ColumnsMayComeInAnyOrderAndCrlf) {
  const std::string csv =
      "zone,region,spot_price,price,memory_gib,vcpus,gpu_memory_gib,accelerator_count,"
      "accelerator_name,instance_type,cloud\r\n"
      "z1,r1,0.5,1.5,64,8,24,1,L4,g6.xlarge,aws\r\n";
  auto offers = ParseCatalogCsv(csv, "aws.csv");
  ASSERT_TRUE(offers.ok()) << offers.status().ToString();
  ASSERT_EQ(offers->size(), 1u);
  EXPECT_EQ((*offers)[0].id, "aws/g6.xlarge/r1/z1");
  EXPECT_DOUBLE_EQ((*offers)[0].interruptible_price_per_gpu_hour, 0.5);
}

TEST(CatalogParse, ByteOrderMarkAndSpaceOnlyLinesAreNotData) {
  const std::string csv =
      "\xEF\xBB\xBF"
      "cloud,instance_type,accelerator_name,accelerator_count,gpu_memory_gib,vcpus,memory_gib,"
      "price,spot_price,region,zone\n"
      "x,a,T4,1,16,4,16,0.35,0.1,r1,\n"
      "   \n";
  auto import = ParseCatalog(csv, "x.csv");
  ASSERT_TRUE(import.ok()) << import.status().ToString();
  ASSERT_EQ(import->offers.size(), 1u);
  EXPECT_EQ(import->provider, "x");
  EXPECT_EQ(import->offers[0].gpu_label, "t4-16gb");
  EXPECT_EQ(import->unmapped_gpu_names, 0);
  EXPECT_TRUE(import->warnings.empty());
}

TEST(CatalogImportFile, MissingFileAndMixedProviders) {
  auto missing = ImportCatalogFile(CatalogDir() + "/no-such-cloud.csv");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);

  const std::string dir = ::testing::TempDir();
  const std::string mixed = dir + "/mixed.csv";
  {
    std::ofstream out(mixed);
    out << "cloud,instance_type,accelerator_name,accelerator_count,gpu_memory_gib,vcpus,"
           "memory_gib,price,spot_price,region,zone\n"
           "aws,a,L4,1,24,8,64,1.0,,r,\n"
           "gcp,,L4,1,24,,,0.7,,r,\n";
  }
  auto r = ImportCatalogFile(mixed);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("mixed.csv: rows of two providers"));

  const std::string unpriced = dir + "/unpriced.csv";
  {
    std::ofstream out(unpriced);
    out << "cloud,instance_type,accelerator_name,accelerator_count,gpu_memory_gib,vcpus,"
           "memory_gib,price,spot_price,region,zone\n"
           "aws,a,L4,1,24,8,64,,0.3,r,\n";
  }
  auto empty = ImportCatalogFile(unpriced);
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), HasSubstr("no priced rows"));
}

TEST(CsvReader, QuotesNewlinesAndLineNumbers) {
  auto r = ReadCsv("a,b\n\n\"x,1\",\"say \"\"hi\"\"\"\n\"multi\nline\",z\nlast,\"\"", "t.csv");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ((*r)[1].line, 3);
  EXPECT_EQ((*r)[1].fields, (std::vector<std::string>{"x,1", "say \"hi\""}));
  EXPECT_EQ((*r)[2].line, 4);
  EXPECT_EQ((*r)[2].fields, (std::vector<std::string>{"multi\nline", "z"}));
  EXPECT_EQ((*r)[3].line, 6);
  EXPECT_EQ((*r)[3].fields, (std::vector<std::string>{"last", ""}));
  auto bad = ReadCsv("a,b\nx,\xff\n", "t.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "t.csv:2: invalid UTF-8");
}

// Property: any mutation of a real catalog (bytes flipped, inserted, removed, quotes and commas
// sprinkled) either imports or fails with an error that names the file; it never crashes and
// never yields an offer without a label or a positive price.
TEST(CatalogParse, MutatedCatalogsImportOrFailCleanly) {
  std::ifstream in(CatalogDir() + "/vast.csv");
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string original = buf.str();
  ASSERT_FALSE(original.empty());
  std::mt19937 rng(20261129);
  const char kSpecial[] = {',', '"', '\n', '\r', '-', '.', 'e', '0', '\0', '\xff'};
  int ok = 0;
  for (int iter = 0; iter < 500; ++iter) {
    std::string text = original;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % text.size();
      const char c = kSpecial[rng() % sizeof(kSpecial)];
      switch (rng() % 3) {
        case 0:
          text[pos] = c;
          break;
        case 1:
          text.insert(text.begin() + static_cast<std::ptrdiff_t>(pos), c);
          break;
        default:
          text.erase(pos, 1 + rng() % 20);
          break;
      }
      if (text.empty()) text = "x";
    }
    auto r = ParseCatalog(text, "vast.csv");
    if (!r.ok()) {
      EXPECT_THAT(r.status().message(), testing::StartsWith("vast.csv")) << text;
      continue;
    }
    ++ok;
    for (const Offer& o : r->offers) {
      EXPECT_FALSE(o.gpu_label.empty());
      EXPECT_GT(o.price_per_gpu_hour, 0);
      EXPECT_TRUE(std::isfinite(o.health_score));
    }
  }
  EXPECT_GT(ok, 0);  // some mutations (inside a region name, say) stay valid
}

struct AliasCase {
  const char* name;
  double memory_gib;
  const char* label;
  const char* form_factor;
  bool known;
};

// Every spelling in the shared catalogs that needs more than lowercasing, checked by hand.
const AliasCase kAliases[] = {
    {"A100", 40, "a100-40gb", "", true},
    {"A100", 80, "a100-80gb", "", true},
    {"A100", 0, "a100-40gb", "", true},  // SkyPilot: plain A100 is the 40 GB part
    {"A100-80GB", 0, "a100-80gb", "", true},
    {"A10G", 22.4, "a10g-24gb", "", true},
    {"L4", 22.4, "l4-24gb", "", true},
    {"H100", 79.6, "h100-80gb", "", true},
    {"H100", 93.6, "h100nvl-94gb", "nvl", true},
    {"H100", 0, "h100-80gb", "", true},
    {"H100-SXM", 80, "h100-80gb", "sxm", true},
    {"H100-MEGA", 80, "h100-80gb", "sxm", true},
    {"H100-NVLINK", 80, "h100-80gb", "sxm", true},
    {"H200", 140.4, "h200-141gb", "", true},
    {"B200", 179.1, "b200-180gb", "", true},
    {"B200", 0, "b200-180gb", "", true},
    {"GH200", 96, "gh200-96gb", "superchip", true},
    {"V100", 0, "v100-16gb", "", true},
    {"V100-32GB", 0, "v100-32gb", "", true},
    {"T4", 16, "t4-16gb", "", true},
    {"L40S", 45, "l40s-48gb", "", true},
    {"A6000", 48, "rtxa6000-48gb", "", true},
    {"RTXA6000", 48, "rtxa6000-48gb", "", true},
    {"RTX6000-Ada", 48, "rtx6000ada-48gb", "", true},
    {"RTX4000-Ada", 20, "rtx4000ada-20gb", "", true},
    {"RTX4060", 16, "rtx4060ti-16gb", "", true},
    {"RTX4090", 24, "rtx4090-24gb", "", true},
    {"B300", 268.6, "b300-288gb", "", false},
    {"RTX5090", 31.8, "rtx5090-32gb", "", true},  // known by its PCI id (gpu_identity.h)
    {"A4000", 0, "rtxa4000-16gb", "", false},
    {"RTX6000", 24, "rtx6000-24gb", "", false},  // Quadro RTX 6000 (Turing), not the Ada card
};

TEST(MapCatalogGpu, CatalogSpellingsMapToRegistryLabels) {
  for (const AliasCase& c : kAliases) {
    SCOPED_TRACE(std::string(c.name) + " " + std::to_string(c.memory_gib));
    const CatalogGpu gpu = MapCatalogGpu(c.name, c.memory_gib);
    EXPECT_EQ(gpu.label, c.label);
    EXPECT_EQ(gpu.form_factor, c.form_factor);
    EXPECT_EQ(gpu.known, c.known);
    EXPECT_TRUE(std::string(c.label).starts_with(gpu.model + "-"));
  }
  EXPECT_DOUBLE_EQ(MapCatalogGpu("H100", 79.6).vram_gb, 79.6);
  EXPECT_DOUBLE_EQ(MapCatalogGpu("H100", 0).vram_gb, 80);
}

TEST(PerfScore, RelativeToTheA100EightyReference) {
  EXPECT_DOUBLE_EQ(PerfScore("a100-80gb"), 1.0);
  EXPECT_DOUBLE_EQ(PerfScore(kPerfReferenceLabel), 1.0);
  EXPECT_DOUBLE_EQ(PerfScore("a100-40gb"), 1.0);  // same 312 TFLOPS
  EXPECT_GT(PerfScore("h100-80gb"), 1.0);
  // h100-80gb covers the SXM5 part (989) and the PCIe card (756): the lower without a hint.
  EXPECT_DOUBLE_EQ(PerfScore("h100-80gb"), 756.0 / 312.0);
  EXPECT_DOUBLE_EQ(PerfScore("h100-80gb", "sxm"), 989.0 / 312.0);
  EXPECT_DOUBLE_EQ(PerfScore("H100-80GB", "pcie"), 756.0 / 312.0);
  EXPECT_DOUBLE_EQ(PerfScore("b200-180gb"), 2250.0 / 312.0);
  // No BF16 on Volta: FP16 tensor figures (PCIe 112 is the lower of the two V100 cards).
  EXPECT_DOUBLE_EQ(PerfScore("v100-16gb"), 112.0 / 312.0);
  EXPECT_DOUBLE_EQ(PerfScore("v100-32gb", "sxm"), 125.0 / 312.0);
  EXPECT_DOUBLE_EQ(PerfScore("gh200-141gb"), 989.0 / 312.0);
}

TEST(PerfScore, UnknownPerfIsZero) {
  EXPECT_EQ(PerfScore("no-such-gpu"), 0);
  EXPECT_EQ(PerfScore(""), 0);
  EXPECT_EQ(PerfScore("rtx4090-24gb"), 0);  // listed, but no citable TFLOPS figure
  EXPECT_EQ(PerfScore("a10g-24gb"), 0);
}

}  // namespace
}  // namespace sluice::market
