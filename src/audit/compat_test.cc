#include "audit/compat.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/text.h"

namespace sluice::audit {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// The version just below `v` ("535.54.03" → "535.54.2", "570.26" → "570.25", "580" → "579"):
// one patch below a table minimum must fail where the minimum itself passes.
std::string OneBelow(const std::string& v) {
  std::vector<std::string> parts = Split(v, '.');
  for (size_t i = parts.size(); i-- > 0;) {
    int n = std::stoi(parts[i]);
    if (n > 0) {
      parts[i] = std::to_string(n - 1);
      for (size_t k = i + 1; k < parts.size(); ++k) parts[k] = "999";
      break;
    }
  }
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ".") + p;
  return out;
}

// The raw CSV rows, split here independently of compat.cc (no quoted fields in the driver table).
std::vector<std::vector<std::string>> RawDriverRows() {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> lines = Split(kCudaDriverCompatCsv, '\n');
  for (size_t i = 1; i < lines.size(); ++i) {
    if (Trim(lines[i]).empty()) continue;
    rows.push_back(Split(lines[i], ','));
  }
  return rows;
}

TEST(CompatTableTest, BothTablesAreEmbeddedAndParse) {
  EXPECT_EQ(CudaDriverTable().size(), 53u);  // data/SOURCES.md §3
  EXPECT_EQ(TorchBuildTable().size(), 28u);  // data/SOURCES.md §4
  for (const CudaDriverRow& r : CudaDriverTable()) {
    EXPECT_TRUE(IsDottedVersion(r.toolkit)) << r.toolkit;
    EXPECT_EQ(Split(r.toolkit, '.').size(), 3u) << r.toolkit;
    EXPECT_TRUE(IsDottedVersion(r.min_driver)) << r.toolkit << " " << r.min_driver;
    EXPECT_TRUE(IsDottedVersion(r.min_driver_minor_compat)) << r.toolkit;
    EXPECT_THAT(r.label, StartsWith("CUDA ")) << r.toolkit;
  }
  for (const TorchBuildRow& r : TorchBuildTable()) {
    // Every CUDA a torch build names is in the driver table, and its tag spells it.
    EXPECT_TRUE(MinimumDriverFor(r.cuda_version).ok()) << r.torch_version << " " << r.cuda_version;
    EXPECT_EQ(TorchCudaVersion(r.torch_version + ".0+" + r.cuda_variant), r.cuda_version);
    EXPECT_TRUE(r.matrix_column == "stable" || r.matrix_column == "experimental");
  }
}

TEST(CompatVersionTest, DottedVersionsCompareNumerically) {
  EXPECT_GT(CompareDottedVersions("535.104.05", "535.86.09"), 0);
  EXPECT_LT(CompareDottedVersions("570.26", "570.124.06"), 0);
  EXPECT_EQ(CompareDottedVersions("580", "580.0.0"), 0);
  EXPECT_GT(CompareDottedVersions("580.65.06", "580"), 0);
  EXPECT_EQ(CompareDottedVersions("12.01", "12.1"), 0);
  EXPECT_GT(CompareDottedVersions("12.10", "12.9"), 0);
  EXPECT_TRUE(IsDottedVersion("535.104.05"));
  EXPECT_TRUE(IsDottedVersion("580"));
  EXPECT_FALSE(IsDottedVersion(""));
  EXPECT_FALSE(IsDottedVersion("535..05"));
  EXPECT_FALSE(IsDottedVersion("535.104.05-beta"));
  EXPECT_FALSE(IsDottedVersion("1.2.3.4.5"));
}

