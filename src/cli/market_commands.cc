#include <cstdio>
#include <iostream>

#include "cli/api_client.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "common/clock.h"

namespace sluice::cli {
namespace {

int Fail(const Status& s) {
  std::fprintf(stderr, "sluice: %s\n", s.message().c_str());
  return 1;
}

Result<Json> Fetch(const GlobalFlags& g, const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(ClientConfig cfg, ResolveClientConfig(g.server, g.token));
  SLUICE_ASSIGN_OR_RETURN(auto api, ApiClient::Create(cfg));
  return api->Get(path);
}

std::string Gb(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

}  // namespace

int OffersCommand(const GlobalFlags& g) {
  auto resp = Fetch(g, "/v1/offers");
  if (!resp.ok()) return Fail(resp.status());
  if (g.json) {
    std::cout << DumpJson((*resp)["offers"], 2) << "\n";
    return 0;
  }
  Table t({"NODE", "GPU", "GPUS FREE", "VRAM GB", "CPUS FREE", "MEM GB FREE", "PRICE", "DRIVER",
           "CUDA", "REGION"});
  for (const auto& o : (*resp)["offers"]) {
    std::string gpu = o.value("gpu", "");
    bool cpu_only = gpu.empty();
    std::string price = cpu_only ? Dollars(o.value("price_per_cpu_hour", 0.0)) + "/CPU-h"
                                 : Dollars(o.value("price_per_gpu_hour", 0.0)) + "/GPU-h";
    t.Add({o.value("node_name", ""), cpu_only ? "(cpu only)" : gpu,
           cpu_only ? "-"
                    : std::to_string(o.value("gpus_free", 0)) + "/" +
                          std::to_string(o.value("gpus_total", 0)),
           cpu_only ? "-" : Gb(o.value("vram_gb", 0.0)), std::to_string(o.value("cpus_free", 0)),
           Gb(o.value("memory_free_gb", 0.0)), price,
           o.value("driver_version", "").empty() ? "-" : o.value("driver_version", ""),
           o.value("cuda_version", "").empty() ? "-" : o.value("cuda_version", ""),
           o.value("region", "").empty() ? "-" : o.value("region", "")});
  }
  if (t.empty()) {
    std::cout << "no offers: no agent is connected (start one with `sluice agent`)\n";
    return 0;
  }
  t.Print(std::cout);
  return 0;
}

int NodesCommand(const GlobalFlags& g) {
  auto resp = Fetch(g, "/v1/nodes");
  if (!resp.ok()) return Fail(resp.status());
  if (g.json) {
    std::cout << DumpJson((*resp)["nodes"], 2) << "\n";
    return 0;
  }
  Table t({"ID", "NAME", "STATE", "GPUS", "CPUS", "MEMORY GB", "RUNNING", "LAST SEEN"});
  int64_t now = RealClock::Get()->NowMillis();
  for (const auto& n : (*resp)["nodes"]) {
    const Json& inv = n["inventory"];
    std::string gpus = "0";
    if (inv.is_object() && inv.contains("gpus") && inv["gpus"].is_array() && !inv["gpus"].empty()) {
      gpus = std::to_string(n.value("gpus_free", 0)) + "/" + std::to_string(inv["gpus"].size()) +
             " " + inv["gpus"][0].value("name", "");
    }
    int cores = inv.is_object() ? inv.value("cpu_cores", 0) : 0;
    double mem = inv.is_object() ? inv.value("memory_mib", 0.0) / 1024.0 : 0;
    std::string state = n.value("state", "");
    t.Add({n.value("id", ""), n.value("name", ""), state, gpus,
           std::to_string(n.value("cpus_free", 0)) + "/" + std::to_string(cores),
           Gb(n.value("memory_free_gb", 0.0)) + "/" + Gb(mem),
           std::to_string(n.value("running_attempts", 0)),
           state == "online" ? "now"
                             : HumanDuration(now - n.value("last_seen_ms", int64_t{0})) + " ago"});
  }
  if (t.empty()) {
    std::cout << "no nodes registered (start one with `sluice agent`)\n";
    return 0;
  }
  t.Print(std::cout);
  return 0;
}

}  // namespace sluice::cli
