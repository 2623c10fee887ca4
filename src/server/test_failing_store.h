// Test support: a Store decorator whose writes fail on demand.
#pragma once

#include <functional>

#include "store/store.h"

namespace sluice::server::testing {

// A store whose writes fail on demand (issue 12 item 1), to prove that a failed commit leaves
// memory and disk as they were. Reads always go through.
class FailingStore : public store::Store {
 public:
  explicit FailingStore(store::Store* inner) : inner_(inner) {}
  bool fail = false;  // every write fails
  // Only writes this accepts fail (when `fail` is false): one kind of state change.
  std::function<bool(const store::WriteBatch&)> fail_if;
  int failed = 0;  // writes refused so far
  int writes = 0;  // writes let through so far
  // Called before every write, failed or not: a test's slow disk (advancing a FakeClock).
  std::function<void(const store::WriteBatch&)> on_write;
  using store::Store::Write;  // the overload for a temporary batch
  Status Write(store::WriteBatch& b) override {
    if (on_write) on_write(b);
    if (fail || (fail_if && fail_if(b))) {
      ++failed;
      return Status::Unavailable("injected store failure");
    }
    ++writes;
    return inner_->Write(b);
  }
  Status CheckWritable() override { return inner_->CheckWritable(); }
  Result<std::vector<store::TokenRecord>> LoadTokens() override { return inner_->LoadTokens(); }
  Result<std::vector<store::AccountRecord>> LoadAccounts() override {
    return inner_->LoadAccounts();
  }
  Result<std::vector<store::TeamMember>> LoadTeamMembers() override {
    return inner_->LoadTeamMembers();
  }
  Result<std::optional<store::IdempotencyRecord>> GetIdempotencyKey(const std::string& a,
                                                                    const std::string& k,
                                                                    int64_t s) override {
    return inner_->GetIdempotencyKey(a, k, s);
  }
  Result<int64_t> ExpireIdempotencyKeys(int64_t b) override {
    return inner_->ExpireIdempotencyKeys(b);
  }
  Result<std::vector<store::BlobOwner>> LoadBlobOwners() override {
    return inner_->LoadBlobOwners();
  }
  Result<std::vector<store::NodeRecord>> LoadNodes() override { return inner_->LoadNodes(); }
  Result<std::vector<store::JobRecord>> LoadJobs() override { return inner_->LoadJobs(); }
  Result<std::optional<store::JobRecord>> GetJob(const std::string& id) override {
    return inner_->GetJob(id);
  }
  Result<std::vector<store::JobRecord>> ListFinishedJobs(std::optional<store::JobState> s,
                                                         const std::optional<store::JobCursor>& b,
                                                         int l,
                                                         const store::JobScope* scope) override {
    return inner_->ListFinishedJobs(s, b, l, scope);
  }
  Result<std::vector<store::AttemptRecord>> AttemptsForJob(const std::string& id) override {
    return inner_->AttemptsForJob(id);
  }
  Result<std::vector<store::AttemptRecord>> LoadActiveAttempts() override {
    return inner_->LoadActiveAttempts();
  }
  Result<std::vector<store::LogLine>> ReadLogs(const std::string& j, int64_t a, int l) override {
    return inner_->ReadLogs(j, a, l);
  }
  Result<int64_t> MaxLogSeq(const std::string& a) override { return inner_->MaxLogSeq(a); }
  Result<int64_t> LogBytes(const std::string& a) override { return inner_->LogBytes(a); }
  Result<store::LogTrimPoint> FindLogTrim(const std::string& a, int64_t b) override {
    return inner_->FindLogTrim(a, b);
  }
  Result<std::vector<store::JobEvent>> ReadEvents(const std::string& j, int64_t a, int l) override {
    return inner_->ReadEvents(j, a, l);
  }
  Result<std::vector<store::CatalogFile>> LoadCatalogs() override { return inner_->LoadCatalogs(); }
  Result<std::vector<store::CheckpointRecord>> LoadCheckpoints() override {
    return inner_->LoadCheckpoints();
  }
  Result<std::optional<store::NodeSnapshot>> GetSnapshot(const std::string& d) override {
    return inner_->GetSnapshot(d);
  }
  Result<std::vector<store::UptimeSpan>> LoadUptime(int64_t s) override {
    return inner_->LoadUptime(s);
  }
  Result<std::vector<store::AttemptRecord>> AttemptsSince(int64_t s) override {
    return inner_->AttemptsSince(s);
  }
  Result<std::vector<store::AuditEntry>> ReadAudit(int64_t s, int64_t a, int l) override {
    return inner_->ReadAudit(s, a, l);
  }

  Result<std::vector<store::MeterRecord>> LoadMeters(const std::string& j) override {
    return inner_->LoadMeters(j);
  }
  Result<std::vector<std::pair<std::string, int64_t>>> LoadBalances() override {
    return inner_->LoadBalances();
  }
  Result<store::LedgerCheck> CheckLedger() override { return inner_->CheckLedger(); }
  Result<std::vector<store::CostRow>> Costs(const store::CostQuery& q) override {
    return inner_->Costs(q);
  }
  Result<std::vector<store::CostRow>> CostsFromMeters(const store::CostQuery& q) override {
    return inner_->CostsFromMeters(q);
  }
  Result<std::vector<store::BudgetRecord>> LoadBudgets() override { return inner_->LoadBudgets(); }
  Result<std::vector<store::BudgetAlert>> LoadBudgetAlerts(const std::string& since_month,
                                                           bool undelivered) override {
    return inner_->LoadBudgetAlerts(since_month, undelivered);
  }
  Result<int64_t> ScopeSpend(const std::string& scope, const std::string& since_day) override {
    return inner_->ScopeSpend(scope, since_day);
  }

 private:
  store::Store* inner_;
};

}  // namespace sluice::server::testing
