// `sluice whoami`, `sluice account create|list|disable|enable`, `sluice token
// create|list|revoke` and `sluice team add|remove|list` (issue 10 item 1): accounts with roles,
// scoped and expiring tokens shown once, teams that share jobs.
#include <cstdio>
#include <ctime>
#include <iostream>

#include "cli/api_client.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "common/atomic_file.h"
#include "common/crypto.h"
#include "common/token_file.h"
#include "spec/job_spec.h"

namespace sluice::cli {
namespace {

int Fail(const Status& s) {
  std::fprintf(stderr, "sluice: %s\n", s.message().c_str());
  return 1;
}

Result<std::unique_ptr<ApiClient>> Connect(const GlobalFlags& g, ClientConfig* cfg_out = nullptr) {
  SLUICE_ASSIGN_OR_RETURN(ClientConfig cfg, ResolveClientConfig(g.server, g.token));
  if (cfg_out != nullptr) *cfg_out = cfg;
  return ApiClient::Create(cfg);
}

std::string Utc(int64_t ms) {
  if (ms <= 0) return "-";
  std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
  return buf;
}

// "90d" or anything spec::ParseDurationSeconds takes ("12h", "30m", "3600").
Result<int64_t> TtlSeconds(const std::string& text) {
  if (text.empty()) return 0;
  if (text.size() > 1 && text.back() == 'd') {
    std::string days = text.substr(0, text.size() - 1);
    if (days.find_first_not_of("0123456789") == std::string::npos && days.size() <= 4) {
      return std::stoll(days) * 86400;
    }
  }
  auto s = spec::ParseDurationSeconds(text);
  if (!s.ok()) return Status::InvalidArgument("--ttl: " + s.status().message() + " (or 90d)");
  return *s;
}

// Prints the secret once, or writes a token file that `--token-file`/SLUICE_TOKEN_FILE (and for
// join tokens, `sluice agent --join-token-file`) read, with this server's URL and CA pin.
int DeliverSecret(const GlobalFlags& g, const ClientConfig& cfg, const Json& resp,
                  const std::string& out) {
  std::string secret = resp.value("secret", "");
  if (out.empty()) {
    if (g.json) {
      std::cout << DumpJson(resp, 2) << "\n";
    } else {
      std::cout << secret << "\n";
      std::fprintf(stderr, "sluice: this secret is shown once; the server keeps only its hash\n");
    }
    return 0;
  }
  TokenFile file{secret, cfg.tls.ca_sha256, cfg.server};
  if (Status s = WriteFileAtomic(out, FormatTokenFile(file), 0600); !s.ok()) {
    return Fail(s);
  }
  std::fprintf(stderr, "sluice: wrote %s (mode 0600)\n", out.c_str());
  return 0;
}

}  // namespace

int WhoamiCommand(const GlobalFlags& g) {
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  auto resp = (*api)->Get("/v1/whoami");
  if (!resp.ok()) return Fail(resp.status());
  if (g.json) {
    std::cout << DumpJson(*resp, 2) << "\n";
    return 0;
  }
  std::string teams;
  for (const auto& t : (*resp)["teams"])
    teams += (teams.empty() ? "" : ", ") + t.get<std::string>();
  std::cout << "account " << resp->value("account", "") << " (" << resp->value("account_id", "")
            << ")\nrole    " << resp->value("role", "") << "\nscope   " << resp->value("scope", "")
            << "\ntoken   " << resp->value("token_id", "") << "\nteams   "
            << (teams.empty() ? "-" : teams) << "\n";
  return 0;
}

int AccountCreateCommand(const GlobalFlags& g, const std::string& name, const std::string& role,
                         const std::string& out) {
  ClientConfig cfg;
  auto api = Connect(g, &cfg);
  if (!api.ok()) return Fail(api.status());
  auto resp = (*api)->Post("/v1/accounts", Json{{"name", name}, {"role", role}});
  if (!resp.ok()) return Fail(resp.status());
  if (!g.json) {
    std::fprintf(stderr, "sluice: created %s account %s (%s) with a full token\n", role.c_str(),
                 name.c_str(), (*resp)["account"].value("id", "").c_str());
  }
  return DeliverSecret(g, cfg, *resp, out);
}

int AccountListCommand(const GlobalFlags& g) {
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  auto resp = (*api)->Get("/v1/accounts");
  if (!resp.ok()) return Fail(resp.status());
  if (g.json) {
    std::cout << DumpJson((*resp)["accounts"], 2) << "\n";
    return 0;
  }
  Table t({"NAME", "ID", "ROLE", "STATE", "BALANCE", "CREDIT LIMIT", "CREATED"});
  for (const auto& a : (*resp)["accounts"]) {
    t.Add({a.value("name", ""), a.value("id", ""), a.value("role", ""),
           a.value("disabled", false) ? "disabled" : "active", a.value("balance", "-"),
           a.value("credit_limit", "-"), Utc(a.value("created_ms", int64_t{0}))});
  }
  t.Print(std::cout);
  return 0;
}

int AccountDisableCommand(const GlobalFlags& g, const std::string& name, bool disable) {
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  auto resp =
      (*api)->Post("/v1/accounts/" + name + (disable ? "/disable" : "/enable"), Json::object());
  if (!resp.ok()) return Fail(resp.status());
  std::cout << "account " << name
            << (disable ? " disabled: its tokens and nodes stop working\n" : " enabled\n");
  return 0;
}

int TokenCreateCommand(const GlobalFlags& g, const TokenFlags& f) {
  auto ttl = TtlSeconds(f.ttl);
  if (!ttl.ok()) {
    std::fprintf(stderr, "sluice: %s\n", ttl.status().message().c_str());
    return 2;
  }
  ClientConfig cfg;
  auto api = Connect(g, &cfg);
  if (!api.ok()) return Fail(api.status());
  Json body{{"name", f.name}, {"scope", f.scope}, {"kind", f.kind}, {"ttl_s", *ttl}};
  if (!f.account.empty()) body["account"] = f.account;
  auto resp = (*api)->Post("/v1/tokens", body);
  if (!resp.ok()) return Fail(resp.status());
  if (!g.json) {
    const Json& t = (*resp)["token"];
    std::fprintf(stderr, "sluice: created %s token %s for %s (scope %s, expires %s)\n",
                 t.value("kind", "").c_str(), t.value("id", "").c_str(),
                 t.value("account", "").c_str(), t.value("scope", "").c_str(),
                 t.value("expires_ms", int64_t{0}) ? Utc(t.value("expires_ms", int64_t{0})).c_str()
                                                   : "never");
  }
  return DeliverSecret(g, cfg, *resp, f.out);
}

int TokenListCommand(const GlobalFlags& g, const std::string& account) {
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  auto resp = (*api)->Get("/v1/tokens" + (account.empty() ? "" : "?account=" + account));
  if (!resp.ok()) return Fail(resp.status());
  if (g.json) {
    std::cout << DumpJson((*resp)["tokens"], 2) << "\n";
    return 0;
  }
  Table t({"ID", "ACCOUNT", "KIND", "SCOPE", "NAME", "CREATED", "EXPIRES", "STATE"});
  for (const auto& k : (*resp)["tokens"]) {
    int64_t revoked = k.value("revoked_ms", int64_t{0});
    int64_t expires = k.value("expires_ms", int64_t{0});
    t.Add({k.value("id", ""), k.value("account", ""), k.value("kind", ""), k.value("scope", ""),
           k.value("name", ""), Utc(k.value("created_ms", int64_t{0})),
           expires ? Utc(expires) : "never", revoked ? "revoked " + Utc(revoked) : "active"});
  }
  t.Print(std::cout);
  return 0;
}

int TokenRevokeCommand(const GlobalFlags& g, const std::string& id) {
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  auto resp = (*api)->Post("/v1/tokens/" + id + "/revoke", Json::object());
  if (!resp.ok()) return Fail(resp.status());
  std::cout << "token " << id << " revoked\n";
  return 0;
}

int TeamAddCommand(const GlobalFlags& g, const std::string& team, const std::string& account) {
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  auto resp = (*api)->Post("/v1/teams/" + team + "/members", Json{{"account", account}});
  if (!resp.ok()) return Fail(resp.status());
  std::cout << account << " added to team " << team << "\n";
  return 0;
}

int TeamRemoveCommand(const GlobalFlags& g, const std::string& team, const std::string& account) {
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  auto resp = (*api)->Delete("/v1/teams/" + team + "/members/" + account);
  if (!resp.ok()) return Fail(resp.status());
  std::cout << account << " removed from team " << team << "\n";
  return 0;
}

int TeamListCommand(const GlobalFlags& g) {
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  auto resp = (*api)->Get("/v1/teams");
  if (!resp.ok()) return Fail(resp.status());
  if (g.json) {
    std::cout << DumpJson((*resp)["teams"], 2) << "\n";
    return 0;
  }
  Table t({"TEAM", "MEMBERS"});
  for (const auto& [team, members] : (*resp)["teams"].items()) {
    std::string m;
    for (const auto& a : members) m += (m.empty() ? "" : ", ") + a.get<std::string>();
    t.Add({team, m});
  }
  if (t.empty()) {
    std::cout << "no teams\n";
    return 0;
  }
  t.Print(std::cout);
  return 0;
}

}  // namespace sluice::cli
