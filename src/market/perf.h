// Perf score: how fast a GPU model trains, relative to the reference GPU (a100-80gb = 1.0).
//
// The spec figure is dense (no sparsity) BF16 tensor TFLOPS, or FP16 for models without BF16
// (Volta, Turing), from data/gpu_specs.csv as compiled into the library. It ranks offers by
// expected time and cost (issue 3 item 5). A node's own GPUs are also measured (the agent's
// gpu-perf check); PerfFromTflops turns a measured figure into a score by the same rule, and the
// server decides which of the two an offer ranks by (docs/design-notes.md, "GPU speed").
//
// Thread safety: safe to call concurrently (the table is built once, on first use).
#pragma once

#include <string_view>

namespace sluice::market {

// The label every score is relative to.
inline constexpr std::string_view kPerfReferenceLabel = "a100-80gb";

// Dense BF16 (else FP16) TFLOPS of `gpu_label` over those of the reference GPU.
//
// One label can cover several cards with different figures (h100-80gb is both the SXM5 part and
// the slower PCIe card). `form_factor` ("sxm", "pcie", "nvl") picks the matching card when the
// caller knows it; otherwise the lowest figure is used, so a score never overstates a GPU.
//
// Unknown perf is 0 so it never wins a perf sort silently: a label the specs do not list, or a
// listed model without a citable TFLOPS figure (a10g, rtx3090, rtx4090 today), scores 0.
double PerfScore(std::string_view gpu_label, std::string_view form_factor = "");

// A model's spec figures, chosen as PerfScore chooses (the matching form factor, else the
// lowest); 0 where data/gpu_specs.csv has none.
struct SpecSpeed {
  double tensor_tflops = 0;  // dense BF16, else FP16, FP32 accumulate
  double mem_gb_s = 0;       // memory bandwidth, 10^9 bytes/s
};
SpecSpeed SpecSpeedOf(std::string_view gpu_label, std::string_view form_factor = "");

// A measured dense FP16/BF16 tensor TFLOPS figure as a perf score: tflops over the reference
// GPU's spec figure. 0 for 0 or less.
double PerfFromTflops(double tflops);

// The highest perf score any spec row gives: no GPU is ranked above it on a figure its own
// agent reported (a model without a spec figure ranks by what it measured).
double FastestSpecPerf();

}  // namespace sluice::market
