#include "server/accounts.h"

#include <algorithm>

#include "common/atomic_file.h"
#include "common/crypto.h"
#include "common/text.h"
#include "common/token_file.h"

namespace sluice::server {
namespace {

constexpr std::string_view kBearer = "Bearer ";
// Bounds on what one account may hold, so a token or account list cannot grow without end.
constexpr size_t kMaxTokensPerAccount = 1000;
constexpr size_t kMaxAccounts = 100000;
constexpr size_t kMaxTokenNameBytes = 128;

Role RoleOfAccount(const std::string& role) {
  if (role == "admin") return Role::kAdmin;
  if (role == "provider") return Role::kProvider;
  if (role == "user") return Role::kUser;
  return Role::kNone;
}

Scope ScopeOf(const std::string& s) {
  if (s == "read") return Scope::kRead;
  if (s == "metrics") return Scope::kMetrics;
  if (s == "join") return Scope::kJoin;
  if (s == "node") return Scope::kNode;
  return Scope::kFull;
}

std::string NewSecret(std::string_view kind) {
  return "sluice_" + std::string(kind) + "_" + RandomHex(24);
}

}  // namespace

std::string_view Name(Role r) {
  switch (r) {
    case Role::kAdmin:
      return "admin";
    case Role::kUser:
      return "user";
    case Role::kProvider:
      return "provider";
    case Role::kNode:
      return "node";
    case Role::kNone:
      break;
  }
  return "none";
}

std::string_view Name(Scope s) {
  switch (s) {
    case Scope::kFull:
      return "full";
    case Scope::kRead:
      return "read";
    case Scope::kMetrics:
      return "metrics";
    case Scope::kJoin:
      return "join";
    case Scope::kNode:
      return "node";
  }
  return "full";
}

Result<Role> ParseAccountRole(std::string_view s) {
  if (s == "admin") return Role::kAdmin;
  if (s == "user") return Role::kUser;
  if (s == "provider") return Role::kProvider;
  return Status::InvalidArgument("role: expected admin, user or provider, got `" + std::string(s) +
                                 "`");
}

Result<Scope> ParseTokenScope(std::string_view s) {
  if (s == "full") return Scope::kFull;
  if (s == "read") return Scope::kRead;
  if (s == "metrics") return Scope::kMetrics;
  return Status::InvalidArgument("scope: expected full, read or metrics, got `" + std::string(s) +
                                 "`");
}

Status ValidateName(std::string_view field, std::string_view name) {
  bool ok = !name.empty() && name.size() <= 64;
  for (size_t i = 0; ok && i < name.size(); ++i) {
    char c = name[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    ok = alnum || (i > 0 && (c == '.' || c == '_' || c == '-'));
  }
  if (ok) return Status::Ok();
  return Status::InvalidArgument(std::string(field) +
                                 ": expected 1 to 64 characters of a-z, 0-9, '.', '_' or '-' "
                                 "starting with a letter or digit");
}

std::string Principal::Actor() const {
  if (role == Role::kNode) return "node " + node_id + " (" + token_id + ")";
  if (role == Role::kNone) return "anonymous";
  return account_name + " (" + token_id + ")";
}

Result<std::unique_ptr<Accounts>> Accounts::Bootstrap(store::Store* store,
                                                      const std::string& data_dir,
                                                      const Clock* clock,
                                                      const std::string& ca_sha256) {
  std::unique_ptr<Accounts> a(new Accounts(store, clock));
  SLUICE_ASSIGN_OR_RETURN(std::vector<store::AccountRecord> accounts, store->LoadAccounts());
  SLUICE_ASSIGN_OR_RETURN(std::vector<store::TokenRecord> tokens, store->LoadTokens());
  SLUICE_ASSIGN_OR_RETURN(std::vector<store::TeamMember> members, store->LoadTeamMembers());
  SLUICE_ASSIGN_OR_RETURN(std::vector<store::BlobOwner> uploads, store->LoadBlobOwners());
  int64_t now = clock->NowMillis();
  store::WriteBatch batch;
  // The first admin and the built-in provider: the oldest account of each role created by no
  // one. On first start (or on a database from before accounts) they are made here.
  for (const auto& acc : accounts) {
    if (acc.role == "admin" && acc.owner.empty() && a->admin_id_.empty()) a->admin_id_ = acc.id;
    if (acc.role == "provider" && acc.name == "provider" && a->provider_id_.empty()) {
      a->provider_id_ = acc.id;
    }
  }
  if (a->admin_id_.empty()) {
    store::AccountRecord admin{"acct-" + RandomHex(6), "admin", "admin", false, now, ""};
    a->admin_id_ = admin.id;
    batch.accounts.push_back(admin);
  }
  if (a->provider_id_.empty()) {
    store::AccountRecord prov{
        "acct-" + RandomHex(6), "provider", "provider", false, now, a->admin_id_};
    a->provider_id_ = prov.id;
    batch.accounts.push_back(prov);
  }
  // Tokens from before accounts: the admin token becomes the admin's full token, the join token
  // the built-in provider's.
  for (auto& t : tokens) {
    if (!t.account_id.empty()) continue;
    if (t.kind == "admin") {
      t.kind = "api";
      t.scope = "full";
      t.account_id = a->admin_id_;
      t.name = "admin.token";
    } else if (t.kind == "join") {
      t.scope = "join";
      t.account_id = a->provider_id_;
      t.name = "join.token";
    } else {
      continue;
    }
    batch.tokens.push_back(t);
  }
  std::vector<store::TokenRecord> minted;
  if (tokens.empty()) {
    struct First {
      const char* file;
      const char* kind;
      const char* scope;
      std::string account;
    };
    for (const First& f : {First{"admin.token", "api", "full", a->admin_id_},
                           First{"join.token", "join", "join", a->provider_id_}}) {
      std::string secret = NewSecret(f.kind == std::string("join") ? "join" : "admin");
      store::TokenRecord rec;
      rec.id = std::string(f.kind == std::string("join") ? "join-" : "tok-") + RandomHex(4);
      rec.kind = f.kind;
      rec.sha256 = Sha256Hex(secret);
      rec.created_ms = now;
      rec.account_id = f.account;
      rec.scope = f.scope;
      rec.name = f.file;
      TokenFile file{secret, ca_sha256, ""};
      SLUICE_RETURN_IF_ERROR(WriteFileAtomic(data_dir + "/" + f.file, FormatTokenFile(file), 0600));
      minted.push_back(rec);
    }
    // Files first, then hashes: a crash in between leaves no hash whose secret was never written.
    for (auto& t : minted) batch.tokens.push_back(t);
  }
  SLUICE_RETURN_IF_ERROR(store->Write(batch));
  for (const auto& acc : accounts) a->accounts_[acc.id] = acc;
  for (const auto& acc : batch.accounts) a->accounts_[acc.id] = acc;
  for (const auto& t : tokens) a->IndexLocked(t);
  for (const auto& t : batch.tokens) a->IndexLocked(t);
  for (const auto& m : members) a->teams_[m.team].insert(m.account_id);
  for (const auto& u : uploads) {
    if (a->blob_owners_.emplace(std::pair{u.account_id, u.digest}, u).second) {
      a->blob_bytes_[u.account_id] += static_cast<uint64_t>(u.size);
    }
  }
  return a;
}

void Accounts::IndexLocked(const store::TokenRecord& t) {
  auto old = tokens_.find(t.id);
  if (old != tokens_.end()) token_by_hash_.erase(old->second.sha256);
  tokens_[t.id] = t;
  token_by_hash_[t.sha256] = t.id;
}

const store::AccountRecord* Accounts::AccountLocked(const std::string& name_or_id) const {
  auto it = accounts_.find(name_or_id);
  if (it != accounts_.end()) return &it->second;
  for (const auto& [id, acc] : accounts_) {
    if (acc.name == name_or_id) return &acc;
  }
  return nullptr;
}

Principal Accounts::Authenticate(std::string_view header) const {
  Principal p;
  if (header.size() <= kBearer.size() || header.substr(0, kBearer.size()) != kBearer) {
    p.refusal = "missing";
    return p;
  }
  std::string secret = Trim(header.substr(kBearer.size()));
  if (secret.empty() || secret.size() > 256) {
    p.refusal = "unknown";
    return p;
  }
  // Lookup by the secret's hash: the map's timing depends on the hash, not on the secret.
  std::string hash = Sha256Hex(secret);
  std::lock_guard<std::mutex> lock(mu_);
  auto h = token_by_hash_.find(hash);
  if (h == token_by_hash_.end()) {
    p.refusal = "unknown";
    return p;
  }
  const store::TokenRecord& t = tokens_.at(h->second);
  if (!ConstantTimeEquals(hash, t.sha256)) {
    p.refusal = "unknown";
    return p;
  }
  p.token_id = t.id;
  if (t.revoked_ms != 0) {
    p.refusal = "revoked";
    return p;
  }
  if (t.expires_ms != 0 && clock_->NowMillis() >= t.expires_ms) {
    p.refusal = "expired";
    return p;
  }
  const store::AccountRecord* acc = AccountLocked(t.account_id);
  if (acc == nullptr) {
    p.refusal = "unknown";
    return p;
  }
  if (acc->disabled) {
    p.refusal = "disabled";
    return p;
  }
  p.account_id = acc->id;
  p.account_name = acc->name;
  p.scope = ScopeOf(t.scope);
  if (t.kind == "node") {
    p.role = Role::kNode;
    p.node_id = t.node_id;
    p.scope = Scope::kNode;
  } else if (t.kind == "join") {
    p.role = Role::kProvider;
    p.scope = Scope::kJoin;
  } else {
    p.role = RoleOfAccount(acc->role);
  }
  return p;
}

Result<store::AccountRecord> Accounts::CreateAccount(const std::string& name, Role role,
                                                     const std::string& creator_id) {
  SLUICE_RETURN_IF_ERROR(ValidateName("name", name));
  if (role == Role::kNone || role == Role::kNode) {
    return Status::InvalidArgument("role: expected admin, user or provider");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (AccountLocked(name) != nullptr) {
    return Status::AlreadyExists("an account named " + name + " exists");
  }
  if (accounts_.size() >= kMaxAccounts) {
    return Status::ResourceExhausted("this server holds its maximum of " +
                                     std::to_string(kMaxAccounts) + " accounts");
  }
  store::AccountRecord rec{"acct-" + RandomHex(6), name,      std::string(Name(role)), false,
                           clock_->NowMillis(),    creator_id};
  // Issue 14: a new user starts with the server's default credit limit (0: prepaid); admins and
  // providers are not limited (admins operate the server; providers are paid, not billed).
  rec.credit_limit_micros = role == Role::kUser ? default_credit_limit_ : -1;
  store::WriteBatch batch;
  batch.accounts.push_back(rec);
  SLUICE_RETURN_IF_ERROR(store_->Write(batch));
  accounts_[rec.id] = rec;
  return rec;
}

std::vector<store::AccountRecord> Accounts::ListAccounts() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<store::AccountRecord> out;
  for (const auto& [id, acc] : accounts_) out.push_back(acc);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.created_ms != b.created_ms ? a.created_ms < b.created_ms : a.name < b.name;
  });
  return out;
}

