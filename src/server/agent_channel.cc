// The agent channel's HTTP face: the WebSocket upgrade at /v1/agent/connect, the `hello` that
// must come first (enrolment or proof of a node credential), then every later message handed to
// the core. See docs/design-notes.md "Node identity".
#include <atomic>

#include "server/api.h"
#include "server/audit_trail.h"

namespace sluice::server {
namespace {

// The agent's end of the WebSocket as the core sees it.
class WsLink final : public AgentLink {
 public:
  explicit WsLink(std::shared_ptr<WsConnection> conn) : conn_(std::move(conn)) {}
  void Send(const Json& message) override { conn_->Send(DumpJson(message)); }
  void Close() override { conn_->Close(); }

 private:
  std::shared_ptr<WsConnection> conn_;
};

// One agent connection: the first message must be `hello`; later ones go to the core.
struct AgentSession {
  std::shared_ptr<WsLink> link;
  std::string node_id;         // set by hello; touched only from this connection's handler
  AgentIdentity identity;      // what the upgrade request's token proved
  std::string actor;           // that token as the audit log names it (Principal::Actor)
  std::atomic<int> errors{0};  // the inbox thread reports outcomes too
};

// Tells the agent why a message failed; a fatal failure, or too many, close the connection.
void Fail(const std::shared_ptr<WsConnection>& c, AgentSession& session, const Status& s,
          bool fatal) {
  c->Send(DumpJson(
      proto::ToJson(proto::ErrorMessage{std::string(StatusCodeName(s.code())), s.message()})));
  if (fatal || ++session.errors > 100) c->Close();
}

}  // namespace

Result<WsHandler> Api::Upgrade(const HttpRequest& req, const std::shared_ptr<WsConnection>& conn) {
  if (req.path != "/v1/agent/connect") {
    return Status::NotFound("no WebSocket endpoint at " + req.path);
  }
  Principal who = accounts_->Authenticate(req.Header("authorization"));
  if (!who.authenticated()) {
    CountRefusal(req);
    return Status::Unauthenticated(
        "the agent channel needs a provider join token or this node's "
        "credential (" +
        who.refusal + " token)");
  }
  if (who.role != Role::kNode && who.scope != Scope::kJoin) {
    CountRefusal(req);
    return Status::PermissionDenied(
        "the agent channel needs a provider join token or a node credential, not an account "
        "token");
  }
  auto session = std::make_shared<AgentSession>();
  session->identity.account_id = who.account_id;
  session->identity.token_id = who.token_id;
  session->identity.node_id = who.node_id;
  session->actor = who.Actor();
  session->link = std::make_shared<WsLink>(conn);
  WsHandler h;
  ServerCore* core = core_;
  h.on_message = [core, session](const std::shared_ptr<WsConnection>& c, std::string_view text) {
    auto fail = [&](const Status& s, bool fatal) {
      // After hello, messages are answered by the inbox in order: an error about this one
      // (and a close) goes out after the answers to those before it.
      if (session->node_id.empty() ||
          !core->PostAgentBarrier(session->node_id,
                                  [c, session, s, fatal] { Fail(c, *session, s, fatal); })
               .ok()) {
        Fail(c, *session, s, fatal || !session->node_id.empty());
      }
    };
    auto msg = ParseJson(text);
    if (!msg.ok() || !msg->is_object()) {
      fail(msg.ok() ? Status::InvalidArgument("expected a JSON object") : msg.status(), true);
      return;
    }
    auto type = GetString(*msg, "type");
    if (!type.ok()) return fail(type.status(), true);
    if (session->node_id.empty()) {
      if (*type != "hello") return fail(Status::FailedPrecondition("say hello first"), true);
      auto hello = proto::HelloFromJson(*msg);
      if (!hello.ok()) return fail(hello.status(), true);
      // Only a credential proves which node this is; a join token's hello names any id.
      if (!session->identity.node_id.empty() && hello->node_id == session->identity.node_id) {
        core->NoteAgentHello(hello->node_id);
      }
      auto node = core->AgentHello(session->link, *hello, session->identity);
      // A refused hello is recorded under the token that made it, never under the node it
      // named: that node may be the victim of an impersonation attempt (PermissionDenied).
      const bool impersonation =
          !node.ok() && node.status().code() == StatusCode::kPermissionDenied;
      store::AuditEntry entry;
      entry.actor = node.ok() ? "agent:" + *node : session->actor;
      entry.source = c->remote_addr();
      entry.action = impersonation ? "agent.impersonation" : "agent.hello";
      entry.target = node.ok() ? *node : hello->node_id;
      entry.params = Json{{"name", hello->name},
                          {"claims", ToJson(*hello)["claims"]},
                          {"gpus", hello->inventory.gpus.size()},
                          {"driver", hello->inventory.driver_version},
                          {"agent_version", hello->agent_version}};
      if (!node.ok()) entry.params["refused"] = node.status().message();
      if (impersonation) entry.params["impersonation"] = true;
      // Enrolment: the join token that brought the node in (its new credential is never logged).
      if (node.ok() && session->identity.node_id.empty()) {
        entry.params["enrolled_by"] = session->actor;
      }
      entry.status = node.ok() ? 200 : HttpStatusFor(node.status().code());
      (void)core->RecordAudit(std::move(entry));
      if (!node.ok()) return fail(node.status(), true);
      session->node_id = *node;
      return;
    }
    auto typed = proto::AgentMessageFromJson(*msg);
    if (!typed.ok()) return fail(typed.status(), false);
    // Queued for the core; this thread goes back to reading sockets (docs/design-notes.md
    // "Agent messages: one commit for many"). A link that no longer speaks for the node is closed.
    Status posted = core->PostAgentMessage(
        session->node_id, session->link, std::move(*typed), [c, session](const Status& s) {
          if (!s.ok()) Fail(c, *session, s, s.code() == StatusCode::kFailedPrecondition);
        });
    if (!posted.ok()) fail(posted, true);
  };
  h.on_close = [core, session](const std::shared_ptr<WsConnection>&) {
    if (!session->node_id.empty()) core->PostAgentDisconnected(session->node_id, session->link);
  };
  return h;
}

}  // namespace sluice::server
