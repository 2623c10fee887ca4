// Abuse limits and submission idempotency (issue 10 items 3 and 5), against a real HTTP server on
// loopback: refused requests are counted and rate-limited, never stored; a log flood stops at
// its quota; a submission retried with its Idempotency-Key yields one job.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "net/net_test_util.h"
#include "server/api_test_world.h"
#include "server/upload_gc.h"

namespace sluice::server {
namespace {

using testing::World;

TEST(ApiLimitsTest, TenThousandRefusedRequestsCostACounterNotTheDatabase) {
  World w;
  w.Build();
  if (::testing::Test::HasFatalFailure()) return;
  const uint64_t db_before = w.DbBytes();
  HttpClient anonymous(w.BaseUrl(), "", std::chrono::seconds(10));
  HttpClient forged(w.BaseUrl(), "sluice_tok_forged", std::chrono::seconds(10));
  const std::string body(1000, 'x');  // bodies used to be stored with each refused request
  int unauthorized = 0, limited = 0, other = 0;
  for (int i = 0; i < 10000; ++i) {
    HttpClient& c = i % 2 ? anonymous : forged;
    auto r = i % 3 ? c.Request("POST", "/v1/jobs", body) : c.Request("GET", "/v1/jobs");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (r->status == 401) {
      ++unauthorized;
    } else if (r->status == 429) {
      ++limited;
    } else {
      ++other;
    }
  }
  EXPECT_EQ(other, 0);
  EXPECT_GT(limited, 0) << "no 429 in 10,000 refused requests";
  EXPECT_GT(unauthorized, 0);
  EXPECT_EQ(w.api_->refused(), 10000u);
  EXPECT_EQ(w.api_->rate_limited(), static_cast<uint64_t>(limited));
  // The counter is published where an operator (or Prometheus) reads it.
  HttpClient admin(w.BaseUrl(), w.AdminSecret(), std::chrono::seconds(10));
  auto metrics = admin.Request("GET", "/v1/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_NE(metrics->body.find("sluice_refused_requests_total 10000"), std::string::npos)
      << metrics->body;
  // Failures nobody waited for are published too (none here).
  EXPECT_NE(metrics->body.find("# TYPE sluice_degraded_total counter"), std::string::npos);
  EXPECT_EQ(metrics->body.find("sluice_degraded_total{"), std::string::npos) << metrics->body;
  // And what the store does on its own: WAL checkpoints, none failed.
  EXPECT_NE(metrics->body.find("sluice_store_wal_checkpoints_total{where=\"background\"} "),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("sluice_placement_passes_total{search=\"full\"} "),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("sluice_placement_rechecked_nodes_total "), std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("sluice_store_wal_checkpoint_failures_total 0\n"), std::string::npos)
      << metrics->body;
  // How long the core's lock was waited for and held: histograms, the holds by holder, with
  // the requests above counted (each took the lock at least once).
  for (const char* name : {"sluice_core_lock_wait_seconds", "sluice_core_lock_hold_seconds"}) {
    EXPECT_NE(metrics->body.find(std::string("# TYPE ") + name + " histogram\n"), std::string::npos)
        << name << "\n"
        << metrics->body;
  }
  EXPECT_NE(metrics->body.find("sluice_core_lock_wait_seconds_bucket{le=\"+Inf\"} "),
            std::string::npos);
  for (const char* holder : {"request", "agent_messages", "placement", "tick", "heartbeat"}) {
    EXPECT_NE(metrics->body.find(std::string("sluice_core_lock_hold_seconds_bucket{holder=\"") +
                                 holder + "\",le=\"+Inf\"} "),
              std::string::npos)
        << holder;
  }
  const std::string requests = "sluice_core_lock_hold_seconds_count{holder=\"request\"} ";
  const size_t at = metrics->body.find(requests);
  ASSERT_NE(at, std::string::npos);
  EXPECT_GT(std::stoll(metrics->body.substr(at + requests.size())), 0);
  for (const char* name : {"sluice_store_commits_total ", "sluice_store_failed_commits_total ",
                           "sluice_store_pages_written_total ", "sluice_store_pages_read_total "}) {
    EXPECT_NE(metrics->body.find(name), std::string::npos) << name << "\n" << metrics->body;
  }
  // Nothing of them was stored: not in the audit log, not in the database's size.
  auto audit = admin.Request("GET", "/v1/audit-log?limit=10000");
  ASSERT_TRUE(audit.ok());
  EXPECT_EQ(audit->body.find("anonymous"), std::string::npos);
  EXPECT_LT(w.DbBytes(), db_before + (1u << 20)) << "before " << db_before;
}

TEST(ApiLimitsTest, ALogFloodStopsAtTheAttemptsQuotaKeepingTheNewestLines) {
  CoreOptions opt;
  opt.max_log_bytes_per_attempt = 64 * 1024;
  World w(opt);
  w.Build();
  if (::testing::Test::HasFatalFailure()) return;
  std::string attempt = w.link1_->Last("assign", "attempt_id");
  const std::string line(1000, 'z');
  int64_t seq = 0;
  for (int msg = 0; msg < 200; ++msg) {  // 2 MB against a 64 KiB quota
    Json lines = Json::array();
    for (int i = 0; i < 10; ++i) {
      lines.push_back({{"seq", ++seq}, {"stream", "stdout"}, {"ts_ms", 1}, {"text", line}});
    }
    ASSERT_TRUE(w.core_
                    ->AgentMessage(w.node1_, w.link1_.get(),
                                   Json{{"type", "log"}, {"attempt_id", attempt}, {"lines", lines}})
                    .ok());
  }
  auto stored = w.store_->LogBytes(attempt);
  ASSERT_TRUE(stored.ok());
  EXPECT_LE(*stored, opt.max_log_bytes_per_attempt);
  EXPECT_GT(*stored, opt.max_log_bytes_per_attempt / 2);
  auto logs = w.Call(testing::kOwner, "GET", "/v1/jobs/" + w.job_ + "/logs?limit=10000");
  ASSERT_EQ(logs.status, 200);
  auto parsed = ParseJson(logs.body);
  ASSERT_TRUE(parsed.ok());
  bool marker = false;
  int64_t newest = 0;
  for (const auto& l : (*parsed)["lines"]) {
    marker |= l["text"].get<std::string>().find("older log lines") != std::string::npos;
    newest = std::max(newest, l["seq"].get<int64_t>());
  }
  EXPECT_TRUE(marker) << "no marker says lines were dropped";
  EXPECT_EQ(newest, seq) << "the newest line must be kept";
  // The agent's resend cursor still moves: every line was acknowledged.
  EXPECT_EQ(w.link1_->sent.back().value("seq", int64_t{0}), seq);
}

// Sends a whole request on a raw socket and closes it without reading the answer: the client of
// a server that died before answering.
void SendAndHangUp(uint16_t port, const std::string& request) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  size_t off = 0;
  while (off < request.size()) {
    ssize_t n = ::write(fd, request.data() + off, request.size() - off);
    ASSERT_GT(n, 0);
    off += static_cast<size_t>(n);
  }
  ::close(fd);
}

TEST(ApiLimitsTest, ARetriedSubmissionWithItsKeyYieldsExactlyOneJob) {
  World w;
  w.Build();
  if (::testing::Test::HasFatalFailure()) return;
  Json spec{{"name", "once"}, {"run", "true"}, {"resources", {{"cpus", 1}}}};
  const std::string body = DumpJson(Json{{"spec", spec}, {"queue", true}});
  const std::string secret = w.secret_[testing::kOther];
  SendAndHangUp(w.http_->port(), "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                                     secret +
                                     "\r\nIdempotency-Key: k-1\r\nContent-Type: "
                                     "application/json\r\nContent-Length: " +
                                     std::to_string(body.size()) + "\r\n\r\n" + body);
  // The first attempt was committed although its client never saw the answer.
  auto count = [&] {
    auto r = w.Call(testing::kOther, "GET", "/v1/jobs");
    return r.status == 200 ? (*ParseJson(r.body))["jobs"].size() : size_t{999};
  };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (count() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(count(), 1u);

  HttpClient client(w.BaseUrl(), secret, std::chrono::seconds(10));
  auto retry =
      client.Request("POST", "/v1/jobs", body, "application/json", {{"Idempotency-Key", "k-1"}});
  ASSERT_TRUE(retry.ok());
  EXPECT_EQ(retry->status, 200) << retry->body;
  EXPECT_EQ(count(), 1u) << "the retry created a second job";
  // The same key with another body is refused, not silently answered with the first job.
  Json other{{"name", "different"}, {"run", "true"}, {"resources", {{"cpus", 1}}}};
  auto clash = client.Request("POST", "/v1/jobs", DumpJson(Json{{"spec", other}, {"queue", true}}),
                              "application/json", {{"Idempotency-Key", "k-1"}});
  ASSERT_TRUE(clash.ok());
  EXPECT_EQ(clash->status, 422) << clash->body;
  // Keys belong to an account: another account's same key is a new submission.
  HttpClient team(w.BaseUrl(), w.secret_[testing::kTeam], std::chrono::seconds(10));
  auto theirs =
      team.Request("POST", "/v1/jobs", body, "application/json", {{"Idempotency-Key", "k-1"}});
  ASSERT_TRUE(theirs.ok());
  EXPECT_EQ(theirs->status, 201) << theirs->body;
  EXPECT_EQ(count(), 1u);
}

TEST(ApiLimitsTest, ProvidersCannotDeclareAbsurdPricesOrNames) {
  auto hello = [&](double price, std::string name) {
    Json h{{"type", "hello"},
           {"name", name},
           {"inventory", {{"hostname", "x"}, {"cpu_cores", 2}, {"memory_mib", 1024}}},
           {"price_per_cpu_hour", price}};
    return proto::HelloFromJson(h).status();
  };
  EXPECT_TRUE(hello(0.5, "fine").ok());
  Status huge = hello(1e308, "fine");
  EXPECT_FALSE(huge.ok());
  EXPECT_NE(huge.message().find("price_per_cpu_hour"), std::string::npos);
  Status long_name = hello(0.5, std::string(3 << 20, 'n'));
  EXPECT_FALSE(long_name.ok());
  EXPECT_NE(long_name.message().find("name"), std::string::npos);
}

TEST(ApiLimitsTest, QuotaOnUnfinishedJobsPerAccount) {
  CoreOptions opt;
  opt.max_active_jobs_per_account = 2;
  World w(opt);
  w.Build();
  if (::testing::Test::HasFatalFailure()) return;
  Json spec{{"name", "q"}, {"run", "true"}, {"resources", {{"cpus", 1}}}};
  const std::string body = DumpJson(Json{{"spec", spec}, {"queue", true}});
  EXPECT_EQ(w.Call(testing::kOther, "POST", "/v1/jobs", body).status, 201);
  EXPECT_EQ(w.Call(testing::kOther, "POST", "/v1/jobs", body).status, 201);
  auto third = w.Call(testing::kOther, "POST", "/v1/jobs", body);
  EXPECT_EQ(third.status, 429);
  EXPECT_NE(third.body.find("quota"), std::string::npos) << third.body;
}

// A reader that stops reading a job's stream is not buffered for without bound
// (HttpServerOptions::max_queued_bytes): the stream ends with a line that says why, after lines
// that are the log's own, first ones first.
TEST(ApiLimitsTest, AStreamReaderTooFarBehindIsToldWhyAndTheStreamEnds) {
  World w;
  w.max_queued_bytes_ = 16 << 10;
  w.Build();
  if (::testing::Test::HasFatalFailure()) return;
  const std::string attempt = w.link1_->Last("assign", "attempt_id");
  std::vector<proto::LogEntry> lines;
  for (int64_t seq = 1; seq <= 1000; ++seq) {
    lines.push_back({seq, "stdout", 0, "line " + std::to_string(seq) + std::string(100, '.')});
  }
  ASSERT_TRUE(
      w.core_->AgentMessage(w.node1_, w.link1_.get(), proto::LogMessage(attempt, lines)).ok());
  // 100 KiB of history to a client that reads nothing until the server is done with it.
  sluice::testing::RawSocket raw(w.http_->port());
  ASSERT_TRUE(raw.connected());
  ASSERT_TRUE(raw.Write("GET /v1/jobs/" + w.job_ +
                        "/stream?events=0 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                        w.secret_[testing::kOwner] + "\r\n\r\n"));
  const std::string all = raw.Read(std::chrono::seconds(30), "\r\n0\r\n\r\n");
  ASSERT_EQ(all.rfind("HTTP/1.1 200", 0), 0u) << all.substr(0, 200);
  const size_t why = all.find("the reader fell too far behind");
  ASSERT_NE(why, std::string::npos) << all.substr(0, 300);
  EXPECT_NE(all.find("\"type\":\"error\"", all.rfind('\n', why) + 1), std::string::npos);
  const std::string text = "\"text\":\"line ";
  int next = 1;
  for (size_t at = all.find(text); at < why; at = all.find(text, at + 1)) {
    EXPECT_EQ(std::atoi(all.c_str() + at + text.size()), next) << "out of order";
    ++next;
  }
  EXPECT_GT(next, 1);     // some lines went out first
  EXPECT_LT(next, 1001);  // not all: the rest was not buffered
}

// A reader resumes after the last log line it got (by its id, as `sluice logs -f` does after a
// stream ended early): the new stream starts at the next line, not at the first. A cursor that
// is not a non-negative integer is refused, naming it.
TEST(ApiLimitsTest, AStreamResumesAfterTheLastIdItsReaderGot) {
  World w;
  w.Build();
  if (::testing::Test::HasFatalFailure()) return;
  const std::string attempt = w.link1_->Last("assign", "attempt_id");
  std::vector<proto::LogEntry> lines;
  for (int64_t seq = 1; seq <= 20; ++seq)
    lines.push_back({seq, "stdout", 0, "line " + std::to_string(seq)});
  ASSERT_TRUE(
      w.core_->AgentMessage(w.node1_, w.link1_.get(), proto::LogMessage(attempt, lines)).ok());
  auto stored = w.store_->ReadLogs(w.job_, 0, 100);
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 20u);
  const int64_t after = (*stored)[4].id;  // "line 5"

  sluice::testing::RawSocket raw(w.http_->port());
  ASSERT_TRUE(raw.connected());
  ASSERT_TRUE(raw.Write(
      "GET /v1/jobs/" + w.job_ + "/stream?events=0&after_log=" + std::to_string(after) +
      " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + w.secret_[testing::kOwner] + "\r\n\r\n"));
  const std::string got = raw.Read(std::chrono::seconds(30), "\"line 20\"");
  ASSERT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got.substr(0, 200);
  const std::string text = "\"text\":\"line ";
  std::vector<int> seen;
  for (size_t at = got.find(text); at != std::string::npos; at = got.find(text, at + 1)) {
    seen.push_back(std::atoi(got.c_str() + at + text.size()));
  }
  std::vector<int> want;
  for (int i = 6; i <= 20; ++i) want.push_back(i);
  EXPECT_EQ(seen, want);

  for (const char* bad : {"after_log=-1", "after_event=x", "after_log=1.5"}) {
    auto r = w.Call(testing::kOwner, "GET", "/v1/jobs/" + w.job_ + "/stream?" + bad, "");
    EXPECT_EQ(r.status, 400) << bad;
    const std::string field = std::string(bad).substr(0, std::string(bad).find('='));
    EXPECT_NE(r.body.find("`" + field + "`"), std::string::npos) << r.body;
  }
}

TEST(ApiLimitsTest, UnreferencedUploadsAreCollectedAfterTheGrace) {
  World w;
  w.Build();
  if (::testing::Test::HasFatalFailure()) return;
  const std::string abandoned = "a workdir nobody submitted";
  const std::string digest = Sha256Hex(abandoned);
  ASSERT_EQ(w.Call(testing::kOther, "PUT", "/v1/blobs/" + digest, abandoned).status, 201);
  const std::string bob = w.ids_["bob"];
  EXPECT_EQ(w.accounts_->BlobBytesOf(bob), abandoned.size());
  const int64_t grace = 3600'000;
  // Young uploads are kept, referenced or not.
  auto early = CollectUnreferencedUploads(w.accounts_.get(), w.core_.get(), &w.blobs_,
                                          w.clock_.NowMillis(), grace);
  ASSERT_TRUE(early.ok());
  EXPECT_EQ(early->blobs_deleted, 0);
  EXPECT_TRUE(w.blobs_.Has(digest));
  w.clock_.Advance(grace + 1);
  auto late = CollectUnreferencedUploads(w.accounts_.get(), w.core_.get(), &w.blobs_,
                                         w.clock_.NowMillis(), grace);
  ASSERT_TRUE(late.ok()) << late.status().ToString();
  EXPECT_EQ(late->blobs_deleted, 1);
  EXPECT_FALSE(w.blobs_.Has(digest));
  EXPECT_EQ(w.accounts_->BlobBytesOf(bob), 0u);
  // The running job's workdir is referenced: kept, and still counted for its owner.
  EXPECT_TRUE(w.blobs_.Has(w.blob_));
  EXPECT_GT(w.accounts_->BlobBytesOf(w.ids_["alice"]), 0u);
  // The rows are gone from the store too.
  auto rows = w.store_->LoadBlobOwners();
  ASSERT_TRUE(rows.ok());
  for (const auto& r : *rows) EXPECT_NE(r.digest, digest);
}

}  // namespace
}  // namespace sluice::server
