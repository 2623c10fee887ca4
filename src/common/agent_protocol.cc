#include "common/agent_protocol.h"

#include <cmath>

namespace sluice::proto {
namespace {

Result<std::map<std::string, std::string>> StringMap(const Json& j, const char* field) {
  std::map<std::string, std::string> out;
  if (!j.contains(field) || j[field].is_null()) return out;
  if (!j[field].is_object())
    return Status::InvalidArgument(std::string(field) + ": expected an object");
  for (auto it = j[field].begin(); it != j[field].end(); ++it) {
    if (!it.value().is_string()) {
      return Status::InvalidArgument(std::string(field) + "." + it.key() + ": expected a string");
    }
    out[it.key()] = it.value().get<std::string>();
  }
  return out;
}

Result<std::vector<int>> IntList(const Json& j, const char* field) {
  std::vector<int> out;
  if (!j.contains(field) || j[field].is_null()) return out;
  if (!j[field].is_array())
    return Status::InvalidArgument(std::string(field) + ": expected an array");
  for (const auto& v : j[field]) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1024) {
      return Status::InvalidArgument(std::string(field) + ": expected GPU indices");
    }
    out.push_back(v.get<int>());
  }
  return out;
}

}  // namespace

Json ToJson(const Hello& m) {
  Json claims = Json::array();
  for (const auto& c : m.claims) claims.push_back(Json{{"label", c.label}, {"count", c.count}});
  Json attempts = Json::array();
  for (const auto& a : m.attempts) {
    Json r{{"attempt_id", a.attempt_id},
           {"running", a.running},
           {"signal", a.signal},
           {"error", a.error},
           {"lost", a.lost}};
    if (a.exit_code) r["exit_code"] = *a.exit_code;
    attempts.push_back(r);
  }
  return Json{{"type", "hello"},
              {"node_id", m.node_id},
              {"name", m.name},
              {"inventory", ToJson(m.inventory)},
              {"price_per_gpu_hour", m.price_per_gpu_hour},
              {"price_per_cpu_hour", m.price_per_cpu_hour},
              {"interruptible_price_per_gpu_hour", m.interruptible_price_per_gpu_hour},
              {"interruptible_price_per_cpu_hour", m.interruptible_price_per_cpu_hour},
              {"region", m.region},
              {"agent_version", m.agent_version},
              {"attempts", attempts},
              {"claims", claims}};
}

