// Accounts, tokens and teams (issue 10; docs/design-notes.md "Accounts and tenancy").
//
// Every request carries `Authorization: Bearer <secret>`. A secret is one of:
//   * an account token (kind "api"): a user's, a provider's or an admin's, with a scope (full,
//     read, metrics), an optional expiry, revocable;
//   * a join token (kind "join"): a provider account's, good only to enrol new nodes;
//   * a node credential (kind "node"): issued to one node at its first registration, proves that
//     node on every later connection.
// Only SHA-256 hashes of secrets are stored. The directory keeps every token, account and team
// membership in memory (looked up by hash), writes changes through the Store first and applies
// them to memory only after the commit succeeded.
//
// Thread-safe: every public method takes mu_.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "store/store.h"

namespace sluice::server {

enum class Role { kNone, kAdmin, kUser, kProvider, kNode };
enum class Scope { kFull, kRead, kMetrics, kJoin, kNode };

std::string_view Name(Role r);                      // "admin", "user", "provider", "node", "none"
std::string_view Name(Scope s);                     // "full", "read", "metrics", "join", "node"
Result<Role> ParseAccountRole(std::string_view s);  // admin | user | provider
Result<Scope> ParseTokenScope(std::string_view s);  // full | read | metrics

// Who is asking. role kNone: not authenticated (`refusal` says why).
struct Principal {
  Role role = Role::kNone;
  Scope scope = Scope::kFull;
  std::string account_id;  // kNode: the provider account that owns the node
  std::string account_name;
  std::string token_id;
  std::string node_id;  // kNode only
  std::string refusal;  // why authentication failed: "missing", "unknown", "expired", ...
  bool authenticated() const { return role != Role::kNone; }
  // For the audit log: "admin (tok-1a2b)", "node node-9f (cred-77aa)".
  std::string Actor() const;
};

// A token as `sluice token list` shows it: never its secret.
struct TokenView {
  store::TokenRecord record;
  std::string account_name;
};

// A freshly minted token: the record (as committed) and its secret, shown once.
struct MintedToken {
  store::TokenRecord record;
  std::string secret;
};

class Accounts {
 public:
  // Loads accounts, tokens and teams. On first start creates the `admin` account and the
  // built-in `provider` account (owned by admin) and writes `admin.token` and `join.token` into
  // `data_dir` (mode 0600), each with the server's CA pin when it has one (`ca_sha256`). Tokens
  // from before accounts existed are given to those two accounts.
  static Result<std::unique_ptr<Accounts>> Bootstrap(store::Store* store,
                                                     const std::string& data_dir,
                                                     const Clock* clock,
                                                     const std::string& ca_sha256 = "");

  // The principal an `Authorization` header value proves.
  Principal Authenticate(std::string_view authorization_header) const;

  // --- accounts (admin) ---
  Result<store::AccountRecord> CreateAccount(const std::string& name, Role role,
                                             const std::string& creator_id);
  std::vector<store::AccountRecord> ListAccounts() const;
  // Disables (or enables) an account: every token and node credential of it stops working.
  Result<store::AccountRecord> SetDisabled(const std::string& name_or_id, bool disabled);
  std::optional<store::AccountRecord> FindAccount(const std::string& name_or_id) const;
  // --- money (issue 14) ---
  // How far below zero an account's balance may go (micro-dollars; -1 unlimited).
  Result<store::AccountRecord> SetCreditLimit(const std::string& name_or_id, int64_t limit_micros);
  int64_t CreditLimitOf(const std::string& account_id) const;  // -1 for an unknown account
  // The limit new user accounts start with (`sluice server --default-credit-limit`; 0: prepaid).
  void SetDefaultCreditLimit(int64_t limit_micros) {
    std::lock_guard<std::mutex> lock(mu_);
    default_credit_limit_ = limit_micros;
  }

  // --- tokens ---
  // kind "api" with scope full|read|metrics, or "join" (provider accounts only). ttl_ms 0: never
  // expires.
  Result<MintedToken> CreateToken(const std::string& account_id, const std::string& kind,
                                  Scope scope, const std::string& name, int64_t ttl_ms);
  // Tokens of one account (or every account's when empty), without node credentials.
  std::vector<TokenView> ListTokens(const std::string& account_id) const;
  std::optional<store::TokenRecord> FindToken(const std::string& token_id) const;
  Result<store::TokenRecord> RevokeToken(const std::string& token_id);

  // --- node credentials ---
  // A new credential for `node_id`, owned by `owner_account`, NOT yet stored: the caller commits
  // it in the same batch as the node and then calls Apply().
  MintedToken NewNodeCredential(const std::string& node_id, const std::string& owner_account);
  // Revokes every credential of the node, as records to commit, then Apply().
  std::vector<store::TokenRecord> RevocationsForNode(const std::string& node_id) const;
  // Makes committed token records visible in memory.
  void Apply(const std::vector<store::TokenRecord>& committed);

  // --- teams ---
  Status AddTeamMember(const std::string& team, const std::string& account_id);
  Status RemoveTeamMember(const std::string& team, const std::string& account_id);
  std::vector<std::string> TeamsOf(const std::string& account_id) const;
  bool IsTeamMember(const std::string& team, const std::string& account_id) const;
  // team -> member account ids.
  std::map<std::string, std::vector<std::string>> ListTeams() const;

  // --- uploads: who sent which blob (read access and storage quotas) ---
  // `owner` is an account id, or "node:<node id>" for a node's checkpoint chunks.
  Status RecordBlobOwner(const store::BlobOwner& row);
  bool OwnsBlob(const std::string& owner, const std::string& digest) const;
  uint64_t BlobBytesOf(const std::string& owner) const;
  // Every upload row (the garbage collector's input, server/upload_gc.h).
  std::vector<store::BlobOwner> Uploads() const;
  // Forgets upload rows (their blobs were deleted): committed, then applied.
  Status DropUploads(const std::vector<store::BlobOwner>& rows);

  const std::string& admin_account_id() const { return admin_id_; }
  const std::string& builtin_provider_id() const { return provider_id_; }

 private:
  Accounts(store::Store* store, const Clock* clock) : store_(store), clock_(clock) {}
  void IndexLocked(const store::TokenRecord& t);
  const store::AccountRecord* AccountLocked(const std::string& name_or_id) const;

  store::Store* const store_;
  const Clock* const clock_;
  mutable std::mutex mu_;
  std::string admin_id_, provider_id_;  // constant after Bootstrap
  int64_t default_credit_limit_ = 0;    // guarded by mu_
  // Guarded by mu_.
  std::map<std::string, store::AccountRecord> accounts_;        // by id
  std::map<std::string, store::TokenRecord> tokens_;            // by token id
  std::unordered_map<std::string, std::string> token_by_hash_;  // sha256 -> token id
  std::map<std::string, std::set<std::string>> teams_;          // team -> account ids
  std::map<std::pair<std::string, std::string>, store::BlobOwner> blob_owners_;  // (owner, digest)
  std::map<std::string, uint64_t> blob_bytes_;                                   // owner -> bytes
};

// Account and team names: 1..64 of [a-z0-9._-], starting with a letter or digit.
Status ValidateName(std::string_view field, std::string_view name);

}  // namespace sluice::server
