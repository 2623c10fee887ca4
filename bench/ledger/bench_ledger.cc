// bench_ledger: what metering costs the store, and how fast a month's cost report is served
// (issue 14; docs/benchmarks.md "Ledger").
//
// Phase 1 settles A attempts of S seconds each (default 100,000 × 10 s = 1,000,000
// attempt-seconds) the way the core commits them: batches of 256 attempts (the inbox's batch),
// each attempt opened, settled K times and closed, every charge a balanced transaction with its
// cost delta. Baseline, measured in the same run on a second store: the same batches with only
// the attempt records every start and exit writes anyway. Printed: both rates and their ratio
// (the price of metering on the commits that already happen).
//
// Phase 2 asks the store for one account's month: the cost of each of its 10,000 jobs, from the
// cost totals (kept as charges are written) and from the raw meter records with SQL. Printed:
// the median of 5 runs of each and their ratio; the target is ≤ 200 ms from the totals.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "ledger/metering.h"
#include "store/store.h"

namespace {

using namespace sluice;
using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct Args {
  int attempts = 100'000;
  int seconds = 10;
  int settlements = 2;  // between open and close
  int jobs = 10'000;
  std::string dir = "/tmp/sluice-bench-ledger";
};

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--attempts")
      a.attempts = std::atoi(argv[i + 1]);
    else if (k == "--seconds")
      a.seconds = std::atoi(argv[i + 1]);
    else if (k == "--settlements")
      a.settlements = std::atoi(argv[i + 1]);
    else if (k == "--jobs")
      a.jobs = std::atoi(argv[i + 1]);
    else if (k == "--dir")
      a.dir = argv[i + 1];
    else {
      std::fprintf(stderr,
                   "usage: bench_ledger [--attempts N] [--seconds S] [--settlements K] "
                   "[--jobs J] [--dir D]\n");
      std::exit(2);
    }
  }
  return a;
}