Result<Hello> HelloFromJson(const Json& j) {
  Hello m;
  SLUICE_ASSIGN_OR_RETURN(m.node_id, GetStringOr(j, "node_id", ""));
  SLUICE_ASSIGN_OR_RETURN(m.name, GetStringOr(j, "name", ""));
  if (!j.contains("inventory"))
    return Status::InvalidArgument("inventory: required field is missing");
  SLUICE_ASSIGN_OR_RETURN(m.inventory, InventoryFromJson(j["inventory"]));
  SLUICE_ASSIGN_OR_RETURN(m.price_per_gpu_hour, GetNumberOr(j, "price_per_gpu_hour", 0));
  SLUICE_ASSIGN_OR_RETURN(m.price_per_cpu_hour, GetNumberOr(j, "price_per_cpu_hour", 0));
  SLUICE_ASSIGN_OR_RETURN(m.interruptible_price_per_gpu_hour,
                          GetNumberOr(j, "interruptible_price_per_gpu_hour", 0));
  SLUICE_ASSIGN_OR_RETURN(m.interruptible_price_per_cpu_hour,
                          GetNumberOr(j, "interruptible_price_per_cpu_hour", 0));
  if (m.interruptible_price_per_gpu_hour < 0 || m.interruptible_price_per_cpu_hour < 0) {
    return Status::InvalidArgument("interruptible prices: must not be negative");
  }
  if (m.price_per_gpu_hour < 0 || m.price_per_cpu_hour < 0) {
    return Status::InvalidArgument("price_per_gpu_hour/price_per_cpu_hour: must not be negative");
  }
  // Bounds a provider cannot pass (issue 10 item 5): a price of 1e308 or a 3 MB name would
  // otherwise reach every listing and every cost estimate.
  for (auto [field, v] :
       {std::pair{"price_per_gpu_hour", m.price_per_gpu_hour},
        std::pair{"price_per_cpu_hour", m.price_per_cpu_hour},
        std::pair{"interruptible_price_per_gpu_hour", m.interruptible_price_per_gpu_hour},
        std::pair{"interruptible_price_per_cpu_hour", m.interruptible_price_per_cpu_hour}}) {
    if (!std::isfinite(v) || v > kMaxPricePerHour) {
      return Status::InvalidArgument(std::string(field) + ": expected a price from 0 to " +
                                     std::to_string(static_cast<int>(kMaxPricePerHour)) +
                                     " USD per hour");
    }
  }
  if (m.node_id.size() > 64) return Status::InvalidArgument("node_id: at most 64 characters");
  if (m.name.size() > kMaxNodeNameBytes) {
    return Status::InvalidArgument("name: at most " + std::to_string(kMaxNodeNameBytes) + " bytes");
  }
  SLUICE_ASSIGN_OR_RETURN(m.region, GetStringOr(j, "region", ""));
  if (m.region.size() > 64) return Status::InvalidArgument("region: at most 64 bytes");
  SLUICE_ASSIGN_OR_RETURN(m.agent_version, GetStringOr(j, "agent_version", ""));
  if (m.agent_version.size() > 64) {
    return Status::InvalidArgument("agent_version: at most 64 bytes");
  }
  if (j.contains("attempts") && !j["attempts"].is_null()) {
    if (!j["attempts"].is_array() || j["attempts"].size() > 10000) {
      return Status::InvalidArgument("attempts: expected an array of at most 10000 attempts");
    }
    for (const auto& a : j["attempts"]) {
      AttemptReport r;
      SLUICE_ASSIGN_OR_RETURN(r.attempt_id, GetString(a, "attempt_id", "attempts[]"));
      if (a.contains("running") && a["running"].is_boolean()) r.running = a["running"].get<bool>();
      if (a.contains("lost") && a["lost"].is_boolean()) r.lost = a["lost"].get<bool>();
      if (a.contains("exit_code") && !a["exit_code"].is_null()) {
        SLUICE_ASSIGN_OR_RETURN(int64_t code, GetInt(a, "exit_code", "attempts[]"));
        r.exit_code = static_cast<int>(code);
      }
      SLUICE_ASSIGN_OR_RETURN(int64_t sig, GetIntOr(a, "signal", 0, "attempts[]"));
      r.signal = static_cast<int>(sig);
      SLUICE_ASSIGN_OR_RETURN(r.error, GetStringOr(a, "error", "", "attempts[]"));
      m.attempts.push_back(std::move(r));
    }
  }
  if (j.contains("claims") && !j["claims"].is_null()) {
    if (!j["claims"].is_array() || j["claims"].size() > 64) {
      return Status::InvalidArgument("claims: expected an array of at most 64 claims");
    }
    for (size_t i = 0; i < j["claims"].size(); ++i) {
      std::string path = "claims[" + std::to_string(i) + "]";
      GpuClaim c;
      SLUICE_ASSIGN_OR_RETURN(c.label, GetString(j["claims"][i], "label", path));
      SLUICE_ASSIGN_OR_RETURN(int64_t count, GetIntOr(j["claims"][i], "count", 1, path));
      if (count < 1 || count > 1024) {
        return Status::InvalidArgument(path + ".count: expected 1 to 1024");
      }
      c.count = static_cast<int>(count);
      m.claims.push_back(std::move(c));
    }
  }
  return m;
}

Json ToJson(const Assign& m) {
  return Json{{"type", "assign"},
              {"attempt_id", m.attempt_id},
              {"job_id", m.job_id},
              {"run", m.run},
              {"env", m.env},
              {"gpus", m.gpus},
              {"cpus", m.cpus},
              {"memory_gb", m.memory_gb},
              {"workdir_blob", m.workdir_blob},
              {"attempt", m.attempt},
              {"checkpoint", m.checkpoint},
              {"checkpoint_interval_ms", m.checkpoint_interval_ms},
              {"grace_ms", m.grace_ms}};
}

