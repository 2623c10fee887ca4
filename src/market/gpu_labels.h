// GPU label registry v1: the names users and providers use for GPU models.
//
// A canonical label is `<model>-<memory>gb`, lowercase, e.g. a100-80gb, h100nvl-94gb, t4-16gb.
// The agent derives it from what NVML / nvidia-smi report; users may write a short form (`A100`)
// that covers several labels. The set of known labels comes from data/gpu_specs.csv (compiled
// in) plus product names observed in real nvidia-smi output; adding a model is a data change.
//
// Thread safety: all functions are safe to call concurrently (the registry is built once).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace sluice::market {

// The canonical label for a GPU as NVML reports it: `product_name` is nvmlDeviceGetName /
// nvidia-smi "Product Name", `memory_mib` the FB memory total. The memory figure comes from the
// product name when it has one ("A100-SXM4-80GB"), else memory_mib rounded to the nominal size
// (15360 MiB → 16, 46068 → 48). Form factor (SXM/PCIe) is not part of the label; NVL is, because
// it is a different card. A vGPU profile ("GRID P4-1Q") gets `<model>vgpu`.
std::string CanonicalGpuLabel(std::string_view product_name, uint64_t memory_mib);

// "sxm", "pcie", "nvl", or "" when the name does not say.
std::string FormFactor(std::string_view product_name);

struct LabelResolution {
  std::vector<std::string> labels;  // sorted canonical labels the text stands for
  std::string note;                 // set when a short form expanded, e.g. "a100 covers ..."
};

// What a user means by `user_text`: an exact label, a short form (`A100`, `nvidia a100`,
// `H100-80GB`), or a full product name. Unknown text → InvalidArgument with the nearest labels.
Result<LabelResolution> ResolveGpuLabel(std::string_view user_text);

// Every known canonical label, sorted.
std::vector<std::string> KnownGpuLabels();

// The known labels of the model(s) nearest to `label`'s model by edit distance ("rtx4095-24gb" →
// rtx4090-24gb), at most 6; empty when none is near enough to suggest.
std::vector<std::string> NearestGpuLabels(std::string_view label);

}  // namespace sluice::market
