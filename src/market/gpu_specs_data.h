// The text of data/gpu_specs.csv, compiled in at build time (see CMakeLists.txt).
#pragma once

#include <string_view>

namespace sluice::market {

extern const std::string_view kGpuSpecsCsv;

}  // namespace sluice::market
