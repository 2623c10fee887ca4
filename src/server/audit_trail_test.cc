#include "server/audit_trail.h"

#include <gtest/gtest.h>

namespace sluice::server {
namespace {

HttpRequest Req(std::string method, std::string path, std::string body = "") {
  HttpRequest r;
  r.method = std::move(method);
  r.path = std::move(path);
  r.body = std::move(body);
  r.remote_addr = "10.0.0.7:51234";
  return r;
}

TEST(AuditTrailTest, OnlyMutationsAreAudited) {
  EXPECT_TRUE(IsAuditedMutation(Req("POST", "/v1/jobs")));
  EXPECT_TRUE(IsAuditedMutation(Req("DELETE", "/v1/jobs/job-1")));
  EXPECT_TRUE(IsAuditedMutation(Req("PUT", "/v1/blobs/abc")));
  EXPECT_TRUE(IsAuditedMutation(Req("POST", "/v1/nodes/n/verify")));
  EXPECT_FALSE(IsAuditedMutation(Req("GET", "/v1/jobs")));
  EXPECT_FALSE(IsAuditedMutation(Req("POST", "/v1/estimate")));  // a question, not a change
  EXPECT_FALSE(IsAuditedMutation(Req("POST", "/v1/blobs/missing")));
  EXPECT_FALSE(IsAuditedMutation(Req("POST", "/v1/conformance/payload")));
}

TEST(AuditTrailTest, SecretsAndJobEnvironmentNeverReachTheLog) {
  Json spec{{"name", "train"},
            {"env", {{"WANDB_API_KEY", "k-123"}, {"EPOCHS", "3"}}},
            {"nested", {{"db_password", "hunter2"}, {"Authorization", "Bearer x"}}}};
  Json red = RedactSecrets(Json{{"spec", spec}, {"token", "t"}});
  EXPECT_EQ(red["token"], "[redacted]");
  EXPECT_EQ(red["spec"]["name"], "train");
  EXPECT_EQ(red["spec"]["env"]["EPOCHS"], "[redacted]");  // every env value: keys stay
  EXPECT_EQ(red["spec"]["env"]["WANDB_API_KEY"], "[redacted]");
  EXPECT_EQ(red["spec"]["nested"]["db_password"], "[redacted]");
  EXPECT_EQ(red["spec"]["nested"]["Authorization"], "[redacted]");
  std::string dumped = DumpJson(red);
  for (const char* secret : {"k-123", "hunter2", "Bearer x"}) {
    EXPECT_EQ(dumped.find(secret), std::string::npos) << secret;
  }
}

TEST(AuditTrailTest, EntryNamesActorSourceActionTargetAndOutcome) {
  HttpRequest submit = Req("POST", "/v1/jobs", R"({"spec":{"name":"a","env":{"K":"v"}}})");
  store::AuditEntry e =
      AuditEntryFor(submit, 201, R"({"job":{"id":"job-42","state":"queued"}})", "admin-1");
  EXPECT_EQ(e.actor, "admin-1");
  EXPECT_EQ(e.source, "10.0.0.7:51234");
  EXPECT_EQ(e.action, "POST /v1/jobs");
  EXPECT_EQ(e.target, "job-42");  // from the answer: the path names no job yet
  EXPECT_EQ(e.status, 201);
  EXPECT_EQ(e.params["body"]["spec"]["env"]["K"], "[redacted]");

  store::AuditEntry refused = AuditEntryFor(Req("DELETE", "/v1/jobs/job-7"), 409, "{}", "");
  EXPECT_EQ(refused.actor, "anonymous");
  EXPECT_EQ(refused.target, "job-7");
  EXPECT_EQ(refused.status, 409);

  // Bodies that are not small JSON are recorded by size (and blobs by their digest path).
  store::AuditEntry blob =
      AuditEntryFor(Req("PUT", "/v1/blobs/ab12", std::string(5000, 'x')), 201, "{}", "join-1");
  EXPECT_EQ(blob.target, "ab12");
  EXPECT_EQ(blob.params["body_bytes"], 5000);
  store::AuditEntry csv =
      AuditEntryFor(Req("POST", "/v1/catalogs", "a,b\n1,2\n"), 200, "{}", "admin-1");
  EXPECT_EQ(csv.params["body_bytes"], 8);
  EXPECT_EQ(csv.params["body_sha256"].get<std::string>().size(), 64u);
}

TEST(AuditTrailTest, CsvQuotesFieldsThatNeedIt) {
  store::AuditEntry e;
  e.id = 3;
  e.ts_ms = 1000;
  e.actor = "admin-1";
  e.source = "127.0.0.1:1";
  e.action = "POST /v1/jobs";
  e.target = "job-1";
  e.params = Json{{"cause", "a \"quoted\", comma"}};
  e.status = 201;
  EXPECT_EQ(AuditCsvLine(e),
            "3,1000,admin-1,127.0.0.1:1,POST /v1/jobs,job-1,201,"
            "\"{\"\"cause\"\":\"\"a \\\"\"quoted\\\"\", comma\"\"}\"");
  EXPECT_EQ(AuditCsvHeader(), "id,ts_ms,actor,source,action,target,status,params");
}

}  // namespace
}  // namespace sluice::server
