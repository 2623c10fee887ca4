#include "server/accounts.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/crypto.h"
#include "common/token_file.h"
#include "server/test_failing_store.h"
#include "store/store_test_util.h"

namespace sluice::server {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Bearer(const std::string& secret) { return "Bearer " + secret; }

class AccountsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::OpenSqliteStore(dir_.path() + "/sluice.db");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
    auto a = Accounts::Bootstrap(store_.get(), dir_.path(), &clock_, std::string(64, 'a'));
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    accounts_ = std::move(*a);
  }
  std::string FileSecret(const char* name) {
    auto f = ParseTokenFile(ReadAll(dir_.path() + "/" + name));
    EXPECT_TRUE(f.ok());
    return f.ok() ? f->secret : "";
  }

  store::testing::ScratchDir dir_;
  FakeClock clock_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Accounts> accounts_;
};

TEST_F(AccountsTest, FirstStartWritesAdminAndJoinTokensWithThePin) {
  auto admin = ParseTokenFile(ReadAll(dir_.path() + "/admin.token"));
  ASSERT_TRUE(admin.ok());
  EXPECT_EQ(admin->ca_sha256, std::string(64, 'a'));
  struct stat st {};
  ASSERT_EQ(::stat((dir_.path() + "/admin.token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  Principal p = accounts_->Authenticate(Bearer(admin->secret));
  EXPECT_EQ(p.role, Role::kAdmin);
  EXPECT_EQ(p.account_name, "admin");
  EXPECT_EQ(p.scope, Scope::kFull);

  Principal j = accounts_->Authenticate(Bearer(FileSecret("join.token")));
  EXPECT_EQ(j.role, Role::kProvider);
  EXPECT_EQ(j.scope, Scope::kJoin);
  EXPECT_EQ(j.account_id, accounts_->builtin_provider_id());

  // Only hashes are stored.
  auto tokens = store_->LoadTokens();
  ASSERT_TRUE(tokens.ok());
  for (const auto& t : *tokens) {
    EXPECT_NE(t.sha256, admin->secret);
    EXPECT_EQ(t.sha256.size(), 64u);
  }
}

TEST_F(AccountsTest, RestartKeepsTokensAndAccounts) {
  std::string secret = FileSecret("admin.token");
  auto user = accounts_->CreateAccount("alice", Role::kUser, accounts_->admin_account_id());
  ASSERT_TRUE(user.ok());
  auto tok = accounts_->CreateToken(user->id, "api", Scope::kRead, "laptop", 0);
  ASSERT_TRUE(tok.ok());
  ASSERT_TRUE(accounts_->AddTeamMember("vision", user->id).ok());
  auto again = Accounts::Bootstrap(store_.get(), dir_.path(), &clock_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->Authenticate(Bearer(secret)).role, Role::kAdmin);
  Principal p = (*again)->Authenticate(Bearer(tok->secret));
  EXPECT_EQ(p.role, Role::kUser);
  EXPECT_EQ(p.scope, Scope::kRead);
  EXPECT_TRUE((*again)->IsTeamMember("vision", user->id));
  EXPECT_EQ(FileSecret("admin.token"), secret);  // not rewritten
}

TEST_F(AccountsTest, UnknownExpiredRevokedAndDisabledAreRefusedWithTheReason) {
  EXPECT_EQ(accounts_->Authenticate("").refusal, "missing");
  EXPECT_EQ(accounts_->Authenticate("Basic abc").refusal, "missing");
  EXPECT_EQ(accounts_->Authenticate(Bearer("sluice_tok_nope")).refusal, "unknown");

  auto user = accounts_->CreateAccount("bob", Role::kUser, accounts_->admin_account_id());
  ASSERT_TRUE(user.ok());
  auto short_lived = accounts_->CreateToken(user->id, "api", Scope::kFull, "ci", 60'000);
  ASSERT_TRUE(short_lived.ok());
  EXPECT_TRUE(accounts_->Authenticate(Bearer(short_lived->secret)).authenticated());
  clock_.Advance(60'000);
  Principal expired = accounts_->Authenticate(Bearer(short_lived->secret));
  EXPECT_FALSE(expired.authenticated());
  EXPECT_EQ(expired.refusal, "expired");

  auto tok = accounts_->CreateToken(user->id, "api", Scope::kFull, "", 0);
  ASSERT_TRUE(tok.ok());
  ASSERT_TRUE(accounts_->RevokeToken(tok->record.id).ok());
  EXPECT_EQ(accounts_->Authenticate(Bearer(tok->secret)).refusal, "revoked");

  auto other = accounts_->CreateToken(user->id, "api", Scope::kFull, "", 0);
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(accounts_->SetDisabled("bob", true).ok());
  EXPECT_EQ(accounts_->Authenticate(Bearer(other->secret)).refusal, "disabled");
  ASSERT_TRUE(accounts_->SetDisabled("bob", false).ok());
  EXPECT_TRUE(accounts_->Authenticate(Bearer(other->secret)).authenticated());
}

TEST_F(AccountsTest, ListingNeverShowsSecretsOrNodeCredentials) {
  auto user = accounts_->CreateAccount("carol", Role::kUser, accounts_->admin_account_id());
  ASSERT_TRUE(user.ok());
  auto tok = accounts_->CreateToken(user->id, "api", Scope::kMetrics, "grafana", 0);
  ASSERT_TRUE(tok.ok());
  MintedToken cred = accounts_->NewNodeCredential("node-1", accounts_->builtin_provider_id());
  ASSERT_TRUE(store_->Write(store::WriteBatch{.tokens = {cred.record}}).ok());
  accounts_->Apply({cred.record});
  EXPECT_EQ(accounts_->Authenticate(Bearer(cred.secret)).role, Role::kNode);
  EXPECT_EQ(accounts_->Authenticate(Bearer(cred.secret)).node_id, "node-1");
  auto mine = accounts_->ListTokens(user->id);
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0].record.name, "grafana");
  EXPECT_EQ(mine[0].record.scope, "metrics");
  for (const auto& t : accounts_->ListTokens("")) {
    EXPECT_NE(t.record.kind, "node");
    EXPECT_NE(t.record.sha256, tok->secret);
  }
  // Node credentials are revoked as a set, through the caller's commit.
  auto revocations = accounts_->RevocationsForNode("node-1");
  ASSERT_EQ(revocations.size(), 1u);
  ASSERT_TRUE(store_->Write(store::WriteBatch{.tokens = revocations}).ok());
  accounts_->Apply(revocations);
  EXPECT_EQ(accounts_->Authenticate(Bearer(cred.secret)).refusal, "revoked");
}

TEST_F(AccountsTest, BadInputIsRefusedWithTheField) {
  auto bad = accounts_->CreateAccount("Alice Smith", Role::kUser, "");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("name:"), std::string::npos);
  EXPECT_FALSE(accounts_->CreateAccount(std::string(65, 'a'), Role::kUser, "").ok());
  ASSERT_TRUE(accounts_->CreateAccount("dave", Role::kUser, "").ok());
  EXPECT_EQ(accounts_->CreateAccount("dave", Role::kUser, "").status().code(),
            StatusCode::kAlreadyExists);
  auto dave = accounts_->FindAccount("dave");
  ASSERT_TRUE(dave);
  auto join = accounts_->CreateToken(dave->id, "join", Scope::kFull, "", 0);
  ASSERT_FALSE(join.ok());
  EXPECT_NE(join.status().message().find("provider"), std::string::npos);
  EXPECT_FALSE(
      accounts_->CreateToken(dave->id, "api", Scope::kFull, std::string(200, 'x'), 0).ok());
  EXPECT_FALSE(accounts_->CreateToken(dave->id, "api", Scope::kFull, "", -1).ok());
  EXPECT_FALSE(accounts_->SetDisabled("admin", true).ok());
}

TEST_F(AccountsTest, AFailedCommitChangesNothingInMemory) {
  testing::FailingStore failing(store_.get());
  auto a = Accounts::Bootstrap(&failing, dir_.path(), &clock_);
  ASSERT_TRUE(a.ok());
  Accounts& acc = **a;
  auto user = acc.CreateAccount("erin", Role::kUser, acc.admin_account_id());
  ASSERT_TRUE(user.ok());
  auto tok = acc.CreateToken(user->id, "api", Scope::kFull, "", 0);
  ASSERT_TRUE(tok.ok());

  failing.fail = true;
  EXPECT_FALSE(acc.CreateAccount("frank", Role::kUser, "").ok());
  EXPECT_FALSE(acc.FindAccount("frank"));
  EXPECT_FALSE(acc.CreateToken(user->id, "api", Scope::kFull, "", 0).ok());
  EXPECT_EQ(acc.ListTokens(user->id).size(), 1u);
  EXPECT_FALSE(acc.RevokeToken(tok->record.id).ok());
  EXPECT_TRUE(acc.Authenticate(Bearer(tok->secret)).authenticated());
  EXPECT_FALSE(acc.SetDisabled("erin", true).ok());
  EXPECT_TRUE(acc.Authenticate(Bearer(tok->secret)).authenticated());
  EXPECT_FALSE(acc.AddTeamMember("ml", user->id).ok());
  EXPECT_FALSE(acc.IsTeamMember("ml", user->id));
  EXPECT_FALSE(acc.RecordBlobOwner({std::string(64, 'b'), user->id, 10, 0}).ok());
  EXPECT_FALSE(acc.OwnsBlob(user->id, std::string(64, 'b')));
  EXPECT_EQ(acc.BlobBytesOf(user->id), 0u);
}

TEST(AccountsUpgradeTest, TokensFromBeforeAccountsBelongToTheBootstrapAccounts) {
  store::testing::ScratchDir dir;
  FakeClock clock;
  auto s = store::OpenSqliteStore(dir.path() + "/sluice.db");
  ASSERT_TRUE(s.ok());
  // What a v8 server stored: kind admin/join, no account.
  store::WriteBatch old;
  old.tokens.push_back({.id = "admin-1", .kind = "admin", .sha256 = Sha256Hex("old-admin")});
  old.tokens.push_back({.id = "join-1", .kind = "join", .sha256 = Sha256Hex("old-join")});
  ASSERT_TRUE((*s)->Write(old).ok());
  auto a = Accounts::Bootstrap(s->get(), dir.path(), &clock);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->Authenticate("Bearer old-admin").role, Role::kAdmin);
  Principal join = (*a)->Authenticate("Bearer old-join");
  EXPECT_EQ(join.scope, Scope::kJoin);
  EXPECT_EQ(join.account_id, (*a)->builtin_provider_id());
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/admin.token"));  // no new secrets minted
}

}  // namespace
}  // namespace sluice::server
