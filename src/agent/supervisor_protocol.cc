#include "agent/supervisor_protocol.h"

#include <time.h>

namespace sluice::supervisor {
namespace {

const char* LayoutName(CgroupSupport::Layout l) {
  switch (l) {
    case CgroupSupport::Layout::kV1:
      return "v1";
    case CgroupSupport::Layout::kV2:
      return "v2";
    case CgroupSupport::Layout::kNone:
      break;
  }
  return "none";
}

// Reading a file this agent wrote: still checked, as a bad one must fail cleanly, not throw.
Result<bool> BoolOr(const Json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return Status::InvalidArgument(std::string(key) + ": expected a boolean");
  return it->get<bool>();
}

}  // namespace

Json ToJson(const Spec& s) {
  Json env = Json::object();
  for (const auto& [k, v] : s.process.env) env[k] = v;
  return Json{{"attempt_id", s.attempt_id},
              {"warm", s.warm},
              {"script", s.process.script},
              {"cwd", s.process.cwd},
              {"env", env},
              {"wrapper", s.process.wrapper},
              {"cgroups",
               {{"layout", LayoutName(s.cgroups.layout)},
                {"root", s.cgroups.root},
                {"memory", s.cgroups.memory},
                {"cpu", s.cgroups.cpu},
                {"pids", s.cgroups.pids},
                {"freezer", s.cgroups.freezer}}},
              {"first_seq", s.first_seq},
              {"lease_until", s.lease_until},
              {"kill_at", s.kill_at},
              {"agent_silence_ms", s.agent_silence_ms},
              {"max_output_bytes", s.max_output_bytes}};
}

Result<Spec> SpecFromJson(const Json& j) {
  if (!j.is_object()) return Status::InvalidArgument("spec: expected an object");
  Spec s;
  SLUICE_ASSIGN_OR_RETURN(s.attempt_id, GetString(j, "attempt_id"));
  SLUICE_ASSIGN_OR_RETURN(s.warm, BoolOr(j, "warm", false));
  SLUICE_ASSIGN_OR_RETURN(s.process.script, GetString(j, "script"));
  SLUICE_ASSIGN_OR_RETURN(s.process.cwd, GetString(j, "cwd"));
  auto env = j.find("env");
  if (env == j.end() || !env->is_object())
    return Status::InvalidArgument("env: expected an object");
  for (const auto& [k, v] : env->items()) {
    if (!v.is_string()) return Status::InvalidArgument("env." + k + ": expected a string");
    s.process.env[k] = v.get<std::string>();
  }
  auto wrapper = j.find("wrapper");
  if (wrapper != j.end() && !wrapper->is_null()) {
    if (!wrapper->is_array()) return Status::InvalidArgument("wrapper: expected an array");
    for (const auto& w : *wrapper) {
      if (!w.is_string()) return Status::InvalidArgument("wrapper: expected strings");
      s.process.wrapper.push_back(w.get<std::string>());
    }
  }
  auto cg = j.find("cgroups");
  if (cg != j.end() && cg->is_object()) {
    SLUICE_ASSIGN_OR_RETURN(std::string layout, GetStringOr(*cg, "layout", "none", "cgroups"));
    s.cgroups.layout = layout == "v1"   ? CgroupSupport::Layout::kV1
                       : layout == "v2" ? CgroupSupport::Layout::kV2
                                        : CgroupSupport::Layout::kNone;
    SLUICE_ASSIGN_OR_RETURN(s.cgroups.root, GetStringOr(*cg, "root", "", "cgroups"));
    SLUICE_ASSIGN_OR_RETURN(s.cgroups.memory, BoolOr(*cg, "memory", false));
    SLUICE_ASSIGN_OR_RETURN(s.cgroups.cpu, BoolOr(*cg, "cpu", false));
    SLUICE_ASSIGN_OR_RETURN(s.cgroups.pids, BoolOr(*cg, "pids", false));
    SLUICE_ASSIGN_OR_RETURN(s.cgroups.freezer, BoolOr(*cg, "freezer", false));
  }
  SLUICE_ASSIGN_OR_RETURN(s.first_seq, GetIntOr(j, "first_seq", 1));
  SLUICE_ASSIGN_OR_RETURN(s.lease_until, GetIntOr(j, "lease_until", kNever));
  SLUICE_ASSIGN_OR_RETURN(s.kill_at, GetIntOr(j, "kill_at", kNever));
  SLUICE_ASSIGN_OR_RETURN(s.agent_silence_ms, GetIntOr(j, "agent_silence_ms", 5000));
  SLUICE_ASSIGN_OR_RETURN(s.max_output_bytes, GetIntOr(j, "max_output_bytes", int64_t{256} << 20));
  return s;
}

Json ToJson(const Exit& e) {
  return Json{{"ev", "exit"},
              {"exit_code", e.info.exit_code},
              {"signal", e.info.signal},
              {"out_of_memory", e.out_of_memory},
              {"fenced", e.fenced},
              {"error", e.error}};
}

Result<Exit> ExitFromJson(const Json& j) {
  if (!j.is_object()) return Status::InvalidArgument("exit: expected an object");
  Exit e;
  SLUICE_ASSIGN_OR_RETURN(int64_t code, GetInt(j, "exit_code"));
  SLUICE_ASSIGN_OR_RETURN(int64_t sig, GetIntOr(j, "signal", 0));
  e.info.exit_code = static_cast<int>(code);
  e.info.signal = static_cast<int>(sig);
  SLUICE_ASSIGN_OR_RETURN(e.out_of_memory, BoolOr(j, "out_of_memory", false));
  SLUICE_ASSIGN_OR_RETURN(e.fenced, BoolOr(j, "fenced", false));
  SLUICE_ASSIGN_OR_RETURN(e.error, GetStringOr(j, "error", ""));
  return e;
}

Json LineEvent(const proto::LogEntry& e) {
  return Json{
      {"ev", "line"}, {"seq", e.seq}, {"stream", e.stream}, {"ts_ms", e.ts_ms}, {"text", e.text}};
}

Result<proto::LogEntry> LineFromJson(const Json& j) {
  if (!j.is_object()) return Status::InvalidArgument("line: expected an object");
  proto::LogEntry e;
  SLUICE_ASSIGN_OR_RETURN(e.seq, GetInt(j, "seq"));
  SLUICE_ASSIGN_OR_RETURN(e.stream, GetString(j, "stream"));
  SLUICE_ASSIGN_OR_RETURN(e.ts_ms, GetIntOr(j, "ts_ms", 0));
  SLUICE_ASSIGN_OR_RETURN(e.text, GetString(j, "text"));
  return e;
}

namespace {

// `s` up to its first NUL, single-quoted for bash: nothing inside is expanded.
std::string Quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s.substr(0, s.find('\0'))) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

}  // namespace

std::string WarmStubInput(const std::string& cwd, const std::string& script,
                          const std::map<std::string, std::string>& env) {
  // OLDPWD (set by the cd) and the stub's SHLVL are the stub's, not the job's.
  std::string job = "cd " + Quoted(cwd) + " || exit 97\nunset OLDPWD SHLVL\n";
  for (const auto& [k, v] : env) job += "export " + Quoted(k + "=" + v) + " || exit 97\n";
  job += "exec </dev/null\nexec /bin/bash -c " + Quoted(script) + "\n";
  return std::to_string(job.size()) + "\n" + job;
}

int64_t MonotonicMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1000000;
}

}  // namespace sluice::supervisor
