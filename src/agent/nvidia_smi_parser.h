// Parsers for `nvidia-smi -q -x` (XML) and `nvidia-smi -q` (text). Pure functions: no I/O.
//
// The input comes from a provider's machine and is untrusted: any malformed, truncated or
// oversized input yields InvalidArgument with a message that says what was wrong and where,
// never a crash or an exception.
#pragma once

#include <string_view>

#include "agent/probe.h"
#include "common/status.h"

namespace sluice {

// Inputs larger than this are rejected: real outputs are ~20 KiB per GPU.
inline constexpr size_t kMaxNvidiaSmiBytes = 16 << 20;

// `nvidia-smi -q -x`. GPUs are the <gpu> children of <nvidia_smi_log>, in document order.
Result<ProbedGpus> ParseNvidiaSmiXml(std::string_view xml);

// `nvidia-smi -q`. Requires the "NVSMI LOG" banner; when "Attached GPUs" is present the number
// of GPU sections must match it (the only way to notice a cut at a GPU boundary).
Result<ProbedGpus> ParseNvidiaSmiText(std::string_view text);

// Picks the XML parser when the first non-blank character is '<', the text parser otherwise.
Result<ProbedGpus> ParseNvidiaSmi(std::string_view output);

}  // namespace sluice