std::unique_ptr<store::Store> Open(const std::string& path) {
  std::filesystem::remove(path);
  std::filesystem::remove(path + "-wal");
  std::filesystem::remove(path + "-shm");
  auto s = store::OpenSqliteStore(path);
  if (!s.ok()) {
    std::fprintf(stderr, "open %s: %s\n", path.c_str(), s.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(*s);
}

std::string Day(int64_t ms) {
  std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

constexpr int64_t kMonthStart = 1'796'083'200'000;  // 2026-12-01T00:00Z
constexpr int kBatch = 256;

// Attempt i: job i % jobs, started somewhere in the month, on one of 1,000 nodes.
store::AttemptRecord Attempt(int i, const Args& a) {
  store::AttemptRecord r;
  r.id = "att-" + std::to_string(i);
  r.job_id = "job-" + std::to_string(i % a.jobs);
  r.node_id = "node-" + std::to_string(i % 1000);
  r.cpus = 4;
  r.memory_gb = 8;
  r.price_per_hour = 0.5 + (i % 7);
  r.state = store::AttemptState::kRunning;
  r.created_ms = kMonthStart + static_cast<int64_t>(i) * 25'000;  // spread over ~29 days
  r.started_ms = r.created_ms + 500;
  return r;
}

// The jobs the attempts belong to (attempts refer to them).
void WriteJobs(store::Store& s, const Args& a) {
  for (int base = 0; base < a.jobs; base += 1000) {
    store::WriteBatch b;
    for (int j = base; j < std::min(a.jobs, base + 1000); ++j) {
      store::JobRecord job;
      job.id = "job-" + std::to_string(j);
      job.name = "bench";
      job.spec = Json::object();
      job.owner = "acct-user";
      b.jobs.push_back(job);
    }
    if (Status w = s.Write(b); !w.ok()) {
      std::fprintf(stderr, "write jobs: %s\n", w.ToString().c_str());
      std::exit(1);
    }
  }
}

// Runs phase 1 on `s`; `metered` adds what metering writes. Returns wall time.
Clock::duration Settle(store::Store& s, const Args& a, bool metered, int64_t* charged_total) {
  const auto t0 = Clock::now();
  std::vector<store::MeterRecord> open(kBatch);
  for (int base = 0; base < a.attempts; base += kBatch) {
    const int n = std::min(kBatch, a.attempts - base);
    // One commit per step of the batch's lives: started, K settlements, exited.
    for (int step = 0; step <= a.settlements + 1; ++step) {
      store::WriteBatch b;
      for (int j = 0; j < n; ++j) {
        store::AttemptRecord att = Attempt(base + j, a);
        const int64_t end = att.started_ms + int64_t{a.seconds} * 1000;
        const bool last = step == a.settlements + 1;
        if (step == 0 || last) {
          if (last) {
            att.state = store::AttemptState::kSucceeded;
            att.ended_ms = end;
          }
          b.attempts.push_back(att);  // what the core writes with or without metering
        }
        if (!metered) continue;
        store::MeterRecord& m = open[j];
        if (step == 0) {
          m = store::MeterRecord{};
          m.attempt_id = att.id;
          m.job_id = att.job_id;
          m.payer = "acct-user";
          m.provider = "acct-prov-" + std::to_string((base + j) % 50);
          m.node_id = att.node_id;
          m.resource = "cpu";
          m.units = att.cpus;
          m.memory_gb = att.memory_gb;
          m.price_micros_per_hour = ledger::PricePerHourMicros(att.price_per_hour);
          m.start_ms = att.started_ms;
          m.settled_ms = att.started_ms;
          b.meters.push_back(m);
          continue;
        }
        const int64_t until =
            last ? end : att.started_ms + (end - att.started_ms) * step / (a.settlements + 1);
        if (last) m.end_ms = end;
        ledger::Settlement st = ledger::SettleTo(m, until, 500);
        store::LedgerTxn txn = ledger::ChargeTxn(st, until);
        if (!txn.entries.empty()) b.ledger.push_back(std::move(txn));
        b.cost_deltas.push_back({m.payer, m.provider, m.job_id, m.node_id, Day(st.to_ms),
                                 m.resource, st.charge, st.fee, 0, st.to_ms - st.from_ms});
        m = st.meter;
        b.meters.push_back(m);
        if (last) *charged_total += m.charged_micros;
      }
      if (b.empty()) continue;
      if (Status w = s.Write(b); !w.ok()) {
        std::fprintf(stderr, "write: %s\n", w.ToString().c_str());
        std::exit(1);
      }
    }
  }
  return Clock::now() - t0;
}

template <typename F>
double MedianMs(F f, int runs) {
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = Clock::now();
    f();
    t.push_back(Ms(Clock::now() - t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  std::filesystem::create_directories(a.dir);
  auto base = Open(a.dir + "/baseline.db");
  auto meter = Open(a.dir + "/metered.db");
  WriteJobs(*base, a);
  WriteJobs(*meter, a);
  int64_t ignored = 0, charged = 0;
  const double base_ms = Ms(Settle(*base, a, false, &ignored));
  const double meter_ms = Ms(Settle(*meter, a, true, &charged));
  const double attempt_seconds = static_cast<double>(a.attempts) * a.seconds;
  std::printf(
      "phase 1: %d attempts x %d s = %.0f attempt-seconds, %d settlements each between "
      "open and close, batches of %d\n",
      a.attempts, a.seconds, attempt_seconds, a.settlements, kBatch);
  std::printf("  baseline (attempt records only): %8.0f ms  %9.0f attempts/s\n", base_ms,
              a.attempts / base_ms * 1000);
  std::printf(
      "  metered (+ meters, ledger, totals): %5.0f ms  %9.0f attempts/s  %11.0f "
      "attempt-seconds/s\n",
      meter_ms, a.attempts / meter_ms * 1000, attempt_seconds / meter_ms * 1000);
  std::printf("  ratio metered/baseline time: %.2f\n", meter_ms / base_ms);
  auto check = meter->CheckLedger();
  if (!check.ok() || !check->unbalanced.empty() || check->charged_by_entries != charged ||
      check->charged_by_totals != charged || check->charged_by_meters != charged) {
    std::fprintf(stderr, "ledger check FAILED\n");
    return 1;
  }
  std::printf("  ledger check: %lld transactions balance; charged %s three ways\n",
              static_cast<long long>(check->transactions), ledger::FormatMicros(charged).c_str());

  store::CostQuery q;
  q.payer = "acct-user";
  q.since_ms = kMonthStart;
  q.by = "job";
  std::vector<store::CostRow> from_totals, from_meters;
  const double totals_ms = MedianMs([&] { from_totals = *meter->Costs(q); }, 5);
  const double meters_ms = MedianMs([&] { from_meters = *meter->CostsFromMeters(q); }, 5);
  int64_t sum_totals = 0, sum_meters = 0;
  for (const auto& r : from_totals) sum_totals += r.charged_micros;
  for (const auto& r : from_meters) sum_meters += r.charged_micros;
  std::printf("phase 2: one account's month by job: %zu jobs\n", from_totals.size());
  std::printf("  from the cost totals: %7.1f ms (median of 5; target <= 200 ms)\n", totals_ms);
  std::printf("  from the raw meters:  %7.1f ms (median of 5)\n", meters_ms);
  std::printf("  ratio meters/totals: %.1f; reports agree: %s\n", meters_ms / totals_ms,
              from_totals == from_meters ? "yes" : "NO");
  if (sum_totals != sum_meters || from_totals.size() != from_meters.size()) return 1;
  return 0;
}
