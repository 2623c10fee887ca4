// Offer: what a node (source "agent") or a cloud price catalog entry (source "catalog") sells:
// N GPUs of one model on one machine type, its runtime, its prices and its track record. The
// fields are exactly what users filter and rank on (issue 3); the market index keeps them
// in memory, the store is the source of truth.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/json.h"

namespace sluice::market {

enum class OfferSource { kAgent, kCatalog };
enum class VerifiedState { kVerified, kUnverified, kDeverified };

struct Offer {
  std::string id;         // "<provider>/<node or instance>/<label>" unique per offer
  std::string provider;   // "aws", "lambda", or the provider name of an agent node
  std::string node;       // node id for agents; instance type for catalogs
  std::string node_name;  // the name `sluice nodes` shows (agents); `node=` matches it too
  std::string region;     // "us-east-1"; free text for some catalogs
  std::string zone;
  std::string gpu_label;                  // canonical label, e.g. "a100-80gb"; empty = CPU only
  std::string gpu_model;                  // model part of the label, e.g. "a100"
  int gpus = 0;                           // GPUs in this offer (per instance for catalogs)
  int gpus_available = 0;                 // free now (catalogs: == gpus)
  double vram_gb = 0;                     // per GPU
  std::string form_factor;                // "sxm", "pcie", "nvl", ""
  std::string interconnect;               // "nvlink", "pcie", ""
  std::string compute_capability;         // "8.0"
  std::string driver_version;             // "550.54.15"
  std::string cuda_version;               // highest CUDA the driver supports, "12.4"
  std::vector<std::string> toolkits;      // installed CUDA toolkits, "12.1"
  std::vector<std::string> torch_builds;  // "2.1.0+cu121"
  std::string python_version;             // the node's python3, "3.10.12"; empty = unknown
  int cpus = 0;
  double memory_gb = 0;
  double disk_gb = 0;
  double price_per_gpu_hour = 0;                // on-demand, USD
  double interruptible_price_per_gpu_hour = 0;  // 0 = not offered
  double price_per_cpu_hour = 0;  // agents: what a CPU-only job pays per CPU; 0 = not sold by CPU
  double interruptible_price_per_cpu_hour = 0;  // the same on interruptible capacity; 0 = none
  // Interruptions per hour observed on this offer's interruptible capacity; < 0 = no history
  // (the cost model then uses its prior, and says so).
  double interruptions_per_hour = -1;
  double reliability = 1.0;  // 0..1, share of the window the node was usable
  double latency_ms = 0;     // link latency to the server (catalogs: 0 = unknown)
  // How an agent boxes jobs: "bwrap"; "bwrap-open-network" when the jobs' network filter could
  // not be installed (they can reach the cloud metadata address); or "none" when its provider
  // started it --no-sandbox (jobs there can read what the agent can); empty for catalogs and
  // older agents.
  std::string sandbox;
  double failure_rate = 0;    // 0..1 start failures / preemptions share
  double health_score = 100;  // see HealthScore()
  double perf_score = 1.0;    // throughput relative to the reference GPU (a100-80gb = 1)
  // For agents' GPUs, the two figures perf_score was chosen from (docs/design-notes.md, "GPU
  // speed"): the model's spec, and what the node's slowest GPU of this label measured in its
  // last verification (0 = not measured). perf_flag says why the measured figure ranks the
  // offer ("measures 31% of the h100-80gb spec (...)"), "" when the spec does.
  double spec_perf = 0;
  double measured_perf = 0;
  std::string perf_flag;
  VerifiedState verified = VerifiedState::kUnverified;
  OfferSource source = OfferSource::kAgent;

  bool operator==(const Offer&) const = default;
};

// The seed formula: 100 − 0.1·latency_ms − 5·failure_rate% − 2·price_premium%, capped to
// [0, 100]. `price_premium` is the share above the cheapest comparable offer (0.2 = 20 %).
double HealthScore(double latency_ms, double failure_rate, double price_premium);

std::string_view Name(OfferSource s);    // "agent" | "catalog"
std::string_view Name(VerifiedState s);  // "verified" | "unverified" | "deverified"

Json ToJson(const Offer& offer);

}  // namespace sluice::market
