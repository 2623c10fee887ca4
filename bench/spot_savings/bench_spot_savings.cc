// bench_spot_savings: what a training job costs, and how long it takes, on interruptible capacity
// with Sluice's checkpoint recovery against on-demand, on the catalogs' real prices.
//
//   bench_spot_savings [--catalog-dir DIR] [--work-hours 24] [--gpus 1] [--runs 5000] [--quick]
//                      [--restart-min 2] [--checkpoint-write-s 30] [--checkpoint-gb 10]
//                      [--storage-price 0.02] [--cap 100] [--label a100-80gb] [--seed 42]
//                      [--keep-copied-spot]
//
// Prices: every catalog row (data/catalog/*.csv, imported with ImportCatalogFile) with both an
// on-demand and an interruptible price and a known perf score; per GPU (label and perf score, so
// the SXM and PCIe cards of one label stay apart) the median of each price per GPU-hour. A
// catalog whose interruptible price equals its on-demand price in every row is left out (it
// copied the column; --keep-copied-spot keeps it). `--quick` is 200 runs per cell.
//
// The job: `work-hours` of work on `gpus` reference GPUs (a100-80gb), i.e. work-hours ÷ perf of
// compute on the GPU at hand. On-demand: no interruptions, no checkpoints. Interruptible: a Monte
// Carlo simulation (std::mt19937_64, `runs` runs per cell) with preemptions as a Poisson process
// of rate λ per hour of running time; checkpoints are written after every τ hours of compute
// (a write takes `checkpoint-write-s` of wall time and is lost, like the work before it, if a
// preemption lands during it); a preemption loses everything since the last completed
// checkpoint and costs `restart-min` (re-placement + restore) before the job runs again; the
// restart itself is not interrupted. Every wall hour — work, lost work, writes, restarts — is
// paid at the interruptible price, plus checkpoint storage for the job's wall time. Without
// checkpoints a preemption restarts from zero; a run is abandoned (and counted as "did not
// finish", billed up to the cap) after `cap` × the compute time.
//
// Checks: with a write cost of 0 the simulated mean must agree with the closed form of the cost
// model (market::EstimateCost, src/market/ranking.h) — the ratio is printed per cell.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "market/catalog.h"
#include "market/perf.h"
#include "market/ranking.h"

