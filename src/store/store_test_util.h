// Helpers shared by the store's tests: a scratch directory and sample records.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "store/records.h"

namespace sluice::store::testing {

// A fresh directory per test, removed afterwards.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = ::testing::TempDir() + "sluice-store-XXXXXX";
    char* p = ::mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr);
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline JobRecord SampleJob(const std::string& id, int64_t submitted_ms = 1000) {
  JobRecord j;
  j.id = id;
  j.name = "train " + id;
  j.spec = Json{{"name", "train"},
                {"resources", {{"gpus", 2}, {"gpu", "h100-80gb"}}},
                {"command", {"python", "train.py"}}};
  j.workdir_blob = std::string(64, 'a');
  j.state = JobState::kRunning;
  j.priority = 7;
  j.submitted_ms = submitted_ms;
  j.started_ms = submitted_ms + 5;
  j.exit_code = std::nullopt;
  j.reason = "";
  j.attempt_id = "att-" + id;
  return j;
}

inline AttemptRecord SampleAttempt(const std::string& id, const std::string& job_id,
                                   AttemptState state, int64_t created_ms) {
  AttemptRecord a;
  a.id = id;
  a.job_id = job_id;
  a.node_id = "node-1";
  a.gpus = {0, 3};
  a.cpus = 16;
  a.memory_gb = 62.5;
  a.price_per_hour = 4.2;
  a.state = state;
  a.created_ms = created_ms;
  return a;
}

}  // namespace sluice::store::testing