Result<Assign> AssignFromJson(const Json& j) {
  Assign m;
  SLUICE_ASSIGN_OR_RETURN(m.attempt_id, GetString(j, "attempt_id"));
  SLUICE_ASSIGN_OR_RETURN(m.job_id, GetString(j, "job_id"));
  SLUICE_ASSIGN_OR_RETURN(m.run, GetString(j, "run"));
  SLUICE_ASSIGN_OR_RETURN(m.env, StringMap(j, "env"));
  SLUICE_ASSIGN_OR_RETURN(m.gpus, IntList(j, "gpus"));
  SLUICE_ASSIGN_OR_RETURN(int64_t cpus, GetIntOr(j, "cpus", 0));
  m.cpus = static_cast<int>(cpus);
  SLUICE_ASSIGN_OR_RETURN(m.memory_gb, GetNumberOr(j, "memory_gb", 0));
  SLUICE_ASSIGN_OR_RETURN(m.workdir_blob, GetStringOr(j, "workdir_blob", ""));
  SLUICE_ASSIGN_OR_RETURN(int64_t attempt, GetIntOr(j, "attempt", 1));
  if (attempt < 1 || attempt > 1'000'000) return Status::InvalidArgument("attempt: out of range");
  m.attempt = static_cast<int>(attempt);
  SLUICE_ASSIGN_OR_RETURN(m.checkpoint, GetStringOr(j, "checkpoint", ""));
  SLUICE_ASSIGN_OR_RETURN(m.checkpoint_interval_ms, GetIntOr(j, "checkpoint_interval_ms", 0));
  if (m.checkpoint_interval_ms < 0) {
    return Status::InvalidArgument("checkpoint_interval_ms: must not be negative");
  }
  SLUICE_ASSIGN_OR_RETURN(m.grace_ms, GetIntOr(j, "grace_ms", 30000));
  if (m.grace_ms < 0 || m.grace_ms > 3'600'000) {
    return Status::InvalidArgument("grace_ms: must be between 0 and 3600000");
  }
  return m;
}

Json ToJson(const Exited& m) {
  return Json{{"type", "exited"},
              {"attempt_id", m.attempt_id},
              {"exit_code", m.exit_code},
              {"signal", m.signal},
              {"error", m.error},
              {"checkpoint", m.checkpoint},
              {"out_of_memory", m.out_of_memory}};
}

Result<Exited> ExitedFromJson(const Json& j) {
  Exited m;
  SLUICE_ASSIGN_OR_RETURN(m.attempt_id, GetString(j, "attempt_id"));
  SLUICE_ASSIGN_OR_RETURN(int64_t code, GetInt(j, "exit_code"));
  if (code < -1 || code > 255) return Status::InvalidArgument("exit_code: out of range");
  m.exit_code = static_cast<int>(code);
  SLUICE_ASSIGN_OR_RETURN(int64_t sig, GetIntOr(j, "signal", 0));
  m.signal = static_cast<int>(sig);
  SLUICE_ASSIGN_OR_RETURN(m.error, GetStringOr(j, "error", ""));
  SLUICE_ASSIGN_OR_RETURN(m.checkpoint, GetStringOr(j, "checkpoint", ""));
  auto oom = j.find("out_of_memory");
  if (oom != j.end()) {
    if (!oom->is_boolean()) return Status::InvalidArgument("out_of_memory: must be a boolean");
    m.out_of_memory = oom->get<bool>();
  }
  return m;
}

Json LogMessage(const std::string& attempt_id, const std::vector<LogEntry>& lines) {
  Json arr = Json::array();
  for (const auto& l : lines) {
    arr.push_back(Json{{"seq", l.seq}, {"stream", l.stream}, {"ts", l.ts_ms}, {"text", l.text}});
  }
  return Json{{"type", "log"}, {"attempt_id", attempt_id}, {"lines", arr}};
}

Result<std::vector<LogEntry>> LogEntriesFromJson(const Json& j) {
  if (!j.contains("lines") || !j["lines"].is_array()) {
    return Status::InvalidArgument("lines: expected an array");
  }
  if (j["lines"].size() > kMaxLinesPerLogMessage) {
    return Status::InvalidArgument("lines: more than " + std::to_string(kMaxLinesPerLogMessage));
  }
  std::vector<LogEntry> out;
  for (const auto& l : j["lines"]) {
    LogEntry e;
    SLUICE_ASSIGN_OR_RETURN(e.seq, GetInt(l, "seq", "lines[]"));
    if (e.seq <= 0) return Status::InvalidArgument("lines[].seq: must be positive");
    SLUICE_ASSIGN_OR_RETURN(e.stream, GetString(l, "stream", "lines[]"));
    if (e.stream != "stdout" && e.stream != "stderr") {
      return Status::InvalidArgument("lines[].stream: expected stdout or stderr");
    }
    SLUICE_ASSIGN_OR_RETURN(e.ts_ms, GetIntOr(l, "ts", 0, "lines[]"));
    SLUICE_ASSIGN_OR_RETURN(e.text, GetString(l, "text", "lines[]"));
    if (e.text.size() > kMaxLogLineBytes) e.text.resize(kMaxLogLineBytes);
    out.push_back(std::move(e));
  }
  return out;
}

// --- the small messages

namespace {

Json Typed(const char* type, Json fields) {
  fields["type"] = type;
  return fields;
}

// An integer field that must not be negative (lengths, sequence numbers).
Result<int64_t> NonNegative(const Json& j, const char* key, int64_t fallback) {
  SLUICE_ASSIGN_OR_RETURN(int64_t v, GetIntOr(j, key, fallback));
  if (v < 0) return Status::InvalidArgument(std::string(key) + ": must not be negative");
  return v;
}

}  // namespace

