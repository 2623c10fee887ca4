// `sluice run --dry-run job.yaml`: everything a run would check, without submitting or uploading.
//   1. parses the spec (the same errors as `run`) and prints its environment fingerprint: the
//      runtime contract's canonical JSON and SHA-256 (spec/runtime_contract.h);
//   2. checks this machine against the contract with the agent's own probes (NVML, then
//      nvidia-smi, for the driver and its CUDA; python3 for Python and PyTorch), fact by fact;
//   3. asks the server (POST /v1/estimate) which offers satisfy the whole job, resources and
//      runtime, and prints them ranked, or the explanation of what rules each offer out.
// The exit code is 0 when some offer satisfies the job, 1 when none does or the server cannot
// be asked (1 and 2 are printed first either way), 2 for a spec error. This machine matching or
// not does not change it: the job runs on the market's nodes, not here.
#pragma once

#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/json.h"
#include "spec/runtime_contract.h"

namespace sluice::cli {

// The software facts of the machine the CLI runs on, as an agent here would report them.
struct LocalFacts {
  std::string gpu_source;                 // "nvml", "nvidia-smi" or "none" (no NVIDIA driver)
  std::vector<std::string> gpu_attempts;  // why each GPU source failed, for "none"
  std::string driver_version;             // empty without a driver
  std::string cuda_version;               // highest CUDA the driver supports
  std::vector<std::string> torch_builds;  // what python3 imports
  std::string python_version;             // python3 on PATH; empty without one
};

// Runs the probes; never fails (a fact that cannot be probed is left empty). Can take as long as
// importing torch does (the software probe bounds it at 30 s).
LocalFacts ProbeLocalFacts();

// One fact of the contract checked against this machine.
struct LocalCheck {
  spec::RuntimeFact fact;
  std::string wants;  // the contract's canonical text, "12.1"
  std::string term;   // the offer-query term it compiles to, "cuda>=12.1"
  std::string local;  // this machine's value, or "none (...)" saying why there is none
  bool ok = false;
};

// Pure: the contract's facts (those it sets, in contract order) judged by the same terms the
// server matches offers with, evaluated on an offer that holds `local`'s facts.
std::vector<LocalCheck> CheckLocal(const spec::RuntimeContract& contract, const LocalFacts& local);

Json ToJson(const LocalCheck& check);

int DryRunCommand(const GlobalFlags& g, const RunFlags& f);

}  // namespace sluice::cli
