// MonthlyBudgets alone (the core's use of it: core_monthly_budget_test.cc): scopes and their
// names, a month's spend read once and kept with committed charges, the refusal's wording, the
// alerts a staged charge crosses (each once), a read error that refuses rather than overspends.
#include "server/monthly_budgets.h"

#include <gtest/gtest.h>

#include <memory>

#include "server/test_failing_store.h"
#include "store/store_test_util.h"

namespace sluice::server {
namespace {

constexpr int64_t kDec6 = 1'796'515'200'000;  // 2026-12-06T00:00:00Z
constexpr int64_t kJan1 = 1'798'761'600'000;  // 2027-01-01T00:00:00Z
constexpr int64_t kDollar = 1'000'000;

// Reads of the month's spend fail while `fail_reads` is set.
class UnreadableStore : public testing::FailingStore {
 public:
  using FailingStore::FailingStore;
  bool fail_reads = false;
  int reads = 0;
  Result<int64_t> ScopeSpend(const std::string& scope, const std::string& since) override {
    ++reads;
    if (fail_reads) return Status::Unavailable("injected read failure");
    return FailingStore::ScopeSpend(scope, since);
  }
};

class MonthlyBudgetsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::OpenSqliteStore(dir_.path() + "/sluice.db");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    sqlite_ = std::move(*s);
    store_ = std::make_unique<UnreadableStore>(sqlite_.get());
    books_ = std::make_unique<MonthlyBudgets>(store_.get(), &clock_, [](const std::string& id) {
      return id == "acc-alice" ? std::string("alice") : std::string();
    });
  }
  static store::BudgetRecord Budget(const std::string& scope, int64_t micros) {
    store::BudgetRecord b;
    b.scope = scope;
    b.monthly_micros = micros;
    b.webhook = "https://hooks.example/" + scope;
    return b;
  }
  // A committed charge of `payer` on `day`, in the store (and so in a fresh read).
  void Charge(const std::string& payer, const std::string& day, int64_t micros) {
    store::WriteBatch b;
    store::CostDelta d;
    d.payer = payer;
    d.provider = "acc-provider";
    d.job_id = "job-1";
    d.node_id = "node-1";
    d.day = day;
    d.resource = "cpu";
    d.charged_micros = micros;
    b.cost_deltas.push_back(d);
    ASSERT_TRUE(store_->Write(b).ok());
  }

  store::testing::ScratchDir dir_;
  FakeClock clock_{kDec6};
  std::unique_ptr<store::Store> sqlite_;
  std::unique_ptr<UnreadableStore> store_;
  std::unique_ptr<MonthlyBudgets> books_;
};

TEST_F(MonthlyBudgetsTest, ScopesAreTheBudgetedOnesNamedForPeople) {
  EXPECT_TRUE(books_->empty());
  EXPECT_TRUE(books_->ScopesOf("acc-alice", "ml").empty());
  books_->Load({Budget("account:acc-alice", 10 * kDollar), Budget("team:ml", 20 * kDollar)}, {});
  EXPECT_FALSE(books_->empty());
  EXPECT_EQ(books_->ScopesOf("acc-alice", "ml"),
            (std::vector<std::string>{"account:acc-alice", "team:ml"}));
  EXPECT_EQ(books_->ScopesOf("acc-bob", "ml"), (std::vector<std::string>{"team:ml"}));
  EXPECT_EQ(books_->ScopesOf("acc-alice", ""), (std::vector<std::string>{"account:acc-alice"}));
  EXPECT_TRUE(books_->ScopesOf("acc-bob", "web").empty());
  EXPECT_EQ(books_->Name("account:acc-alice"), "account alice");
  EXPECT_EQ(books_->Name("account:acc-gone"), "account:acc-gone");  // no name: its id
  EXPECT_EQ(books_->Name("team:ml"), "team ml");
  EXPECT_EQ(books_->Month(), "2026-12");

  store::BudgetRecord removed = Budget("team:ml", 0);
  removed.removed = true;
  books_->Set(removed);
  EXPECT_EQ(books_->ScopesOf("acc-bob", "ml"), std::vector<std::string>{});
  EXPECT_EQ(books_->all().size(), 1u);
}

