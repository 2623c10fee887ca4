// Body of `sluice probe`: shows a provider what the agent would publish about this machine,
// before they connect it to a server. The CLI wires flags to this function.
#pragma once

#include <ostream>
#include <string>

namespace sluice {

// from_nvidia_smi_file: when non-empty, GPUs come from this recorded `nvidia-smi -q [-x]`
// output instead of the live probe. json: print ToJson(inventory) pretty-printed, else a
// readable summary. Returns the process exit code: 0, or 1 when the file cannot be read or
// parsed (the reason, naming the file, goes to err).
int ProbeCommand(const std::string& from_nvidia_smi_file, bool json, std::ostream& out,
                 std::ostream& err);

}  // namespace sluice