std::optional<store::AccountRecord> Accounts::FindAccount(const std::string& name_or_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  const store::AccountRecord* acc = AccountLocked(name_or_id);
  if (acc == nullptr) return std::nullopt;
  return *acc;
}

Result<store::AccountRecord> Accounts::SetDisabled(const std::string& name_or_id, bool disabled) {
  std::lock_guard<std::mutex> lock(mu_);
  const store::AccountRecord* acc = AccountLocked(name_or_id);
  if (acc == nullptr) return Status::NotFound("no account " + name_or_id);
  if (acc->id == admin_id_ && disabled) {
    return Status::FailedPrecondition("the first admin account cannot be disabled");
  }
  store::AccountRecord rec = *acc;
  rec.disabled = disabled;
  store::WriteBatch batch;
  batch.accounts.push_back(rec);
  SLUICE_RETURN_IF_ERROR(store_->Write(batch));
  accounts_[rec.id] = rec;
  return rec;
}

Result<store::AccountRecord> Accounts::SetCreditLimit(const std::string& name_or_id,
                                                      int64_t limit_micros) {
  if (limit_micros < -1) return Status::InvalidArgument("credit_limit: not below zero");
  std::lock_guard<std::mutex> lock(mu_);
  const store::AccountRecord* acc = AccountLocked(name_or_id);
  if (acc == nullptr) return Status::NotFound("no account " + name_or_id);
  store::AccountRecord rec = *acc;
  rec.credit_limit_micros = limit_micros;
  store::WriteBatch batch;
  batch.accounts.push_back(rec);
  SLUICE_RETURN_IF_ERROR(store_->Write(batch));
  accounts_[rec.id] = rec;
  return rec;
}