TEST(CompatDriverTest, EveryRowPassesAtItsMinimumAndNotOnePatchBelow) {
  std::vector<std::vector<std::string>> raw = RawDriverRows();
  ASSERT_EQ(raw.size(), CudaDriverTable().size());
  for (const auto& f : raw) {
    ASSERT_GE(f.size(), 3u);
    std::string toolkit = f[0];
    std::string min = f[1].substr(2);     // ">=535.54.03"
    std::string compat = f[2].substr(2);  // ">=525.60.13"
    SCOPED_TRACE(toolkit + " min " + min + " compat " + compat);

    CompatVerdict at = DriverSupportsCuda(min, toolkit);
    EXPECT_TRUE(at.ok) << at.reason;
    EXPECT_TRUE(at.known);
    EXPECT_FALSE(at.minor_compat_only) << at.reason;
    EXPECT_THAT(at.reason, HasSubstr("needs driver >= " + min));

    std::string below = OneBelow(min);
    CompatVerdict b = DriverSupportsCuda(below, toolkit);
    EXPECT_TRUE(b.known);
    if (CompareDottedVersions(below, compat) >= 0) {
      // Within the family's minor-version compatibility: ok, but only that way, and said so.
      EXPECT_TRUE(b.ok) << b.reason;
      EXPECT_TRUE(b.minor_compat_only) << b.reason;
      EXPECT_THAT(b.reason, HasSubstr("minor-version compatibility"));
    } else {
      EXPECT_FALSE(b.ok) << b.reason;  // 11.0.x: its GA driver predates 11.x minor compat
    }
    // Below the minor-compat minimum only the row's own minimum can help (11.0.x's is lower).
    CompatVerdict under = DriverSupportsCuda(OneBelow(compat), toolkit);
    EXPECT_EQ(under.ok, CompareDottedVersions(OneBelow(compat), min) >= 0) << under.reason;
    EXPECT_FALSE(under.minor_compat_only) << under.reason;
    EXPECT_TRUE(under.known);
  }
}

TEST(CompatDriverTest, MajorMinorMeansTheReleaseGaRow) {
  auto r121 = MinimumDriverFor("12.1");
  ASSERT_TRUE(r121.ok());
  EXPECT_EQ(r121->toolkit, "12.1.0");
  EXPECT_EQ(r121->min_driver, "530.30.02");
  EXPECT_EQ(r121->min_driver_minor_compat, "525.60.13");
  auto r122 = MinimumDriverFor("12.2");
  ASSERT_TRUE(r122.ok());
  EXPECT_EQ(r122->min_driver, "535.54.03");  // not 12.2 Update 2's 535.104.05
  EXPECT_EQ(r122->label, "CUDA 12.2 GA");
  auto exact = MinimumDriverFor("12.2.2");
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact->min_driver, "535.104.05");
  auto r130 = MinimumDriverFor("13.0");
  ASSERT_TRUE(r130.ok());
  EXPECT_EQ(r130->min_driver_minor_compat, "580");

  EXPECT_EQ(MinimumDriverFor("12.7").status().code(), StatusCode::kNotFound);  // never released
  EXPECT_EQ(MinimumDriverFor("12.2.9").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(MinimumDriverFor("twelve").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MinimumDriverFor("12").status().code(), StatusCode::kInvalidArgument);
}

TEST(CompatDriverTest, RealWorldCombinations) {
  CompatVerdict v = DriverSupportsCuda("535.104.05", "12.2");
  EXPECT_TRUE(v.ok);
  EXPECT_FALSE(v.minor_compat_only);
  EXPECT_EQ(v.reason, "CUDA 12.2 needs driver >= 535.54.03 (CUDA 12.2 GA); driver is 535.104.05");

  // A 525 data-center driver with a CUDA 12.2 application: minor-version compatibility.
  v = DriverSupportsCuda("525.147.05", "12.2");
  EXPECT_TRUE(v.ok);
  EXPECT_TRUE(v.minor_compat_only);
  EXPECT_THAT(v.reason, HasSubstr(">= 525.60.13 for CUDA 12.x"));

  // Newer drivers run older CUDA (backward compatibility).
  EXPECT_TRUE(DriverSupportsCuda("550.54.15", "11.8").ok);
  EXPECT_TRUE(DriverSupportsCuda("590.44.01", "11.0").ok);

  // An old 470 driver cannot run CUDA 12 at all; a 575 driver cannot run CUDA 13.
  v = DriverSupportsCuda("470.256.02", "12.1");
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.reason,
            "CUDA 12.1 needs driver >= 530.30.02 (CUDA 12.1 GA), or >= 525.60.13 for CUDA 12.x "
            "through minor-version compatibility; driver is 470.256.02");
  EXPECT_FALSE(DriverSupportsCuda("575.57.08", "13.0").ok);

  v = DriverSupportsCuda("565.57.01", "12.7");
  EXPECT_FALSE(v.ok);
  EXPECT_FALSE(v.known);
  EXPECT_THAT(v.reason, HasSubstr("not in the table"));

  v = DriverSupportsCuda("", "12.1");
  EXPECT_FALSE(v.ok);
  EXPECT_TRUE(v.known);
  EXPECT_THAT(v.reason, HasSubstr("no NVIDIA driver"));

  v = DriverSupportsCuda("latest", "12.1");
  EXPECT_FALSE(v.ok);
  EXPECT_FALSE(v.known);
}

