// Which CUDA a driver can run, and which PyTorch builds a machine can use (issue 5 item 2). Pure
// functions over two tables compiled into the binary at build time from data/ (SOURCES.md §3, §4):
//   cuda_driver_compat.csv  NVIDIA's toolkit → minimum Linux x86_64 driver, plus the minimum for
//                           CUDA minor-version compatibility within the toolkit's major family.
//   torch_cuda_builds.csv   PyTorch's release compatibility matrix: which CUDA variants (cu121)
//                           each torch release was published for.
//
// Minor-version compatibility policy: a driver older than a toolkit's own minimum, but at least
// the minor-compat minimum of its major family (525.60.13 for 12.x), runs that toolkit's
// binaries with a limited feature set (NVIDIA: no PTX JIT of newer code, no features that need
// the newer driver). DriverSupportsCuda reports that as ok with `minor_compat_only` set and says
// so in the reason: PyTorch wheels and most prebuilt binaries ship SASS and rely on exactly this.
// Callers that need the driver's native support (the driver's own reported CUDA version in
// audit/verification.h) reject minor_compat_only.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace sluice::audit {

// The embedded CSV files, verbatim (generated from data/ by facts.cmake).
extern const std::string_view kCudaDriverCompatCsv;
extern const std::string_view kTorchCudaBuildsCsv;

// One row of cuda_driver_compat.csv, the ">=" stripped.
struct CudaDriverRow {
  std::string toolkit;                  // "12.2.0" (GA is .0, "Update 1" is .1)
  std::string min_driver;               // "535.54.03"
  std::string min_driver_minor_compat;  // "525.60.13", or a branch only: "580"
  std::string label;                    // as NVIDIA names it: "CUDA 12.2 GA"
};

// One row of torch_cuda_builds.csv.
struct TorchBuildRow {
  std::string torch_version;  // "2.1" (release, major.minor)
  std::string cuda_variant;   // "cu121"
  std::string cuda_version;   // "12.1"
  std::string matrix_column;  // "stable" | "experimental"
};

// The parsed tables, in file order. Parsed once; the build fails its tests if the files are bad.
const std::vector<CudaDriverRow>& CudaDriverTable();
const std::vector<TorchBuildRow>& TorchBuildTable();

// Numeric dotted-version comparison ("535.104.05" > "535.86.09"; missing parts are 0, so
// "580" == "580.0.0"): <0, 0, >0.
int CompareDottedVersions(std::string_view a, std::string_view b);
// True for 1 to 4 dot-separated runs of 1 to 6 digits ("535.104.05", "12.1", "580").
bool IsDottedVersion(std::string_view v);

// The row that says what `cuda` needs from the driver (min_driver, and min_driver_minor_compat):
// for "12.1" (major.minor, what probes report) the release's lowest row, its GA: the lowest
// driver any 12.1.x toolkit runs on natively (later updates that need more are still covered by
// minor-version compatibility); for "12.2.2" that exact row. NotFound ("CUDA 12.7 is not in the
// table") for a version the table does not list; InvalidArgument for a non-version.
Result<CudaDriverRow> MinimumDriverFor(std::string_view cuda);

struct CompatVerdict {
  bool ok = false;
  // ok only through CUDA minor-version compatibility (see the policy above).
  bool minor_compat_only = false;
  // The table had an answer. False for a CUDA version (or build) it does not list, and for
  // inputs that are not versions: the verdict is then not ok, but it is "cannot tell", not
  // "known bad".
  bool known = false;
  // TorchBuildRuns: the torch release / CUDA variant pair is not in torch_cuda_builds.csv (the
  // verdict is then by CUDA alone, and the reason says so).
  bool unlisted_build = false;
  // One human line citing the table row, e.g. "CUDA 12.2 needs driver >= 535.54.03 (CUDA 12.2
  // GA); driver is 535.104.05".
  std::string reason;
};

// Whether `driver` ("535.104.05") runs code built for `cuda` ("12.2" or "12.2.2").
CompatVerdict DriverSupportsCuda(std::string_view driver, std::string_view cuda);

// The CUDA version a torch build tag names: "2.1.0+cu121" → "12.1", "1.13.1+cu117" → "11.7",
// "2.9.0+cu130" → "13.0". Empty for no tag, "+cpu", or any other tag.
std::string TorchCudaVersion(std::string_view torch);

// Whether a torch build (torch.__version__: "2.1.0+cu121") runs with `driver`:
//  - "+cpu", or no local tag at all: a CPU build, ok with reason "CPU build" whatever the driver.
//    (Caveat: PyPI's Linux wheels are CUDA builds without a tag; torch.__version__ cannot tell
//    them apart, so they are judged as what they say.)
//  - "+cuXYZ": the driver must support CUDA X.Y (DriverSupportsCuda). A torch release / variant
//    pair missing from torch_cuda_builds.csv is noted in the reason but judged by CUDA alone.
//  - any other tag ("+rocm5.6", "+git1234"): not ok, known = false: it names no CUDA version.
CompatVerdict TorchBuildRuns(std::string_view torch, std::string_view driver);

}  // namespace sluice::audit