int64_t Accounts::CreditLimitOf(const std::string& account_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = accounts_.find(account_id);
  return it != accounts_.end() ? it->second.credit_limit_micros : -1;
}

Result<MintedToken> Accounts::CreateToken(const std::string& account_id, const std::string& kind,
                                          Scope scope, const std::string& name, int64_t ttl_ms) {
  if (kind != "api" && kind != "join") {
    return Status::InvalidArgument("kind: expected api or join");
  }
  if (name.size() > kMaxTokenNameBytes) {
    return Status::InvalidArgument("name: at most " + std::to_string(kMaxTokenNameBytes) +
                                   " bytes");
  }
  if (ttl_ms < 0 || ttl_ms > 10LL * 365 * 86400 * 1000) {
    return Status::InvalidArgument("ttl: expected 0 (never expires) up to 10 years");
  }
  std::lock_guard<std::mutex> lock(mu_);
  const store::AccountRecord* acc = AccountLocked(account_id);
  if (acc == nullptr) return Status::NotFound("no account " + account_id);
  if (acc->disabled) return Status::FailedPrecondition("account " + acc->name + " is disabled");
  if (kind == "join" && acc->role != "provider") {
    return Status::InvalidArgument("join tokens belong to provider accounts; " + acc->name +
                                   " is a " + acc->role);
  }
  size_t held = 0;
  for (const auto& [id, t] : tokens_) held += t.account_id == acc->id && t.kind != "node";
  if (held >= kMaxTokensPerAccount) {
    return Status::ResourceExhausted("account " + acc->name + " holds its maximum of " +
                                     std::to_string(kMaxTokensPerAccount) +
                                     " tokens; revoke some first");
  }
  MintedToken m;
  m.secret = NewSecret(kind == "join" ? "join" : "tok");
  m.record.id = (kind == "join" ? "join-" : "tok-") + RandomHex(4);
  m.record.kind = kind;
  m.record.sha256 = Sha256Hex(m.secret);
  m.record.created_ms = clock_->NowMillis();
  m.record.account_id = acc->id;
  m.record.scope = kind == "join" ? "join" : std::string(Name(scope));
  m.record.name = name;
  m.record.expires_ms = ttl_ms > 0 ? m.record.created_ms + ttl_ms : 0;
  store::WriteBatch batch;
  batch.tokens.push_back(m.record);
  SLUICE_RETURN_IF_ERROR(store_->Write(batch));
  IndexLocked(m.record);
  return m;
}