TEST_F(MonthlyBudgetsTest, AMonthsSpendIsReadOnceThenKeptWithCommittedCharges) {
  Charge("acc-alice", "2026-11-30", 7 * kDollar);  // last month: not counted
  Charge("acc-alice", "2026-12-02", 3 * kDollar);
  books_->Load({Budget("account:acc-alice", 10 * kDollar)}, {});
  EXPECT_EQ(books_->Spent("account:acc-alice"), 3 * kDollar);
  EXPECT_EQ(books_->Spent("account:acc-alice"), 3 * kDollar);
  EXPECT_EQ(store_->reads, 1);

  // Committed after the read: the store has it, and the books count it without a read. A
  // charge of another payer or of last month's day does not count.
  Charge("acc-alice", "2026-12-06", 2 * kDollar);
  books_->NoteCharged("acc-alice", "", "2026-12-06", 2 * kDollar);
  books_->NoteCharged("acc-bob", "", "2026-12-06", 50 * kDollar);
  books_->NoteCharged("acc-alice", "", "2026-11-30", 50 * kDollar);
  EXPECT_EQ(books_->Spent("account:acc-alice"), 5 * kDollar);
  EXPECT_EQ(store_->reads, 1);

  // A budget set again is read afresh (its spend is kept only while it has one).
  books_->Set(Budget("account:acc-alice", 12 * kDollar));
  EXPECT_EQ(books_->Spent("account:acc-alice"), 5 * kDollar);
  EXPECT_EQ(store_->reads, 2);

  // A new month starts from what the store has for it: nothing yet.
  clock_.Set(kJan1);
  EXPECT_EQ(books_->Month(), "2027-01");
  EXPECT_EQ(books_->Spent("account:acc-alice"), 0);
  EXPECT_EQ(store_->reads, 3);
}

TEST_F(MonthlyBudgetsTest, ARefusalNamesTheScopeItsSpendAndTheCommandThatRaisesIt) {
  books_->Load({Budget("account:acc-alice", 10 * kDollar)}, {});
  Charge("acc-alice", "2026-12-03", 9'999'999);
  EXPECT_EQ(books_->Refusal("acc-alice", ""), "");
  books_->NoteCharged("acc-alice", "", "2026-12-06", 1);
  EXPECT_EQ(books_->Refusal("acc-alice", ""),
            "monthly budget reached: account alice spent $10.00 of its $10.00 for 2026-12 "
            "(`sluice budget --account alice --monthly USD` raises it; it resets when the month "
            "ends)");
  EXPECT_EQ(books_->Refusal("acc-bob", ""), "");  // not budgeted
}

TEST_F(MonthlyBudgetsTest, AStagedChargeCrossesEachThresholdOnce) {
  books_->Load({Budget("account:acc-alice", 10 * kDollar), Budget("team:ml", 100 * kDollar)}, {});
  Charge("acc-alice", "2026-12-01", 4 * kDollar);
  // $4 + $4.50 staged: past 50 and 80 % of the account's, not 100; the team's 8.5 %: none.
  auto crossed = books_->Crossed({{"account:acc-alice", 4'500'000}, {"team:ml", 4'500'000}}, {});
  ASSERT_EQ(crossed.size(), 2u);
  EXPECT_EQ(crossed[0].first, "account:acc-alice|2026-12|50");
  EXPECT_EQ(crossed[1].first, "account:acc-alice|2026-12|80");
  EXPECT_EQ(crossed[1].second.percent, 80);
  EXPECT_EQ(crossed[1].second.spent_micros, 8'500'000);
  EXPECT_EQ(crossed[1].second.budget_micros, 10 * kDollar);
  EXPECT_EQ(crossed[1].second.month, "2026-12");
  EXPECT_EQ(crossed[1].second.webhook, "https://hooks.example/account:acc-alice");
  EXPECT_EQ(crossed[1].second.ts_ms, kDec6);

  // Staged in the same edit, or raised by a commit: not again.
  EXPECT_EQ(books_
                ->Crossed({{"account:acc-alice", 4'500'000}},
                          {"account:acc-alice|2026-12|50", "account:acc-alice|2026-12|80"})
                .size(),
            0u);
  books_->NoteRaised({crossed[0].first});
  crossed = books_->Crossed({{"account:acc-alice", 6 * kDollar}}, {});
  ASSERT_EQ(crossed.size(), 2u);  // 80 and 100; 50 was raised
  EXPECT_EQ(crossed[0].second.percent, 80);
  EXPECT_EQ(crossed[1].second.percent, 100);

  // Alerts stored before a restart are raised already.
  books_->Load({Budget("account:acc-alice", 10 * kDollar)}, {crossed[0].second});
  crossed = books_->Crossed({{"account:acc-alice", 6 * kDollar}}, {});
  ASSERT_EQ(crossed.size(), 2u);  // 50 (never committed above) and 100
  EXPECT_EQ(crossed[0].second.percent, 50);
  EXPECT_EQ(crossed[1].second.percent, 100);
  EXPECT_TRUE(books_->Crossed({{"team:gone", kDollar}}, {}).empty());  // no such budget
}

TEST_F(MonthlyBudgetsTest, AFailedReadRefusesAndIsReadAgain) {
  books_->Load({Budget("account:acc-alice", 10 * kDollar)}, {});
  store_->fail_reads = true;
  EXPECT_GE(books_->Spent("account:acc-alice"), 10 * kDollar);  // unknown is not zero
  EXPECT_NE(books_->Refusal("acc-alice", ""), "");
  store_->fail_reads = false;
  EXPECT_EQ(books_->Spent("account:acc-alice"), 0);
  EXPECT_EQ(books_->Refusal("acc-alice", ""), "");
}

}  // namespace
}  // namespace sluice::server
