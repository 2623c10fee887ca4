// The index's contract is "the same answer as brute force": these property tests generate random
// offers and random query TEXT (parsed by ParseQuery, so every field type, operator, list and
// glob the language has is exercised), and compare Search with Matches + OfferLess.
#include "market/offer_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "market/catalog.h"
#include "market/gpu_labels.h"
#include "market/query.h"

namespace sluice::market {
namespace {

std::vector<Offer> BruteForce(const std::vector<Offer>& offers, const Query& q,
                              const std::vector<SortKey>& keys, size_t limit) {
  std::vector<Offer> out;
  for (const Offer& o : offers) {
    if (Matches(q, o)) out.push_back(o);
  }
  std::sort(out.begin(), out.end(),
            [&](const Offer& a, const Offer& b) { return OfferLess(keys, a, b); });
  if (out.size() > limit) out.resize(limit);
  return out;
}

std::vector<std::string> Ids(const std::vector<Offer>& offers) {
  std::vector<std::string> ids;
  for (const Offer& o : offers) ids.push_back(o.id);
  return ids;
}

std::vector<std::string> Ids(const std::vector<OfferRef>& offers) {
  std::vector<std::string> ids;
  for (const OfferRef& o : offers) ids.push_back(o->id);
  return ids;
}

template <typename T>
const T& Pick(std::mt19937& rng, const std::vector<T>& v) {
  return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
}

bool Chance(std::mt19937& rng, double p) { return std::bernoulli_distribution(p)(rng); }

// Small value pools so that ties (equal prices, equal regions) are common: ties are where an
// index's ordering most easily departs from the reference order.
const std::vector<std::string> kProviders = {"aws", "gcp", "lambda", "vast", "RunPod", "node-7"};
const std::vector<std::string> kRegions = {"us-east-1", "us-west-2",  "eu-west-1",
                                           "EU-North",  "asia-east1", ""};
const std::vector<std::string> kZones = {"a", "b", "c", ""};
const std::vector<std::string> kForms = {"sxm", "pcie", "nvl", ""};
const std::vector<std::string> kInterconnects = {"nvlink", "pcie", ""};
const std::vector<std::string> kCcs = {"7.0", "8.0", "8.6", "8.9", "9.0", ""};
const std::vector<std::string> kDrivers = {"470.82.01", "535.104.05", "535.86.05", "550.54.15", ""};
const std::vector<std::string> kCudas = {"11.4", "12.1", "12.2", "12.4", ""};
const std::vector<std::string> kToolkitPool = {"11.8", "12.1", "12.4"};
const std::vector<std::string> kTorchPool = {"2.0.1+cu118", "2.1.0+cu121", "2.3.0+cu124"};
const std::vector<double> kPrices = {0.5, 0.99, 1.2, 1.5, 1.5, 2, 2.49, 3, 4.1};

Offer RandomOffer(std::mt19937& rng, int n, const std::vector<std::string>& labels) {
  Offer o;
  o.provider = Pick(rng, kProviders);
  o.node = "n" + std::to_string(n % 50);
  o.gpu_label = Chance(rng, 0.03) ? "" : Pick(rng, labels);
  o.gpu_model = o.gpu_label.substr(0, o.gpu_label.find('-'));
  o.id = o.provider + "/" + o.node + "/" + o.gpu_label + "/" + std::to_string(n);
  o.region = Pick(rng, kRegions);
  o.zone = Pick(rng, kZones);
  o.gpus = Pick(rng, std::vector<int>{1, 2, 4, 8});
  o.gpus_available = std::uniform_int_distribution<int>(0, o.gpus)(rng);
  o.vram_gb = Pick(rng, std::vector<double>{16, 24, 40, 48, 80, 94});
  o.form_factor = Pick(rng, kForms);
  o.interconnect = Pick(rng, kInterconnects);
  o.compute_capability = Pick(rng, kCcs);
  o.driver_version = Pick(rng, kDrivers);
  o.cuda_version = Pick(rng, kCudas);
  for (const std::string& t : kToolkitPool) {
    if (Chance(rng, 0.4)) o.toolkits.push_back(t);
  }
  for (const std::string& t : kTorchPool) {
    if (Chance(rng, 0.3)) o.torch_builds.push_back(t);
  }
  o.cpus = Pick(rng, std::vector<int>{8, 16, 32, 96});
  o.memory_gb = Pick(rng, std::vector<double>{64, 128, 512});
  o.disk_gb = Pick(rng, std::vector<double>{100, 1000});
  o.price_per_gpu_hour = Pick(rng, kPrices);
  o.interruptible_price_per_gpu_hour = Chance(rng, 0.5) ? 0 : Pick(rng, kPrices) / 2;
  o.reliability = Pick(rng, std::vector<double>{0.9, 0.99, 0.995, 1.0});
  o.latency_ms = Pick(rng, std::vector<double>{0, 5, 40});
  o.failure_rate = Pick(rng, std::vector<double>{0, 0.01, 0.1});
  o.health_score = Pick(rng, std::vector<double>{50, 90, 99.5, 100});
  // Perf is a property of the GPU model, so one value per label (as in the catalogs): a sort key
  // that is constant within a label bucket takes a path of its own in the index.
  o.perf_score = 0.3 + static_cast<double>(std::hash<std::string>{}(o.gpu_label) % 4);
  o.verified = static_cast<VerifiedState>(std::uniform_int_distribution<int>(0, 2)(rng));
  o.source = Chance(rng, 0.5) ? OfferSource::kAgent : OfferSource::kCatalog;
  return o;
}

// One random term as text; may be one the parser rejects (those queries are skipped).
std::string RandomTerm(std::mt19937& rng, const std::vector<std::string>& labels,
                       const std::vector<Offer>& offers) {
  const std::vector<std::string> all_ops = {"=", "!=", "<", "<=", ">", ">=", "=="};
  const std::vector<std::string> eq_ops = {"=", "!=", "="};
  auto list_or = [&](const std::string& field, const std::vector<std::string>& pool,
                     const std::vector<std::string>& ops) {
    if (Chance(rng, 0.25)) {
      std::string s = field + (Chance(rng, 0.5) ? " in [" : " notin [");
      const int n = std::uniform_int_distribution<int>(1, 3)(rng);
      for (int i = 0; i < n; ++i) s += (i ? "," : "") + Pick(rng, pool);
      return s + "]";
    }
    return field + Pick(rng, ops) + Pick(rng, pool);
  };
  auto quoted = [](std::vector<std::string> pool) {
    for (std::string& s : pool) s = s.empty() ? "\"\"" : s;
    return pool;
  };
  switch (std::uniform_int_distribution<int>(0, 16)(rng)) {
    case 0:
    case 1: {  // gpu: labels, short forms, globs, upper case
      std::vector<std::string> pool = {Pick(rng, labels), Pick(rng, labels), "a100", "h100", "L4",
                                       "a100*",           "h*-80gb",         "*"};
      return list_or("gpu", pool, eq_ops);
    }
    case 2:
      return list_or(Pick(rng, std::vector<std::string>{"provider", "model"}),
                     {"aws", "gcp", "runpod", "a*", "h100", "a100", "*", "vast"}, eq_ops);
    case 3:
      return list_or("region", {"us-*", "eu-*", "us-east-1", "eu-north", "?s-west-2", "ASIA*"},
                     eq_ops);
    case 4:
      return list_or(Pick(rng, std::vector<std::string>{"zone", "form", "interconnect"}),
                     {"a", "b", "sxm", "pcie", "nvlink", "nv*"}, eq_ops);
    case 5:
      return list_or("node", {"n1", "n2*", "n4?", "N7"}, eq_ops);
    case 6: {
      std::vector<std::string> ids = {Pick(rng, offers).id, Pick(rng, offers).id, "aws/*"};
      return list_or("id", quoted(ids), eq_ops);
    }
    case 7:
      return list_or(Pick(rng, std::vector<std::string>{"gpus", "cpus"}),
                     {"0", "1", "2", "4", "8", "16", "32"}, all_ops);
    case 8:
      return list_or(Pick(rng, std::vector<std::string>{"vram", "memory", "disk"}),
                     {"40", "40GB", "80G", "24576MB", "0.5TB", "100", "128GiB"}, all_ops);
    case 9:
      return list_or(Pick(rng, std::vector<std::string>{"price", "spot_price"}),
                     {"1.5", "$2", "0.99", "0.75", "3", "0.6"}, all_ops);
    case 10:
      return list_or(Pick(rng, std::vector<std::string>{"reliability", "health", "perf"}),
                     {"0.99", "99%", "1", "90", "2.5", "0.995"}, all_ops);
    case 11:
      return list_or("cc", {"8.0", "8.6", "9", "7.0"}, all_ops);
    case 12:
      return list_or("driver", {"535", "535.86.05", "535.104.05", "550", "5*"}, all_ops);
    case 13:
      return list_or("cuda", {"12", "12.1", "12.4", "11.4", "12.*"}, all_ops);
    case 14:
      return list_or(Pick(rng, std::vector<std::string>{"toolkit", "torch"}),
                     {"12.1", "11.8", "2.1.0", "2.3.0+cu124", "2.*", "12.4"}, all_ops);
    case 15:
      return list_or("verified", {"verified", "unverified", "deverified"}, eq_ops);
    default:
      return list_or("source", {"agent", "catalog"}, eq_ops);
  }
}

std::string RandomSortText(std::mt19937& rng) {
  const std::vector<std::string> fields = {
      "price",  "price", "spot_price", "perf",     "reliability", "gpus", "vram",
      "region", "cuda",  "driver",     "provider", "health",      "id",   "verified"};
  const int n = std::uniform_int_distribution<int>(0, 3)(rng);
  std::string s;
  for (int i = 0; i < n; ++i) {
    if (i) s += ",";
    if (Chance(rng, 0.4)) s += "-";
    s += Pick(rng, fields);
  }
  return s;
}

size_t RandomLimit(std::mt19937& rng) {
  return Pick(rng, std::vector<size_t>{1, 3, 10, 10, 50, OfferIndex::kNoLimit});
}

// Runs `n` random queries; returns how many parsed (and were compared).
int CheckRandomQueries(std::mt19937& rng, const OfferIndex& index, const std::vector<Offer>& offers,
                       const std::vector<std::string>& labels, int n) {
  int compared = 0;
  for (int i = 0; i < n; ++i) {
    std::string text;
    const int terms = std::uniform_int_distribution<int>(0, 4)(rng);
    for (int t = 0; t < terms; ++t) {
      text += (t ? " " : "") + RandomTerm(rng, labels, offers);
    }
    Result<Query> q = ParseQuery(text);
    Result<std::vector<SortKey>> keys = ParseSortKeys(RandomSortText(rng));
    if (!q.ok() || !keys.ok()) continue;
    const size_t limit = RandomLimit(rng);
    const std::vector<OfferRef> got = index.Search(*q, *keys, limit);
    const std::vector<Offer> want = BruteForce(offers, *q, *keys, limit);
    EXPECT_EQ(Ids(got), Ids(want)) << "query: " << text << "  limit " << limit;
    if (!want.empty()) {
      EXPECT_EQ(*got.front(), want.front()) << text;
    }
    ++compared;
    if (::testing::Test::HasFailure()) break;  // one readable failure, not hundreds
  }
  return compared;
}

TEST(OfferIndexTest, RandomQueriesMatchBruteForce) {
  const std::vector<std::string> labels = KnownGpuLabels();
  ASSERT_FALSE(labels.empty());
  for (unsigned seed : {1u, 2u, 3u}) {
    std::mt19937 rng(seed);
    std::vector<Offer> offers;
    for (int i = 0; i < 2000; ++i) offers.push_back(RandomOffer(rng, i, labels));
    OfferIndex index;
    index.UpsertAll(offers);
    ASSERT_EQ(index.size(), offers.size());
    const int compared = CheckRandomQueries(rng, index, offers, labels, 500);
    EXPECT_GT(compared, 300) << "too many generated queries failed to parse; seed " << seed;
  }
}

// The generator must produce queries that select something, or the comparison proves little.
TEST(OfferIndexTest, GeneratedQueriesOftenMatch) {
  const std::vector<std::string> labels = KnownGpuLabels();
  std::mt19937 rng(7);
  std::vector<Offer> offers;
  for (int i = 0; i < 2000; ++i) offers.push_back(RandomOffer(rng, i, labels));
  int parsed = 0, nonempty = 0;
  for (int i = 0; i < 300; ++i) {
    Result<Query> q = ParseQuery(RandomTerm(rng, labels, offers));
    if (!q.ok()) continue;
    ++parsed;
    if (!BruteForce(offers, *q, {}, 1).empty()) ++nonempty;
  }
  EXPECT_GT(nonempty, parsed / 3);
}

TEST(OfferIndexTest, StaysCorrectUnderUpsertsAndRemoves) {
  const std::vector<std::string> labels = KnownGpuLabels();
  for (unsigned seed : {11u, 12u}) {
    std::mt19937 rng(seed);
    std::vector<Offer> offers;
    int next_id = 0;
    for (; next_id < 1500; ++next_id) offers.push_back(RandomOffer(rng, next_id, labels));
    OfferIndex index;
    index.UpsertAll(offers);
    for (int round = 0; round < 30; ++round) {
      for (int m = 0; m < 60; ++m) {
        const int kind = std::uniform_int_distribution<int>(0, 3)(rng);
        if (kind == 0 && !offers.empty()) {  // remove
          const size_t at = std::uniform_int_distribution<size_t>(0, offers.size() - 1)(rng);
          EXPECT_TRUE(index.Remove(offers[at].id));
          offers.erase(offers.begin() + static_cast<long>(at));
        } else if (kind == 1 && !offers.empty()) {  // change an existing offer, label included
          const size_t at = std::uniform_int_distribution<size_t>(0, offers.size() - 1)(rng);
          Offer changed = RandomOffer(rng, next_id++, labels);
          changed.id = offers[at].id;
          offers[at] = changed;
          index.Upsert(changed);
        } else {  // a new offer
          offers.push_back(RandomOffer(rng, next_id++, labels));
          index.Upsert(offers.back());
        }
      }
      if (round % 10 == 9) {  // a bulk batch that both replaces and adds
        std::vector<Offer> batch;
        for (int k = 0; k < 40; ++k) {
          Offer o = RandomOffer(rng, next_id++, labels);
          if (k % 2 == 0 && !offers.empty()) {
            const size_t at = std::uniform_int_distribution<size_t>(0, offers.size() - 1)(rng);
            o.id = offers[at].id;
            offers[at] = o;
          } else {
            offers.push_back(o);
          }
          batch.push_back(o);
        }
        index.UpsertAll(batch);
      }
      EXPECT_FALSE(index.Remove("no/such/offer"));
      ASSERT_EQ(index.size(), offers.size());
      CheckRandomQueries(rng, index, offers, labels, 40);
      if (HasFailure()) return;
    }
  }
}

TEST(OfferIndexTest, LimitZeroAndEmptyIndex) {
  OfferIndex index;
  Result<Query> q = ParseQuery("");
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(index.Search(*q, {}, 10).empty());
  Offer o;
  o.id = "x";
  o.gpu_label = "h100-80gb";
  index.Upsert(o);
  EXPECT_TRUE(index.Search(*q, {}, 0).empty());
  ASSERT_EQ(index.Search(*q, {}, 10).size(), 1u);
  EXPECT_EQ(*index.Search(*q, {}, 10)[0], o);
}

std::string CatalogDir() {
  const char* env = std::getenv("SLUICE_SOURCE_DIR");
  return std::string(env != nullptr ? env : SLUICE_SOURCE_DIR_DEFAULT) + "/data/catalog";
}

TEST(OfferIndexTest, RealCatalogsMatchBruteForce) {
  std::vector<Offer> offers;
  for (const auto& entry : std::filesystem::directory_iterator(CatalogDir())) {
    if (entry.path().extension() != ".csv") continue;
    Result<CatalogImport> imp = ImportCatalogFile(entry.path().string());
    ASSERT_TRUE(imp.ok()) << entry.path() << ": " << imp.status().message();
    for (Offer& o : imp->offers) offers.push_back(std::move(o));
  }
  ASSERT_GT(offers.size(), 1000u);
  OfferIndex index;
  index.UpsertAll(offers);
  ASSERT_EQ(index.size(), offers.size());

  const std::vector<std::pair<std::string, std::string>> realistic = {
      {"gpu=h100 gpus>=8", "price"},
      {"gpu=a100-80gb spot_price<1.5", "spot_price"},
      {"vram>=40GB price<2 region=us-*", "price"},
      {"provider in [aws,gcp] gpu=l4", "price,-perf"},
      {"gpu notin [t4,v100] perf>=1", "-perf,price"},
      {"", "price"},
  };
  for (const auto& [text, sort] : realistic) {
    Result<Query> q = ParseQuery(text);
    ASSERT_TRUE(q.ok()) << text << ": " << q.status().message();
    Result<std::vector<SortKey>> keys = ParseSortKeys(sort);
    ASSERT_TRUE(keys.ok()) << sort;
    for (size_t limit : {size_t{1}, size_t{10}, OfferIndex::kNoLimit}) {
      const std::vector<Offer> want = BruteForce(offers, *q, *keys, limit);
      EXPECT_FALSE(want.empty()) << text;
      EXPECT_EQ(Ids(index.Search(*q, *keys, limit)), Ids(want)) << text << " -o " << sort;
    }
  }
  std::mt19937 rng(5);
  std::vector<std::string> labels;
  for (const Offer& o : offers) labels.push_back(o.gpu_label);
  EXPECT_GT(CheckRandomQueries(rng, index, offers, labels, 400), 250);
}

}  // namespace
}  // namespace sluice::market