std::vector<TokenView> Accounts::ListTokens(const std::string& account_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<TokenView> out;
  for (const auto& [id, t] : tokens_) {
    if (t.kind == "node") continue;
    if (!account_id.empty() && t.account_id != account_id) continue;
    const store::AccountRecord* acc = AccountLocked(t.account_id);
    out.push_back({t, acc ? acc->name : ""});
  }
  std::sort(out.begin(), out.end(), [](const TokenView& a, const TokenView& b) {
    return a.record.created_ms != b.record.created_ms ? a.record.created_ms < b.record.created_ms
                                                      : a.record.id < b.record.id;
  });
  return out;
}

std::optional<store::TokenRecord> Accounts::FindToken(const std::string& token_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tokens_.find(token_id);
  if (it == tokens_.end()) return std::nullopt;
  return it->second;
}

Result<store::TokenRecord> Accounts::RevokeToken(const std::string& token_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tokens_.find(token_id);
  if (it == tokens_.end() || it->second.kind == "node") {
    return Status::NotFound("no token " + token_id);
  }
  store::TokenRecord rec = it->second;
  if (rec.revoked_ms != 0) return rec;  // revoking twice is harmless
  rec.revoked_ms = clock_->NowMillis();
  store::WriteBatch batch;
  batch.tokens.push_back(rec);
  SLUICE_RETURN_IF_ERROR(store_->Write(batch));
  IndexLocked(rec);
  return rec;
}

MintedToken Accounts::NewNodeCredential(const std::string& node_id,
                                        const std::string& owner_account) {
  MintedToken m;
  m.secret = NewSecret("node");
  m.record.id = "cred-" + RandomHex(4);
  m.record.kind = "node";
  m.record.sha256 = Sha256Hex(m.secret);
  m.record.created_ms = clock_->NowMillis();
  m.record.account_id = owner_account;
  m.record.scope = "node";
  m.record.name = node_id;
  m.record.node_id = node_id;
  return m;
}

