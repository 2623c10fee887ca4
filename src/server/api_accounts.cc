// The API's account routes: whoami, accounts (admin), tokens (each account its own; admins any),
// teams (admins manage, members see theirs). Secrets appear once, in the answer that mints them.
#include "server/api.h"
#include "server/api_util.h"

namespace sluice::server {
namespace {

Json AccountToJson(const store::AccountRecord& a) {
  return Json{{"id", a.id},
              {"name", a.name},
              {"role", a.role},
              {"disabled", a.disabled},
              {"created_ms", a.created_ms}};
}

Json TokenToJson(const TokenView& t) {
  return Json{{"id", t.record.id},
              {"account", t.account_name},
              {"kind", t.record.kind},
              {"scope", t.record.scope},
              {"name", t.record.name},
              {"created_ms", t.record.created_ms},
              {"expires_ms", t.record.expires_ms},
              {"revoked_ms", t.record.revoked_ms}};
}

}  // namespace

HttpResponse Api::AccountsRoute(const Call& call, const HttpRequest& req) {
  const std::string pattern = call.route->pattern;
  const Principal& who = call.who;
  const bool admin = who.role == Role::kAdmin;

  if (pattern == "/v1/whoami") {
    Json teams = accounts_->TeamsOf(who.account_id);
    return JsonResponse(200, Json{{"account_id", who.account_id},
                                  {"account", who.account_name},
                                  {"role", std::string(Name(who.role))},
                                  {"scope", std::string(Name(who.scope))},
                                  {"token_id", who.token_id},
                                  {"teams", teams}});
  }
  if (pattern == "/v1/accounts" && req.method == "GET") {
    Json arr = Json::array();
    for (const auto& a : accounts_->ListAccounts()) {
      Json row = AccountToJson(a);
      const Json money = AccountMoneyJson(a);
      for (const char* k : {"balance_micros", "balance", "credit_limit_micros", "credit_limit"}) {
        row[k] = money.at(k);
      }
      arr.push_back(std::move(row));
    }
    return JsonResponse(200, Json{{"accounts", arr}});
  }
  if (pattern == "/v1/accounts") {
    auto body = ObjectBody(req);
    if (!body.ok()) return ErrorResponse(body.status());
    if (Status s = OnlyFields(*body, {"name", "role"}); !s.ok()) return ErrorResponse(s);
    auto name = GetString(*body, "name");
    if (!name.ok()) return ErrorResponse(name.status());
    auto role_text = GetStringOr(*body, "role", "user");
    if (!role_text.ok()) return ErrorResponse(role_text.status());
    auto role = ParseAccountRole(*role_text);
    if (!role.ok()) return ErrorResponse(role.status());
    auto acc = accounts_->CreateAccount(*name, *role, who.account_id);
    if (!acc.ok()) return ErrorResponse(acc.status());
    // A new account comes with one full token, so the admin can hand it over at once.
    auto tok = accounts_->CreateToken(acc->id, "api", Scope::kFull, "first token", 0);
    if (!tok.ok()) return ErrorResponse(tok.status());
    Json out{{"account", AccountToJson(*acc)},
             {"token", TokenToJson({tok->record, acc->name})},
             {"secret", tok->secret}};
    return JsonResponse(201, out);
  }
  if (pattern == "/v1/accounts/{account}/disable" || pattern == "/v1/accounts/{account}/enable") {
    bool disable = pattern.ends_with("/disable");
    auto acc = accounts_->SetDisabled(call.params.at("account"), disable);
    if (!acc.ok()) return ErrorResponse(acc.status());
    return JsonResponse(200, Json{{"account", AccountToJson(*acc)}});
  }
  if (pattern == "/v1/tokens" && req.method == "GET") {
    std::string account = who.account_id;
    std::string filter = QueryParam(req, "account");
    if (admin) {
      account = "";
      if (!filter.empty()) {
        auto acc = accounts_->FindAccount(filter);
        if (!acc) return ErrorResponse(Status::NotFound("no account " + filter));
        account = acc->id;
      }
    } else if (!filter.empty() && filter != who.account_name && filter != who.account_id) {
      return ErrorResponse(Status::PermissionDenied("only admins list other accounts' tokens"));
    }
    Json arr = Json::array();
    for (const auto& t : accounts_->ListTokens(account)) arr.push_back(TokenToJson(t));
    return JsonResponse(200, Json{{"tokens", arr}});
  }
  if (pattern == "/v1/tokens") {
    auto body = ObjectBody(req);
    if (!body.ok()) return ErrorResponse(body.status());
    if (Status s = OnlyFields(*body, {"name", "scope", "ttl_s", "kind", "account"}); !s.ok()) {
      return ErrorResponse(s);
    }
    auto name = GetStringOr(*body, "name", "");
    auto scope_text = GetStringOr(*body, "scope", "full");
    auto kind = GetStringOr(*body, "kind", "api");
    auto account = GetStringOr(*body, "account", "");
    for (const auto* r : {&name, &scope_text, &kind, &account}) {
      if (!r->ok()) return ErrorResponse(r->status());
    }
    auto scope = ParseTokenScope(*scope_text);
    if (!scope.ok()) return ErrorResponse(scope.status());
    int64_t ttl_ms = 0;
    if (body->contains("ttl_s")) {
      const Json& t = (*body)["ttl_s"];
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > 10LL * 365 * 86400) {
        return ErrorResponse(Status::InvalidArgument(
            "ttl_s: expected whole seconds from 0 (never expires) to 10 years"));
      }
      ttl_ms = t.get<int64_t>() * 1000;
    }
    std::string target = who.account_id;
    if (!account->empty() && *account != who.account_name && *account != who.account_id) {
      if (!admin) {
        return ErrorResponse(
            Status::PermissionDenied("only admins create tokens for other accounts"));
      }
      auto acc = accounts_->FindAccount(*account);
      if (!acc) return ErrorResponse(Status::NotFound("no account " + *account));
      target = acc->id;
    }
    // A token never grants more than the one that asked for it: a read token cannot mint.
    auto tok = accounts_->CreateToken(target, *kind, *scope, *name, ttl_ms);
    if (!tok.ok()) return ErrorResponse(tok.status());
    auto acc = accounts_->FindAccount(target);
    return JsonResponse(201, Json{{"token", TokenToJson({tok->record, acc ? acc->name : ""})},
                                  {"secret", tok->secret}});
  }
  if (pattern == "/v1/tokens/{token}/revoke") {
    const std::string& id = call.params.at("token");
    auto tok = accounts_->FindToken(id);
    // Another account's token is "not found", so token ids reveal nothing.
    if (!tok || tok->kind == "node" || (!admin && tok->account_id != who.account_id)) {
      return ErrorResponse(Status::NotFound("no token " + id));
    }
    auto revoked = accounts_->RevokeToken(id);
    if (!revoked.ok()) return ErrorResponse(revoked.status());
    auto acc = accounts_->FindAccount(revoked->account_id);
    return JsonResponse(200, Json{{"token", TokenToJson({*revoked, acc ? acc->name : ""})}});
  }
  if (pattern == "/v1/teams") {
    Json out = Json::object();
    for (const auto& [team, members] : accounts_->ListTeams()) {
      if (!admin && !accounts_->IsTeamMember(team, who.account_id)) continue;
      out[team] = members;
    }
    return JsonResponse(200, Json{{"teams", out}});
  }
  if (pattern == "/v1/teams/{team}/members") {
    auto body = ObjectBody(req);
    if (!body.ok()) return ErrorResponse(body.status());
    if (Status s = OnlyFields(*body, {"account"}); !s.ok()) return ErrorResponse(s);
    auto account = GetString(*body, "account");
    if (!account.ok()) return ErrorResponse(account.status());
    Status s = accounts_->AddTeamMember(call.params.at("team"), *account);
    if (!s.ok()) return ErrorResponse(s);
    return JsonResponse(200, Json{{"team", call.params.at("team")}, {"added", *account}});
  }
  if (pattern == "/v1/teams/{team}/members/{account}") {
    Status s = accounts_->RemoveTeamMember(call.params.at("team"), call.params.at("account"));
    if (!s.ok()) return ErrorResponse(s);
    return JsonResponse(
        200, Json{{"team", call.params.at("team")}, {"removed", call.params.at("account")}});
  }
  return ErrorResponse(Status::Internal("route " + pattern + " has no handler"));
}

}  // namespace sluice::server
