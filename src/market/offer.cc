#include "market/offer.h"

#include <algorithm>
#include <cmath>

namespace sluice::market {

double HealthScore(double latency_ms, double failure_rate, double price_premium) {
  // A NaN input means a broken measurement; rank such an offer last rather than let NaN
  // poison every comparison that sorts by health.
  if (std::isnan(latency_ms) || std::isnan(failure_rate) || std::isnan(price_premium)) return 0;
  const double score =
      100.0 - 0.1 * latency_ms - 5.0 * (failure_rate * 100.0) - 2.0 * (price_premium * 100.0);
  return std::clamp(score, 0.0, 100.0);
}

std::string_view Name(OfferSource s) {
  switch (s) {
    case OfferSource::kAgent:
      return "agent";
    case OfferSource::kCatalog:
      return "catalog";
  }
  return "agent";
}

std::string_view Name(VerifiedState s) {
  switch (s) {
    case VerifiedState::kVerified:
      return "verified";
    case VerifiedState::kUnverified:
      return "unverified";
    case VerifiedState::kDeverified:
      return "deverified";
  }
  return "unverified";
}

Json ToJson(const Offer& o) {
  Json j = Json::object();
  j["id"] = o.id;
  j["provider"] = o.provider;
  j["node"] = o.node;
  j["region"] = o.region;
  j["zone"] = o.zone;
  j["gpu_label"] = o.gpu_label;
  j["gpu_model"] = o.gpu_model;
  j["gpus"] = o.gpus;
  j["gpus_available"] = o.gpus_available;
  j["vram_gb"] = o.vram_gb;
  j["form_factor"] = o.form_factor;
  j["interconnect"] = o.interconnect;
  j["compute_capability"] = o.compute_capability;
  j["driver_version"] = o.driver_version;
  j["cuda_version"] = o.cuda_version;
  j["toolkits"] = o.toolkits;
  j["torch_builds"] = o.torch_builds;
  j["python_version"] = o.python_version;
  j["sandbox"] = o.sandbox;
  j["cpus"] = o.cpus;
  j["memory_gb"] = o.memory_gb;
  j["disk_gb"] = o.disk_gb;
  j["price_per_gpu_hour"] = o.price_per_gpu_hour;
  j["interruptible_price_per_gpu_hour"] = o.interruptible_price_per_gpu_hour;
  j["price_per_cpu_hour"] = o.price_per_cpu_hour;
  j["interruptible_price_per_cpu_hour"] = o.interruptible_price_per_cpu_hour;
  if (o.interruptions_per_hour >= 0) {
    j["interruptions_per_hour"] = o.interruptions_per_hour;
  } else {
    j["interruptions_per_hour"] = nullptr;
  }
  j["reliability"] = o.reliability;
  j["latency_ms"] = o.latency_ms;
  j["failure_rate"] = o.failure_rate;
  j["health_score"] = o.health_score;
  j["perf_score"] = o.perf_score;
  j["spec_perf"] = o.spec_perf;
  if (o.measured_perf > 0) {
    j["measured_perf"] = o.measured_perf;
  } else {
    j["measured_perf"] = nullptr;
  }
  j["perf_flag"] = o.perf_flag;
  j["verified"] = std::string(Name(o.verified));
  j["source"] = std::string(Name(o.source));
  return j;
}

}  // namespace sluice::market