Json ToJson(const Heartbeat& m) { return Typed("heartbeat", {{"seq", m.seq}}); }
Json ToJson(const ConformanceMessage& m) {
  return Typed("conformance", {{"report", m.report}, {"nonce", m.nonce}});
}
Json ToJson(const Started& m) { return Typed("started", {{"attempt_id", m.attempt_id}}); }
Json ToJson(const CheckpointSaved& m) {
  return Typed("checkpoint", {{"attempt_id", m.attempt_id}, {"manifest", m.manifest}});
}
Json ToJson(const PreemptNotice& m) {
  return Typed("preempt_notice", {{"attempt_id", m.attempt_id}, {"cause", m.cause}});
}
Json ToJson(const Welcome& m) {
  Json j = Typed("welcome", {{"node_id", m.node_id},
                             {"heartbeat_interval_ms", m.heartbeat_interval_ms},
                             {"lease_ms", m.lease_ms},
                             {"heartbeat_grace_ms", m.heartbeat_grace_ms}});
  if (!m.credential.empty()) j["credential"] = m.credential;
  return j;
}
Json ToJson(const Reverify& m) {
  return Typed("reverify", {{"reason", m.reason}, {"nonce", m.nonce}});
}
Json CancelMessage(const Stop& m) {
  return Typed("cancel", {{"attempt_id", m.attempt_id}, {"grace_ms", m.grace_ms}});
}
Json PreemptMessage(const Stop& m) {
  return Typed("preempt",
               {{"attempt_id", m.attempt_id}, {"grace_ms", m.grace_ms}, {"cause", m.cause}});
}
Json ToJson(const Kill& m) {
  return Typed("kill", {{"attempt_id", m.attempt_id}, {"reason", m.reason}});
}
Json ToJson(const Lease& m) {
  return Typed("lease", {{"seq", m.seq}, {"lease_ms", m.lease_ms}, {"attempts", m.attempts}});
}
Json ToJson(const LogAck& m) {
  return Typed("log_ack", {{"attempt_id", m.attempt_id}, {"seq", m.seq}});
}
Json ToJson(const ExitAck& m) { return Typed("exit_ack", {{"attempt_id", m.attempt_id}}); }
Json ToJson(const ErrorMessage& m) {
  return Typed("error", {{"code", m.code}, {"message", m.message}});
}

