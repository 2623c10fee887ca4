// JobSpec v1: what a user asks for, parsed from YAML (the CLI) or JSON (the API).
//
//   name: hello
//   resources: {gpu: a100-80gb | min_vram_gb: 40, gpus: 1, cpus: 2, memory_gb: 4}
//   run: python3 train.py
//   env: {KEY: value}
//   workdir: ./src        # a local directory the CLI packs and uploads
//   max_price_per_hour: 3.5
//   max_total_cost: 20       # USD for the whole job; stopped safely before it passes this
//   priority: 0
//   expected_hours: 3.5   # run time on the reference GPU (a100-80gb) with the requested GPUs
//   lifecycle: {capacity: interruptible, checkpoint_interval: 30m, checkpoint_size_gb: 2,
//               max_bid_per_hour: 2.5}
//   runtime: {cuda: "12.1", driver: ">=535", torch: "2.1.0+cu121", python: "3.10"}
//
// `runtime` is matched against the verified software facts of offers; runtime_contract.h says
// what each key means.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/json.h"
#include "common/status.h"
#include "spec/runtime_contract.h"

namespace sluice::spec {

// Limits that keep a hostile or mistaken spec from hurting the server.
inline constexpr size_t kMaxRunBytes = 64 * 1024;
inline constexpr size_t kMaxSpecBytes = 1024 * 1024;
inline constexpr size_t kMaxNameBytes = 128;
inline constexpr size_t kMaxEnvEntries = 256;
inline constexpr size_t kMaxEnvValueBytes = 32 * 1024;
inline constexpr int kMaxGpus = 64;
inline constexpr int kMaxCpus = 4096;

struct Resources {
  std::string gpu;                    // GPU label as the user wrote it; empty = any model
  std::optional<double> min_vram_gb;  // alternative (or addition) to a label
  int gpus = 0;                       // whole GPUs, exclusive
  int cpus = 1;
  double memory_gb = 1.0;

  bool operator==(const Resources&) const = default;
};

// Which capacity (and so which price) the job wants.
enum class Capacity {
  kOnDemand,                  // "on-demand", the default
  kInterruptible,             // "interruptible": only offers that sell interruptible capacity
  kInterruptibleThenOnDemand  // "interruptible-then-on-demand"
};

// "on-demand", "interruptible", "interruptible-then-on-demand": the spelling specs use.
std::string_view Name(Capacity capacity);
// The inverse of Name; nullopt for anything else (the match is exact).
std::optional<Capacity> CapacityFromName(std::string_view name);

struct Lifecycle {
  Capacity capacity = Capacity::kOnDemand;
  // How often the job checkpoints, in seconds (1 s .. 7 days); the cost model uses it to
  // estimate the work an interruption loses. Unset: the job does not say.
  std::optional<int64_t> checkpoint_interval_s;
  double checkpoint_size_gb = 0;  // the size of one checkpoint, to price checkpoint storage
  // How many times the job may be started again after a preemption or a lost node (0..1000);
  // one more and the job fails with that reason.
  int max_restarts = 3;
  // Between SIGTERM and SIGKILL when the job is preempted (0 s .. 1 h): time to save and exit.
  int64_t grace_period_s = 30;
  // interruptible-then-on-demand: fall back to on-demand capacity after this many preemptions,
  // or after waiting this long for interruptible capacity.
  int fallback_after_preemptions = 2;
  int64_t fallback_after_s = 600;
  // Interruptible capacity only: what the job offers per hour for its whole allocation, above
  // the provider's interruptible price. A higher bid wins contested capacity and may preempt a
  // lower one; the bid is the attempt's locked price (docs/design-notes.md "Bids").
  std::optional<double> max_bid_per_hour;

  bool operator==(const Lifecycle&) const = default;
};

struct JobSpec {
  std::string name;
  Resources resources;
  std::string run;  // a bash script
  std::map<std::string, std::string> env;
  std::string workdir;                       // as written; resolved against the spec's directory
  std::optional<double> max_price_per_hour;  // total for the job's allocation, in USD
  // The most the whole job may cost (compute and data transfer over all its attempts), in USD.
  // It is never placed where its expected cost does not fit, and it is stopped, with its
  // checkpoint saved, before it would pass it (docs/design-notes.md "Budgets").
  std::optional<double> max_total_cost;
  int priority = 0;  // higher runs first
  // How long the job runs on the reference GPU (a100-80gb) with the requested GPU count (for a
  // CPU-only job: on the requested CPUs); (0, 100000]. Used to rank offers by cost and time.
  std::optional<double> expected_hours;
  // What placement minimises: "cost" (expected cost to complete; empty means this), "time"
  // (expected time to complete) or "price" (the hourly price).
  std::string objective;
  Lifecycle lifecycle;
  RuntimeContract runtime;  // empty: any software will do

  bool operator==(const JobSpec&) const = default;
};

// Parses and validates YAML. `filename` is used in errors: "job.yaml:3:9: resources.gpus:
// expected a non-negative integer, got -1". Unknown fields are errors, with a suggestion.
Result<JobSpec> ParseJobSpecYaml(std::string_view text, std::string_view filename);

// Parses and validates the JSON form the API accepts; errors name the field path.
Result<JobSpec> JobSpecFromJson(const Json& j);
// Absent optional fields (and a default `lifecycle`, an empty `runtime`) are left out.
Json ToJson(const JobSpec& spec);

// "900" (seconds), "90s", "30m", "1h", "1.5h", "2h30m": units h, m, s, each at most once and in
// that order; the total must be a whole number of seconds. No range check beyond overflow; the
// error names the expected form: `expected a duration such as 90s, 30m, 1h or 2h30m, got "1x"`.
Result<int64_t> ParseDurationSeconds(std::string_view text);

}  // namespace sluice::spec