std::vector<store::TokenRecord> Accounts::RevocationsForNode(const std::string& node_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<store::TokenRecord> out;
  int64_t now = clock_->NowMillis();
  for (const auto& [id, t] : tokens_) {
    if (t.kind != "node" || t.node_id != node_id || t.revoked_ms != 0) continue;
    store::TokenRecord r = t;
    r.revoked_ms = now;
    out.push_back(r);
  }
  return out;
}

void Accounts::Apply(const std::vector<store::TokenRecord>& committed) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& t : committed) IndexLocked(t);
}

Status Accounts::AddTeamMember(const std::string& team, const std::string& account_id) {
  SLUICE_RETURN_IF_ERROR(ValidateName("team", team));
  std::lock_guard<std::mutex> lock(mu_);
  const store::AccountRecord* acc = AccountLocked(account_id);
  if (acc == nullptr) return Status::NotFound("no account " + account_id);
  store::WriteBatch batch;
  batch.team_members.push_back({team, acc->id, clock_->NowMillis(), false});
  SLUICE_RETURN_IF_ERROR(store_->Write(batch));
  teams_[team].insert(acc->id);
  return Status::Ok();
}

Status Accounts::RemoveTeamMember(const std::string& team, const std::string& account_id) {
  std::lock_guard<std::mutex> lock(mu_);
  const store::AccountRecord* acc = AccountLocked(account_id);
  if (acc == nullptr) return Status::NotFound("no account " + account_id);
  auto it = teams_.find(team);
  if (it == teams_.end() || !it->second.count(acc->id)) {
    return Status::NotFound(acc->name + " is not in team " + team);
  }
  store::WriteBatch batch;
  batch.team_members.push_back({team, acc->id, 0, true});
  SLUICE_RETURN_IF_ERROR(store_->Write(batch));
  it->second.erase(acc->id);
  if (it->second.empty()) teams_.erase(it);
  return Status::Ok();
}

std::vector<std::string> Accounts::TeamsOf(const std::string& account_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [team, members] : teams_) {
    if (members.count(account_id)) out.push_back(team);
  }
  return out;
}

bool Accounts::IsTeamMember(const std::string& team, const std::string& account_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = teams_.find(team);
  return it != teams_.end() && it->second.count(account_id) > 0;
}

std::map<std::string, std::vector<std::string>> Accounts::ListTeams() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& [team, members] : teams_) {
    for (const auto& id : members) {
      const store::AccountRecord* acc = AccountLocked(id);
      out[team].push_back(acc ? acc->name : id);
    }
  }
  return out;
}

Status Accounts::RecordBlobOwner(const store::BlobOwner& row) {
  std::lock_guard<std::mutex> lock(mu_);
  if (blob_owners_.count({row.account_id, row.digest})) return Status::Ok();
  store::WriteBatch batch;
  batch.blob_owners.push_back(row);
  SLUICE_RETURN_IF_ERROR(store_->Write(batch));
  blob_owners_.emplace(std::pair{row.account_id, row.digest}, row);
  blob_bytes_[row.account_id] += static_cast<uint64_t>(row.size);
  return Status::Ok();
}

bool Accounts::OwnsBlob(const std::string& owner, const std::string& digest) const {
  std::lock_guard<std::mutex> lock(mu_);
  return blob_owners_.count({owner, digest}) > 0;
}

std::vector<store::BlobOwner> Accounts::Uploads() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<store::BlobOwner> out;
  out.reserve(blob_owners_.size());
  for (const auto& [key, row] : blob_owners_) out.push_back(row);
  return out;
}

Status Accounts::DropUploads(const std::vector<store::BlobOwner>& rows) {
  if (rows.empty()) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  store::WriteBatch batch;
  batch.dropped_blob_owners = rows;
  SLUICE_RETURN_IF_ERROR(store_->Write(batch));
  for (const auto& r : rows) {
    auto it = blob_owners_.find({r.account_id, r.digest});
    if (it == blob_owners_.end()) continue;
    uint64_t& bytes = blob_bytes_[r.account_id];
    bytes -= std::min(bytes, static_cast<uint64_t>(it->second.size));
    blob_owners_.erase(it);
  }
  return Status::Ok();
}

uint64_t Accounts::BlobBytesOf(const std::string& owner) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blob_bytes_.find(owner);
  return it == blob_bytes_.end() ? 0 : it->second;
}

}  // namespace sluice::server
