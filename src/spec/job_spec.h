// JobSpec v1: what a user asks for, parsed from YAML (the CLI) or JSON (the API).
//
//   name: hello
//   resources: {gpu: a100-80gb | min_vram_gb: 40, gpus: 1, cpus: 2, memory_gb: 4}
//   run: python3 train.py
//   env: {KEY: value}
//   workdir: ./src        # a local directory the CLI packs and uploads
//   max_price_per_hour: 3.5
//   priority: 0
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/json.h"
#include "common/status.h"

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

struct JobSpec {
  std::string name;
  Resources resources;
  std::string run;  // a bash script
  std::map<std::string, std::string> env;
  std::string workdir;                       // as written; resolved against the spec's directory
  std::optional<double> max_price_per_hour;  // total for the job's allocation, in USD
  int priority = 0;                          // higher runs first

  bool operator==(const JobSpec&) const = default;
};

// Parses and validates YAML. `filename` is used in errors: "job.yaml:3:9: resources.gpus:
// expected a non-negative integer, got -1". Unknown fields are errors, with a suggestion.
Result<JobSpec> ParseJobSpecYaml(std::string_view text, std::string_view filename);

// Parses and validates the JSON form the API accepts; errors name the field path.
Result<JobSpec> JobSpecFromJson(const Json& j);
Json ToJson(const JobSpec& spec);

}  // namespace sluice::spec
