#include "agents_control.h"

#include <sys/resource.h>

#include <charconv>
#include <sstream>
#include <vector>

#include "common/json.h"

namespace sluice::swarm {

namespace {

Json Record(const Agent& a) {
  Json r = {{"i", a.spec.i},          {"silent", a.silent},       {"node_id", a.node_id},
            {"welcomes", a.welcomes}, {"last_sent", a.last_sent}, {"last_recv", a.last_recv},
            {"closed_at", nullptr},   {"close_how", a.close_how}};
  if (a.closed_at) r["closed_at"] = *a.closed_at;
  return r;
}

std::vector<std::string> Words(std::string_view line) {
  std::vector<std::string> out;
  std::istringstream in{std::string(line)};
  for (std::string w; in >> w;) out.push_back(std::move(w));
  return out;
}

bool ParseUint(const std::string& s, uint64_t& out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

std::string Error(const std::string& what) { return Json{{"error", what}}.dump(); }

const std::string kOk = R"({"ok":true})";

}  // namespace

double OwnCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto s = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  };
  return s(ru.ru_utime) + s(ru.ru_stime);
}

ControlReply HandleCommand(Engine& engine, std::string_view line) {
  auto words = Words(line);
  if (words.empty()) return {Error("empty command")};
  const std::string& cmd = words[0];
  const auto& agents = engine.agents();
  // The agent ids after the command, checked.
  std::vector<size_t> ids;
  std::string bad;
  auto parse_ids = [&] {
    for (size_t k = 1; k < words.size(); ++k) {
      uint64_t v = 0;
      if (!ParseUint(words[k], v) || v >= agents.size()) {
        bad = "no agent " + words[k];
        return false;
      }
      ids.push_back(v);
    }
    return true;
  };

  if (cmd == "start") {
    engine.Start();
    return {kOk};
  }
  if (cmd == "hold") {
    engine.SetHold(!(words.size() > 1 && words[1] == "off"));
    return {kOk};
  }
  if (cmd == "release") {
    return {Json{{"ok", true}, {"exited", engine.Release()}}.dump()};
  }
  if (cmd == "silence") {
    if (!parse_ids()) return {Error(bad)};
    for (size_t i : ids) engine.Silence(static_cast<int>(i));
    return {kOk};
  }
  if (cmd == "stats") {
    const auto& c = engine.counters();
    return {Json{{"welcomed", c.welcomed},
                 {"reported", c.reported},
                 {"leases", c.leases},
                 {"started", c.started},
                 {"exited", c.exited},
                 {"assigned_twice", engine.assigned_twice()},
                 {"errors", c.errors},
                 {"first_error", c.first_error},
                 {"connected", engine.connected()},
                 {"hold", engine.hold()},
                 {"cpu_s", OwnCpuSeconds()}}
                .dump()};
  }
  if (cmd == "agents") {
    if (!parse_ids()) return {Error(bad)};
    Json list = Json::array();
    if (words.size() == 1) {
      for (const auto& a : agents) list.push_back(Record(a));
    } else {
      for (size_t i : ids) list.push_back(Record(agents[i]));
    }
    return {Json{{"agents", std::move(list)}}.dump()};
  }
  if (cmd == "changed") {
    uint64_t since = 0;
    if (words.size() != 2 || !ParseUint(words[1], since)) return {Error("changed SEQ")};
    Json list = Json::array();
    for (const auto& a : agents) {
      if (a.changed > since || since == 0) list.push_back(Record(a));
    }
    return {Json{{"seq", engine.seq()}, {"agents", std::move(list)}}.dump()};
  }
  if (cmd == "assigned") {
    Json counts = Json::object();
    for (size_t k = 1; k < words.size(); ++k) counts[words[k]] = engine.Assigned(words[k]);
    return {Json{{"assigned", std::move(counts)}}.dump()};
  }
  if (cmd == "stop") {
    engine.Stop();
    return {kOk, true};
  }
  return {Error("unknown command: " + cmd)};
}

}  // namespace sluice::swarm