Result<Heartbeat> HeartbeatFromJson(const Json& j) {
  Heartbeat m;
  // A heartbeat without a number is still a sign of life; its lease reply then renews nothing.
  auto seq = j.find("seq");
  if (seq != j.end() && seq->is_number_integer()) m.seq = seq->get<int64_t>();
  return m;
}
Result<ConformanceMessage> ConformanceFromJson(const Json& j) {
  ConformanceMessage m;
  auto report = j.find("report");
  if (report == j.end()) return Status::InvalidArgument("conformance: report is missing");
  m.report = *report;
  SLUICE_ASSIGN_OR_RETURN(m.nonce, GetStringOr(j, "nonce", ""));
  return m;
}
Result<Started> StartedFromJson(const Json& j) {
  Started m;
  SLUICE_ASSIGN_OR_RETURN(m.attempt_id, GetString(j, "attempt_id"));
  return m;
}
Result<CheckpointSaved> CheckpointSavedFromJson(const Json& j) {
  CheckpointSaved m;
  SLUICE_ASSIGN_OR_RETURN(m.attempt_id, GetString(j, "attempt_id"));
  SLUICE_ASSIGN_OR_RETURN(m.manifest, GetString(j, "manifest"));
  return m;
}
Result<PreemptNotice> PreemptNoticeFromJson(const Json& j) {
  PreemptNotice m;
  SLUICE_ASSIGN_OR_RETURN(m.attempt_id, GetString(j, "attempt_id"));
  SLUICE_ASSIGN_OR_RETURN(m.cause, GetStringOr(j, "cause", "notice from the agent"));
  if (m.cause.size() > 300) m.cause.resize(300);
  return m;
}
Result<Welcome> WelcomeFromJson(const Json& j) {
  Welcome m;
  SLUICE_ASSIGN_OR_RETURN(m.node_id, GetString(j, "node_id"));
  SLUICE_ASSIGN_OR_RETURN(m.heartbeat_interval_ms, NonNegative(j, "heartbeat_interval_ms", 3000));
  SLUICE_ASSIGN_OR_RETURN(m.lease_ms, NonNegative(j, "lease_ms", 0));
  SLUICE_ASSIGN_OR_RETURN(m.heartbeat_grace_ms, NonNegative(j, "heartbeat_grace_ms", 0));
  SLUICE_ASSIGN_OR_RETURN(m.credential, GetStringOr(j, "credential", ""));
  return m;
}
Result<Reverify> ReverifyFromJson(const Json& j) {
  Reverify m;
  SLUICE_ASSIGN_OR_RETURN(m.reason, GetStringOr(j, "reason", ""));
  SLUICE_ASSIGN_OR_RETURN(m.nonce, GetStringOr(j, "nonce", ""));
  return m;
}
Result<Stop> StopFromJson(const Json& j) {
  Stop m;
  SLUICE_ASSIGN_OR_RETURN(m.attempt_id, GetString(j, "attempt_id"));
  SLUICE_ASSIGN_OR_RETURN(m.grace_ms, NonNegative(j, "grace_ms", 10000));
  SLUICE_ASSIGN_OR_RETURN(m.cause, GetStringOr(j, "cause", ""));
  return m;
}
Result<Kill> KillFromJson(const Json& j) {
  Kill m;
  SLUICE_ASSIGN_OR_RETURN(m.attempt_id, GetString(j, "attempt_id"));
  SLUICE_ASSIGN_OR_RETURN(m.reason, GetStringOr(j, "reason", ""));
  return m;
}
Result<Lease> LeaseFromJson(const Json& j) {
  Lease m;
  SLUICE_ASSIGN_OR_RETURN(m.seq, NonNegative(j, "seq", 0));
  SLUICE_ASSIGN_OR_RETURN(m.lease_ms, NonNegative(j, "lease_ms", 0));
  auto list = j.find("attempts");
  if (list != j.end()) {
    if (!list->is_array()) return Status::InvalidArgument("attempts: must be an array");
    for (size_t i = 0; i < list->size(); ++i) {
      if (!(*list)[i].is_string()) {
        return Status::InvalidArgument("attempts[" + std::to_string(i) + "]: must be a string");
      }
      m.attempts.push_back((*list)[i].get<std::string>());
    }
  }
  return m;
}
Result<LogAck> LogAckFromJson(const Json& j) {
  LogAck m;
  SLUICE_ASSIGN_OR_RETURN(m.attempt_id, GetString(j, "attempt_id"));
  SLUICE_ASSIGN_OR_RETURN(m.seq, GetIntOr(j, "seq", 0));
  return m;
}
Result<ExitAck> ExitAckFromJson(const Json& j) {
  ExitAck m;
  SLUICE_ASSIGN_OR_RETURN(m.attempt_id, GetString(j, "attempt_id"));
  return m;
}
Result<ErrorMessage> ErrorFromJson(const Json& j) {
  ErrorMessage m;
  SLUICE_ASSIGN_OR_RETURN(m.code, GetStringOr(j, "code", ""));
  SLUICE_ASSIGN_OR_RETURN(m.message, GetStringOr(j, "message", ""));
  return m;
}

Result<AgentMessage> AgentMessageFromJson(const Json& j) {
  if (!j.is_object()) return Status::InvalidArgument("expected a JSON object");
  SLUICE_ASSIGN_OR_RETURN(std::string type, GetString(j, "type"));
  if (type == "heartbeat") return AgentMessage{*HeartbeatFromJson(j)};
  if (type == "conformance") {
    SLUICE_ASSIGN_OR_RETURN(auto m, ConformanceFromJson(j));
    return AgentMessage{std::move(m)};
  }
  if (type == "started") {
    SLUICE_ASSIGN_OR_RETURN(auto m, StartedFromJson(j));
    return AgentMessage{std::move(m)};
  }
  if (type == "log") {
    LogBatch m;
    SLUICE_ASSIGN_OR_RETURN(m.attempt_id, GetString(j, "attempt_id"));
    SLUICE_ASSIGN_OR_RETURN(m.lines, LogEntriesFromJson(j));
    return AgentMessage{std::move(m)};
  }
  if (type == "checkpoint") {
    SLUICE_ASSIGN_OR_RETURN(auto m, CheckpointSavedFromJson(j));
    return AgentMessage{std::move(m)};
  }
  if (type == "preempt_notice") {
    SLUICE_ASSIGN_OR_RETURN(auto m, PreemptNoticeFromJson(j));
    return AgentMessage{std::move(m)};
  }
  if (type == "exited") {
    SLUICE_ASSIGN_OR_RETURN(auto m, ExitedFromJson(j));
    return AgentMessage{std::move(m)};
  }
  return Status::InvalidArgument("type: unknown message type `" + type.substr(0, 64) + "`");
}

}  // namespace sluice::proto