TEST(CompatTorchTest, CudaVersionFromTheBuildTag) {
  EXPECT_EQ(TorchCudaVersion("2.1.0+cu121"), "12.1");
  EXPECT_EQ(TorchCudaVersion("1.13.1+cu117"), "11.7");
  EXPECT_EQ(TorchCudaVersion("2.9.0+cu130"), "13.0");
  EXPECT_EQ(TorchCudaVersion("1.4.0+cu92"), "9.2");
  EXPECT_EQ(TorchCudaVersion("1.12.1+cu102"), "10.2");
  EXPECT_EQ(TorchCudaVersion("2.1.0+cpu"), "");
  EXPECT_EQ(TorchCudaVersion("2.1.0"), "");
  EXPECT_EQ(TorchCudaVersion("2.1.0+rocm5.6"), "");
  EXPECT_EQ(TorchCudaVersion("2.1.0+cuda"), "");
  EXPECT_EQ(TorchCudaVersion("2.1.0+cu1"), "");
}

TEST(CompatTorchTest, EveryMatrixRowRunsAtItsCudaMinimum) {
  for (const TorchBuildRow& r : TorchBuildTable()) {
    std::string build = r.torch_version + ".0+" + r.cuda_variant;
    SCOPED_TRACE(build);
    auto req = MinimumDriverFor(r.cuda_version);
    ASSERT_TRUE(req.ok());
    CompatVerdict ok = TorchBuildRuns(build, req->min_driver);
    EXPECT_TRUE(ok.ok) << ok.reason;
    EXPECT_FALSE(ok.unlisted_build) << ok.reason;
    EXPECT_THAT(ok.reason, HasSubstr("CUDA " + r.cuda_version));
    CompatVerdict bad = TorchBuildRuns(build, OneBelow(req->min_driver_minor_compat));
    EXPECT_FALSE(bad.ok) << bad.reason;
  }
}

TEST(CompatTorchTest, RealWorldBuilds) {
  CompatVerdict v = TorchBuildRuns("2.1.0+cu121", "535.104.05");
  EXPECT_TRUE(v.ok) << v.reason;
  EXPECT_EQ(v.reason,
            "torch 2.1.0+cu121 (CUDA 12.1): CUDA 12.1 needs driver >= 530.30.02 (CUDA 12.1 GA); "
            "driver is 535.104.05");
  EXPECT_FALSE(TorchBuildRuns("2.1.0+cu121", "520.61.05").ok);  // an 11.8 driver
  v = TorchBuildRuns("2.1.0+cu121", "525.60.13");
  EXPECT_TRUE(v.ok);
  EXPECT_TRUE(v.minor_compat_only);

  v = TorchBuildRuns("2.1.0+cpu", "");
  EXPECT_TRUE(v.ok);
  EXPECT_EQ(v.reason, "torch 2.1.0+cpu: CPU build");
  EXPECT_TRUE(TorchBuildRuns("2.0.1", "").ok);

  // 2.1 was never published for cu117: noted, judged by CUDA 11.7 alone.
  v = TorchBuildRuns("2.1.2+cu117", "515.43.04");
  EXPECT_TRUE(v.ok) << v.reason;
  EXPECT_TRUE(v.unlisted_build);
  EXPECT_THAT(v.reason, HasSubstr("not in PyTorch's release matrix"));

  v = TorchBuildRuns("2.9.0+cu130", "570.124.06");
  EXPECT_FALSE(v.ok);
  EXPECT_THAT(v.reason, HasSubstr(">= 580 for CUDA 13.x"));

  v = TorchBuildRuns("2.1.0+rocm5.6", "535.104.05");
  EXPECT_FALSE(v.ok);
  EXPECT_FALSE(v.known);
  EXPECT_THAT(v.reason, HasSubstr("names no CUDA version"));
}

}  // namespace
}  // namespace sluice::audit