namespace sluice::market {
namespace {

constexpr double kRates[] = {0.01, 0.05, 0.1, 0.25, 0.5, 1.0};  // preemptions per hour
// Checkpoint intervals in hours of compute; 0 = no checkpoints (restart from zero).
constexpr double kIntervals[] = {5.0 / 60, 15.0 / 60, 0.5, 1, 4, 0};
constexpr size_t kNumRates = std::size(kRates);
constexpr size_t kNumIntervals = std::size(kIntervals);
constexpr double kHoursPerMonth = 730;  // as in ranking.cc

struct Options {
  std::string catalog_dir = std::string(SLUICE_SOURCE_DIR_DEFAULT) + "/data/catalog";
  double work_hours = 24;  // GPU-hours on the reference GPU
  int gpus = 1;
  int runs = 5000;
  double restart_hours = 2.0 / 60;
  double write_hours = 30.0 / 3600;
  double checkpoint_gb = 10;
  double storage_price = 0.02;  // USD per GB-month
  double cap = 100;             // abandon a run after cap × its compute time
  std::string label = "a100-80gb";
  uint64_t seed = 42;
  bool keep_copied_spot = false;
};

// One GPU: a label and a perf score (h100-80gb SXM and PCIe are two).
struct Gpu {
  std::string label;
  std::string form;
  double perf = 0;
  std::vector<double> on_demand;      // per GPU-hour, one per offer
  std::vector<double> interruptible;  // same offers
  std::map<std::string, int> providers;
  double on_demand_median = 0;
  double interruptible_median = 0;
  std::string Name() const { return form.empty() ? label : label + " " + form; }
};

struct Cell {
  double mean_hours = 0;
  double se_hours = 0;  // standard error of the mean
  double p95_hours = 0;
  double did_not_finish = 0;  // share of runs abandoned at the cap
  double preemptions = 0;     // mean per run
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Wall hours of one job of `compute` hours on interruptible capacity (see the file comment).
// Preemptions are memoryless, so one exponential draw carries across segments until it fires.
Cell Simulate(double compute, double interval, double write, double restart, double rate,
              double cap_hours, int runs, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> next(rate);
  // Segments of `interval` hours with a checkpoint write after each but the last.
  size_t segments = 1;
  if (interval > 0) {
    segments = std::max<size_t>(1, static_cast<size_t>(std::ceil(compute / interval - 1e-9)));
  }
  const double last = compute - static_cast<double>(segments - 1) * interval;
  std::vector<double> walls(static_cast<size_t>(runs));
  double dnf = 0, preemptions = 0;
  for (double& wall : walls) {
    wall = 0;
    double until = next(rng);  // running hours until the next preemption
    bool finished = true;
    for (size_t s = 0; s < segments && finished; ++s) {
      const double length = s + 1 < segments ? interval + write : last;
      while (until < length) {  // preempted: this segment's progress is lost
        wall += until + restart;
        preemptions += 1;
        until = next(rng);
        if (wall >= cap_hours) {
          finished = false;
          break;
        }
      }
      if (!finished) break;
      until -= length;
      wall += length;
    }
    if (!finished || wall > cap_hours) {
      wall = cap_hours;
      dnf += 1;
    }
  }
  Cell c;
  double sum = 0, sq = 0;
  for (double w : walls) sum += w;
  c.mean_hours = sum / runs;
  for (double w : walls) sq += (w - c.mean_hours) * (w - c.mean_hours);
  c.se_hours = std::sqrt(sq / (runs - 1) / runs);
  const size_t k = static_cast<size_t>(std::ceil(0.95 * runs)) - 1;
  std::nth_element(walls.begin(), walls.begin() + static_cast<long>(k), walls.end());
  c.p95_hours = walls[k];
  c.did_not_finish = dnf / runs;
  c.preemptions = preemptions / runs;
  return c;
}

// The cost model's expected wall hours with the real segment lengths (n − 1 of τ and a shorter
// last one) instead of compute ÷ τ segments of τ: what the simulation must match exactly.
double ExactSegmentsHours(double compute, double interval, double rate, double restart) {
  auto segment = [&](double s) { return std::expm1(rate * s) * (1 / rate + restart); };
  if (interval <= 0 || interval >= compute) return segment(compute);
  const double n = std::ceil(compute / interval - 1e-9);
  return (n - 1) * segment(interval) + segment(compute - (n - 1) * interval);
}

std::string IntervalName(double hours) {
  if (hours <= 0) return "none";
  char buf[32];
  if (hours < 1) {
    std::snprintf(buf, sizeof buf, "%.0f min", hours * 60);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f h", hours);
  }
  return buf;
}

std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string Percent(double share) {
  if (share <= 0) return "0";
  if (share >= 1) return "100 %";
  return Fmt(share < 0.01 ? "%.2f %%" : "%.0f %%", share * 100);
}

bool ParseArgs(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--quick") {
      o.runs = 200;
      continue;
    }
    if (a == "--keep-copied-spot") {
      o.keep_copied_spot = true;
      continue;
    }
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    if (a == "--catalog-dir") {
      o.catalog_dir = v;
    } else if (a == "--work-hours") {
      o.work_hours = std::strtod(v, nullptr);
    } else if (a == "--gpus") {
      o.gpus = std::atoi(v);
    } else if (a == "--runs") {
      o.runs = std::atoi(v);
    } else if (a == "--restart-min") {
      o.restart_hours = std::strtod(v, nullptr) / 60;
    } else if (a == "--checkpoint-write-s") {
      o.write_hours = std::strtod(v, nullptr) / 3600;
    } else if (a == "--checkpoint-gb") {
      o.checkpoint_gb = std::strtod(v, nullptr);
    } else if (a == "--storage-price") {
      o.storage_price = std::strtod(v, nullptr);
    } else if (a == "--cap") {
      o.cap = std::strtod(v, nullptr);
    } else if (a == "--label") {
      o.label = v;
    } else if (a == "--seed") {
      o.seed = std::strtoull(v, nullptr, 10);
    } else {
      return false;
    }
  }
  return o.work_hours > 0 && o.gpus > 0 && o.runs >= 2 && o.restart_hours >= 0 &&
         o.write_hours >= 0 && o.checkpoint_gb >= 0 && o.storage_price >= 0 && o.cap > 1;
}

int Main(int argc, char** argv) {
  Options opt;
  if (!ParseArgs(argc, argv, opt)) {
    std::fprintf(stderr,
                 "usage: bench_spot_savings [--catalog-dir DIR] [--work-hours H] [--gpus N] "
                 "[--runs N] [--quick] [--restart-min M] [--checkpoint-write-s S] "
                 "[--checkpoint-gb GB] [--storage-price USD_PER_GB_MONTH] [--cap X] "
                 "[--label GPU] [--seed S] [--keep-copied-spot]\n");
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  // ---- prices ----
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(opt.catalog_dir, ec)) {
    if (e.path().extension() == ".csv") files.push_back(e.path().string());
  }
  if (ec || files.empty()) {
    std::fprintf(stderr, "no catalogs in %s\n", opt.catalog_dir.c_str());
    return 1;
  }
  std::sort(files.begin(), files.end());
  std::map<std::pair<std::string, double>, Gpu> by_gpu;
  size_t rows = 0, no_spot = 0, no_perf = 0;
  std::map<std::string, int> no_perf_labels;
  std::map<std::string, int> used_per_file;
  std::map<std::string, int> copied_spot;  // file → rows whose interruptible price is a copy
  for (const std::string& f : files) {
    Result<CatalogImport> imp = ImportCatalogFile(f);
    if (!imp.ok()) {
      std::fprintf(stderr, "%s\n", imp.status().message().c_str());
      return 1;
    }
    const std::string base = std::filesystem::path(f).filename().string();
    // A catalog whose every interruptible price equals the on-demand one has copied the column
    // (RunPod's today), not priced interruptible capacity.
    bool any_spot = false, copied = true;
    for (const Offer& o : imp->offers) {
      if (o.interruptible_price_per_gpu_hour <= 0) continue;
      any_spot = true;
      copied = copied && o.interruptible_price_per_gpu_hour == o.price_per_gpu_hour;
    }
    copied = copied && any_spot && !opt.keep_copied_spot;
    for (const Offer& o : imp->offers) {
      ++rows;
      if (o.price_per_gpu_hour <= 0 || o.interruptible_price_per_gpu_hour <= 0) {
        ++no_spot;
        continue;
      }
      if (copied) {
        ++copied_spot[base];
        continue;
      }
      const double perf = PerfScore(o.gpu_label, o.form_factor);
      if (perf <= 0) {
        ++no_perf;
        ++no_perf_labels[o.gpu_label];
        continue;
      }
      Gpu& g = by_gpu[{o.gpu_label, perf}];
      g.label = o.gpu_label;
      g.perf = perf;
      g.on_demand.push_back(o.price_per_gpu_hour);
      g.interruptible.push_back(o.interruptible_price_per_gpu_hour);
      ++g.providers[o.provider];
      ++used_per_file[base];
    }
  }
  std::vector<Gpu> gpus;
  for (auto& [key, g] : by_gpu) {
    g.on_demand_median = Median(g.on_demand);
    g.interruptible_median = Median(g.interruptible);
    gpus.push_back(std::move(g));
  }
  // Name the form factor where one label has several perf scores.
  for (Gpu& g : gpus) {
    const bool split = std::count_if(gpus.begin(), gpus.end(),
                                     [&](const Gpu& h) { return h.label == g.label; }) > 1;
    if (split) g.form = Fmt("(perf %.2f)", g.perf);
  }
  // Fastest first.
  std::sort(gpus.begin(), gpus.end(), [](const Gpu& a, const Gpu& b) {
    return a.perf != b.perf ? a.perf > b.perf : a.label < b.label;
  });

  std::printf("# bench_spot_savings\n\n");
  std::printf(
      "catalogs: %zu files, %zu priced rows; %zu without an interruptible price, %zu without a "
      "perf score",
      files.size(), rows, no_spot, no_perf);
  if (!no_perf_labels.empty()) {
    std::printf(" (");
    bool first = true;
    for (const auto& [l, n] : no_perf_labels) {
      std::printf("%s%s %d", first ? "" : ", ", l.c_str(), n);
      first = false;
    }
    std::printf(")");
  }
  for (const auto& [f, n] : copied_spot) {
    std::printf(
        "; %s: %d rows whose interruptible price equals on-demand in every row (a copied "
        "column, not a discount; --keep-copied-spot keeps them)",
        f.c_str(), n);
  }
  std::printf("; used:");
  for (const auto& [f, n] : used_per_file) std::printf(" %s %d", f.c_str(), n);
  std::printf("\n");
  std::printf(
      "job: %g GPU-hours of work on the reference GPU (a100-80gb), %d GPU(s); restart %g min; "
      "checkpoint write %g s; checkpoint %g GB at $%g/GB-month; %d runs per cell (seed %llu); "
      "runs abandoned after %g x the compute time\n\n",
      opt.work_hours, opt.gpus, opt.restart_hours * 60, opt.write_hours * 3600, opt.checkpoint_gb,
      opt.storage_price, opt.runs, static_cast<unsigned long long>(opt.seed), opt.cap);

  CostModel model;
  model.restart_hours = opt.restart_hours;
  model.storage_price_per_gb_month = opt.storage_price;
  const double storage_per_hour = opt.checkpoint_gb * opt.storage_price / kHoursPerMonth;

  auto offer_of = [](const Gpu& g) {
    Offer o;
    o.gpu_label = g.label;
    o.perf_score = g.perf;
    o.price_per_gpu_hour = g.on_demand_median;
    o.interruptible_price_per_gpu_hour = g.interruptible_median;
    return o;
  };
  Workload on_demand_work;
  on_demand_work.hours = opt.work_hours / opt.gpus;
  on_demand_work.gpus = opt.gpus;

  std::printf("## Prices (median per GPU-hour over the offers with both prices)\n\n");
  std::printf(
      "| GPU | perf | offers | providers | on-demand $/GPU-h | interruptible $/GPU-h | "
      "interruptible / on-demand | on-demand time | on-demand cost |\n");
  std::printf("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
  for (const Gpu& g : gpus) {
    std::string providers;
    for (const auto& [p, n] : g.providers) {
      providers += (providers.empty() ? "" : ", ") + p + " " + std::to_string(n);
    }
    const CostEstimate od = EstimateCost(offer_of(g), on_demand_work, model);
    std::printf("| %s | %.2f | %zu | %s | %.3f | %.3f | %.2f | %.1f h | $%.2f |\n",
                g.Name().c_str(), g.perf, g.on_demand.size(), providers.c_str(), g.on_demand_median,
                g.interruptible_median, g.interruptible_median / g.on_demand_median,
                od.expected_hours, od.expected_cost);
  }

  // ---- simulation: every GPU × λ × τ, with the write cost and (for the check) without ----
  // cells[g][rate][interval][0 = with write cost, 1 = write cost 0]
  std::vector<std::vector<std::vector<std::array<Cell, 2>>>> cells(
      gpus.size(), std::vector<std::vector<std::array<Cell, 2>>>(
                       kNumRates, std::vector<std::array<Cell, 2>>(kNumIntervals)));
  for (size_t gi = 0; gi < gpus.size(); ++gi) {
    const double compute = opt.work_hours / opt.gpus / gpus[gi].perf;
    for (size_t ri = 0; ri < kNumRates; ++ri) {
      for (size_t ti = 0; ti < kNumIntervals; ++ti) {
        for (int w = 0; w < 2; ++w) {
          const uint64_t seed = SplitMix(
              opt.seed ^ SplitMix((gi << 16) | (ri << 8) | (ti << 1) | static_cast<uint64_t>(w)));
          const double write = (w == 0 && kIntervals[ti] > 0) ? opt.write_hours : 0;
          cells[gi][ri][ti][w] = Simulate(compute, kIntervals[ti], write, opt.restart_hours,
                                          kRates[ri], opt.cap * compute, opt.runs, seed);
        }
      }
    }
  }

  // Mean cost of a cell: every wall hour at the interruptible price, plus storage.
  auto cell_cost = [&](const Gpu& g, size_t ti, double hours) {
    double c = g.interruptible_median * opt.gpus * hours;
    if (kIntervals[ti] > 0) c += storage_per_hour * hours;
    return c;
  };
  auto model_estimate = [&](const Gpu& g, size_t ri, size_t ti) {
    Offer o = offer_of(g);
    o.interruptions_per_hour = kRates[ri];
    Workload w = on_demand_work;
    w.interruptible = true;
    if (kIntervals[ti] > 0) w.checkpoint_interval_hours = kIntervals[ti];
    w.checkpoint_size_gb = opt.checkpoint_gb;
    return EstimateCost(o, w, model);
  };

  // ---- check: simulation (write cost 0) against the closed form ----
  const auto label_it =
      std::find_if(gpus.begin(), gpus.end(), [&](const Gpu& g) { return g.Name() == opt.label; });
  std::printf(
      "\n## Check: closed-form cost model (EstimateCost) against the simulation, write cost 0\n\n");
  if (label_it != gpus.end()) {
    const Gpu& g = *label_it;
    const size_t gi = static_cast<size_t>(label_it - gpus.begin());
    std::printf("%s, %.1f h of compute:\n\n", g.Name().c_str(), opt.work_hours / g.perf);
    std::printf(
        "| λ/h | τ | simulated cost | ± s.e. | EstimateCost | EstimateCost / simulated | "
        "did not finish |\n");
    std::printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (size_t ri = 0; ri < kNumRates; ++ri) {
      for (size_t ti = 0; ti < kNumIntervals; ++ti) {
        const Cell& c = cells[gi][ri][ti][1];
        const CostEstimate e = model_estimate(g, ri, ti);
        const double sim = cell_cost(g, ti, c.mean_hours);
        const double se = cell_cost(g, ti, c.se_hours);
        std::printf("| %g | %s | $%.2f | %.2f %% | %s | %s | %s |\n", kRates[ri],
                    IntervalName(kIntervals[ti]).c_str(), sim, 100 * se / sim,
                    e.expected_cost < 1e7 ? Fmt("$%.2f", e.expected_cost).c_str() : "> $1e7",
                    c.did_not_finish > 0 ? "(capped)" : Fmt("%.3f", e.expected_cost / sim).c_str(),
                    Percent(c.did_not_finish).c_str());
      }
    }
  } else {
    std::printf("(no GPU named %s in the data)\n", opt.label.c_str());
  }
  std::printf(
      "\nAll GPUs, cells where every run finished. 'model' = EstimateCost / simulated; 'exact' = "
      "the same formula with the real segment lengths (n-1 of τ and a shorter last one) / "
      "simulated; z = (exact - simulated) / s.e.\n\n");
  std::printf(
      "| GPU | cells | model min | model max | exact min | exact max | max abs z |\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (size_t gi = 0; gi < gpus.size(); ++gi) {
    const Gpu& g = gpus[gi];
    const double compute = opt.work_hours / opt.gpus / g.perf;
    int n = 0;
    double mmin = 1e300, mmax = 0, xmin = 1e300, xmax = 0, zmax = 0;
    for (size_t ri = 0; ri < kNumRates; ++ri) {
      for (size_t ti = 0; ti < kNumIntervals; ++ti) {
        const Cell& c = cells[gi][ri][ti][1];
        if (c.did_not_finish > 0) continue;
        ++n;
        const double sim = cell_cost(g, ti, c.mean_hours);
        const double m = model_estimate(g, ri, ti).expected_cost / sim;
        const double exact_hours =
            ExactSegmentsHours(compute, kIntervals[ti], kRates[ri], opt.restart_hours);
        const double x = cell_cost(g, ti, exact_hours) / sim;
        mmin = std::min(mmin, m);
        mmax = std::max(mmax, m);
        xmin = std::min(xmin, x);
        xmax = std::max(xmax, x);
        zmax = std::max(zmax, std::abs(exact_hours - c.mean_hours) / c.se_hours);
      }
    }
    std::printf("| %s | %d | %.3f | %.3f | %.3f | %.3f | %.1f |\n", g.Name().c_str(), n, mmin, mmax,
                xmin, xmax, zmax);
  }

  // ---- headline: interruptible with recovery against on-demand ----
  std::printf(
      "\n## Interruptible with recovery against on-demand (best τ per λ, write cost %g s)\n\n",
      opt.write_hours * 3600);
  std::printf(
      "Ratios are interruptible / on-demand; 'no checkpoints' restarts from zero after every "
      "preemption (a '>=' cost counts abandoned runs only up to the cap).\n\n");
  std::printf(
      "| GPU | λ/h | best τ | cost | mean time | p95 time | no checkpoints: cost | "
      "no checkpoints: mean time | no checkpoints: did not finish |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  const size_t none = kNumIntervals - 1;
  for (size_t gi = 0; gi < gpus.size(); ++gi) {
    const Gpu& g = gpus[gi];
    const CostEstimate od = EstimateCost(offer_of(g), on_demand_work, model);
    for (size_t ri = 0; ri < kNumRates; ++ri) {
      size_t best = 0;
      for (size_t ti = 1; ti < none; ++ti) {
        if (cell_cost(g, ti, cells[gi][ri][ti][0].mean_hours) <
            cell_cost(g, best, cells[gi][ri][best][0].mean_hours)) {
          best = ti;
        }
      }
      const Cell& b = cells[gi][ri][best][0];
      const Cell& n = cells[gi][ri][none][0];
      const char* ge = n.did_not_finish > 0 ? ">= " : "";
      std::printf("| %s | %g | %s | %.2f | %.2f | %.2f | %s%.2f | %s%.2f | %s |\n",
                  g.Name().c_str(), kRates[ri], IntervalName(kIntervals[best]).c_str(),
                  cell_cost(g, best, b.mean_hours) / od.expected_cost,
                  b.mean_hours / od.expected_hours, b.p95_hours / od.expected_hours, ge,
                  cell_cost(g, none, n.mean_hours) / od.expected_cost, ge,
                  n.mean_hours / od.expected_hours, Percent(n.did_not_finish).c_str());
    }
  }

  // ---- the full grid for one GPU ----
  if (label_it != gpus.end()) {
    const Gpu& g = *label_it;
    const size_t gi = static_cast<size_t>(label_it - gpus.begin());
    const CostEstimate od = EstimateCost(offer_of(g), on_demand_work, model);
    std::printf(
        "\n## %s, every λ × τ (write cost %g s); on-demand: %.1f h, $%.2f; interruptible "
        "$%.3f/GPU-h vs on-demand $%.3f\n",
        g.Name().c_str(), opt.write_hours * 3600, od.expected_hours, od.expected_cost,
        g.interruptible_median, g.on_demand_median);
    auto grid = [&](const char* title, auto value) {
      std::printf("\n%s ('*': some runs did not finish; counted up to the cap)\n\n", title);
      std::printf("| λ/h |");
      for (double t : kIntervals) std::printf(" τ %s |", IntervalName(t).c_str());
      std::printf("\n| ---: |");
      for (size_t ti = 0; ti < kNumIntervals; ++ti) std::printf(" ---: |");
      std::printf("\n");
      for (size_t ri = 0; ri < kNumRates; ++ri) {
        std::printf("| %g |", kRates[ri]);
        for (size_t ti = 0; ti < kNumIntervals; ++ti) {
          const Cell& c = cells[gi][ri][ti][0];
          std::printf(" %s%s |", value(c, ti).c_str(), c.did_not_finish > 0 ? "*" : "");
        }
        std::printf("\n");
      }
    };
    grid("Mean cost / on-demand cost", [&](const Cell& c, size_t ti) {
      return Fmt("%.2f", cell_cost(g, ti, c.mean_hours) / od.expected_cost);
    });
    grid("Mean completion time, hours",
         [&](const Cell& c, size_t) { return Fmt("%.1f", c.mean_hours); });
    grid("p95 completion time, hours",
         [&](const Cell& c, size_t) { return Fmt("%.1f", c.p95_hours); });
    grid("Mean preemptions per run",
         [&](const Cell& c, size_t) { return Fmt("%.1f", c.preemptions); });
  }

  std::printf("\nelapsed: %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return 0;
}

}  // namespace
}  // namespace sluice::market

int main(int argc, char** argv) { return sluice::market::Main(argc, argv); }
