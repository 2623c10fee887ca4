#include "common/conformance.h"

#include <gtest/gtest.h>

namespace sluice::conformance {
namespace {

Report Sample() {
  Report r;
  r.trigger = "schedule";
  r.started_ms = 1'700'000'000'123;
  r.duration_ms = 4567;
  Check disk;
  disk.name = "disk";
  disk.outcome = Outcome::kPass;
  disk.measurements = {{"write_mib_s", 812.25}, {"fsync_ms", 3.5}, {"free_mib", 1048576}};
  disk.reason = "64 MiB in /var/lib/sluice-agent";
  Check gpu;
  gpu.name = "gpu-compute.1";
  gpu.outcome = Outcome::kFail;
  gpu.measurements = {{"elements", 16777216}, {"mismatches", 1}};
  gpu.reason = "1 of 16777216 results wrong";
  Check skip;
  skip.name = "gpu";
  skip.outcome = Outcome::kSkip;
  skip.reason = "no GPU on this host";
  r.checks = {disk, gpu, skip};
  return r;
}

std::string ErrorOf(const Json& j) {
  auto r = ReportFromJson(j);
  return r.ok() ? "ok" : r.status().message();
}

TEST(ConformanceReportTest, RoundTripsThroughJsonText) {
  Report r = Sample();
  auto parsed = ParseJson(DumpJson(ToJson(r)));
  ASSERT_TRUE(parsed.ok());
  auto back = ReportFromJson(*parsed);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, r);
  EXPECT_EQ(back->Find("gpu-compute.1")->outcome, Outcome::kFail);
  EXPECT_EQ(back->Find("nope"), nullptr);
}

TEST(ConformanceReportTest, OutcomeNamesRoundTrip) {
  for (Outcome o : {Outcome::kPass, Outcome::kFail, Outcome::kSkip}) {
    auto back = OutcomeFromName(Name(o));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, o);
  }
  EXPECT_FALSE(OutcomeFromName("PASS").ok());
}

TEST(ConformanceReportTest, WrongTypesNameTheField) {
  Json j = ToJson(Sample());
  j["checks"][0]["measurements"]["write_mib_s"] = "fast";
  EXPECT_EQ(ErrorOf(j), "report.checks[0].measurements.write_mib_s: expected a finite number");

  j = ToJson(Sample());
  j["checks"][1]["outcome"] = "maybe";
  EXPECT_EQ(ErrorOf(j), "report.checks[1].outcome: expected pass, fail or skip, got `maybe`");

  j = ToJson(Sample());
  j["checks"][2]["name"] = 7;
  EXPECT_EQ(ErrorOf(j).rfind("report.checks[2].name", 0), 0u) << ErrorOf(j);

  j = ToJson(Sample());
  j["checks"][2]["name"] = "";
  EXPECT_EQ(ErrorOf(j), "report.checks[2].name: 1 to 64 characters");

  j = ToJson(Sample());
  j["started_ms"] = "yesterday";
  EXPECT_EQ(ErrorOf(j).rfind("report.started_ms", 0), 0u) << ErrorOf(j);

  j = ToJson(Sample());
  j["checks"][0]["measurements"] = Json::array();
  EXPECT_EQ(ErrorOf(j), "report.checks[0].measurements: expected an object of numbers");

  j = ToJson(Sample());
  j.erase("checks");
  EXPECT_EQ(ErrorOf(j), "report.checks: expected an array");

  EXPECT_EQ(ErrorOf(Json::array()), "report: expected an object");
  EXPECT_EQ(ReportFromJson(Json::array(), "body").status().message(), "body: expected an object");
}

TEST(ConformanceReportTest, RefusesTooManyChecksOrMeasurements) {
  Json j = ToJson(Sample());
  for (int i = 0; i < 65; ++i) j["checks"][0]["measurements"]["m" + std::to_string(i)] = i;
  EXPECT_EQ(ErrorOf(j), "report.checks[0].measurements: more than 64 measurements");

  j = ToJson(Sample());
  Json one = j["checks"][2];
  j["checks"] = Json::array();
  for (int i = 0; i < 257; ++i) j["checks"].push_back(one);
  EXPECT_EQ(ErrorOf(j), "report.checks: more than 256 checks");
}

TEST(ConformanceReportTest, FormatsOneLinePerCheck) {
  std::string text = FormatReport(Sample());
  EXPECT_NE(text.find("PASS disk"), std::string::npos) << text;
  EXPECT_NE(text.find("FAIL gpu-compute.1"), std::string::npos) << text;
  EXPECT_NE(text.find("SKIP gpu - no GPU on this host\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace sluice::conformance
