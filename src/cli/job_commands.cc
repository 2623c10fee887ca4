#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "cli/api_client.h"
#include "cli/commands.h"
#include "cli/dry_run.h"
#include "cli/market_view.h"
#include "cli/table.h"
#include "common/archive.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "ledger/micros.h"
#include "market/gpu_labels.h"
#include "spec/job_spec.h"

namespace sluice::cli {
namespace {

constexpr size_t kMaxWorkdirUpload = 256u << 20;

int Fail(const Status& s) {
  std::fprintf(stderr, "sluice: %s\n", s.message().c_str());
  return 1;
}

Result<std::unique_ptr<ApiClient>> Connect(const GlobalFlags& g) {
  SLUICE_ASSIGN_OR_RETURN(ClientConfig cfg, ResolveClientConfig(g.server, g.token));
  return ApiClient::Create(cfg);
}

int64_t NowMs() { return RealClock::Get()->NowMillis(); }

std::string Age(int64_t ts_ms) { return ts_ms ? HumanDuration(NowMs() - ts_ms) : "-"; }

std::string ExitText(const Json& job) {
  return job["exit_code"].is_number() ? std::to_string(job["exit_code"].get<int>()) : "-";
}

// The exit code `sluice run` and `sluice logs -f` end with for a finished job.
int ExitCodeFor(const Json& job) {
  std::string state = job.value("state", "");
  if (job["exit_code"].is_number()) return job["exit_code"].get<int>();
  if (state == "succeeded") return 0;
  if (state == "cancelled") return 130;
  return 1;
}

std::string ReadFileOr(const std::string& path, Status* err) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *err = Status::NotFound("cannot read " + path);
    return "";
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Follows a job's stream until it ends: logs to stdout/stderr as the job wrote them, state
// changes to stderr. Survives a server restart by reconnecting and going on after what it has
// shown.
int Follow(ApiClient& api, const std::string& job_id, bool logs_only, bool json) {
  // Where the reader stands: the ids of the last event and log line shown (ids are in commit
  // order, each kind its own). A new stream asks for what came after them, so nothing is shown
  // twice and nothing skipped, even when the log quota dropped old lines meanwhile, and a long
  // log is not sent again (docs/api.md "Stream items").
  int64_t last_event = 0;
  int64_t last_log = 0;
  Json end;
  int failures = 0;
  while (end.is_null()) {
    bool cut = false;  // the server said why it ended this stream
    const std::string path =
        "/v1/jobs/" + job_id + "/stream?after_event=" + std::to_string(last_event) +
        "&after_log=" + std::to_string(last_log) + (logs_only ? "&events=0" : "");
    Status s = api.Stream(path, [&](const Json& item) {
      std::string type = item.value("type", "");
      if (type == "end") {
        end = item["job"];
        return false;
      }
      if (type == "error") {
        // The server's word on this connection (say, that it ended the stream of a reader
        // too far behind), not part of the job's history.
        std::fprintf(stderr, "sluice: %s\n", item.value("message", "").c_str());
        cut = true;
        return true;
      }
      if (type == "log" || type == "event") {
        int64_t& last = type == "log" ? last_log : last_event;
        const int64_t id = item.value("id", int64_t{0});
        if (id != 0 && id <= last) return true;  // shown already
        last = std::max(last, id);
      }
      failures = 0;
      if (json) {
        std::cout << DumpJson(item) << "\n" << std::flush;
      } else if (type == "log") {
        std::string text = item.value("text", "");
        if (item.value("stream", "") == "stderr") {
          std::fprintf(stderr, "%s\n", text.c_str());
        } else {
          std::fwrite(text.data(), 1, text.size(), stdout);
          std::fputc('\n', stdout);
          std::fflush(stdout);
        }
      } else if (type == "event") {
        // `run` already said "submitted"; terminal events are summed up after the stream.
        std::string ev = item.value("event", "");
        if (ev != "submitted" && ev != "succeeded" && ev != "failed" && ev != "cancelled" &&
            ev != "lost") {
          std::fprintf(stderr, "sluice: %s\n", item.value("message", "").c_str());
        }
      }
      return true;
    });
    if (!end.is_null()) break;
    if (s.code() == StatusCode::kNotFound || s.code() == StatusCode::kUnauthenticated ||
        s.code() == StatusCode::kPermissionDenied) {
      return Fail(s);
    }
    // Ended by the server with a word of why (printed above): a new stream goes on after what
    // was shown. Counted all the same (a stream that shows something resets the count), so a
    // server that keeps ending it without progress is given up on.
    const bool said = s.ok() && cut;
    if (++failures > 60) {
      return Fail(said ? Status::Unavailable("the server kept ending the job's stream") : s);
    }
    if (failures == 1 && !said) {
      std::fprintf(stderr, "sluice: lost the server (%s); reconnecting...\n", s.message().c_str());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // user-facing retry pacing
  }
  if (!json) {
    std::string state = end.value("state", "");
    std::string line = "sluice: " + job_id + " " + state;
    if (end["exit_code"].is_number()) line += " (exit code " + ExitText(end) + ")";
    int64_t started = end.value("started_ms", int64_t{0});
    int64_t finished = end.value("finished_ms", int64_t{0});
    if (started && finished) line += " after " + HumanDuration(finished - started);
    std::string reason = end.value("reason", "");
    if (!reason.empty() && state != "succeeded") line += ": " + reason;
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  return ExitCodeFor(end);
}

// The detach hint, prepared before the handler is installed: the handler may only write(2).
char g_detach_msg[512];

void OnSigint(int) {
  ssize_t n = ::write(STDERR_FILENO, g_detach_msg, std::strlen(g_detach_msg));
  (void)n;
  _exit(130);
}

// Ctrl-C while following detaches; the job keeps running on the server.
void InstallDetachHandler(const std::string& id) {
  std::snprintf(g_detach_msg, sizeof g_detach_msg,
                "\nsluice: detached; %s keeps running. Follow it with `sluice logs -f %s`, "
                "stop it with `sluice cancel %s`.\n",
                id.c_str(), id.c_str(), id.c_str());
  struct sigaction sa {};
  sa.sa_handler = OnSigint;
  sigaction(SIGINT, &sa, nullptr);
}

}  // namespace

Result<spec::JobSpec> ReadJobSpec(const std::string& path) {
  Status read_err;
  std::string text = ReadFileOr(path, &read_err);
  if (!read_err.ok()) return Status::InvalidArgument("sluice: " + read_err.message());
  SLUICE_ASSIGN_OR_RETURN(spec::JobSpec spec, spec::ParseJobSpecYaml(text, path));
  if (!spec.resources.gpu.empty()) {
    auto labels = market::ResolveGpuLabel(spec.resources.gpu);
    if (!labels.ok()) {
      return Status::InvalidArgument(path + ": resources.gpu: " + labels.status().message());
    }
    if (!labels->note.empty()) std::fprintf(stderr, "sluice: %s\n", labels->note.c_str());
  }
  return spec;
}

int RunCommand(const GlobalFlags& g, const RunFlags& f) {
  if (f.dry_run) return DryRunCommand(g, f);
  auto spec = ReadJobSpec(f.spec_path);
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", spec.status().message().c_str());
    return 2;
  }
  if (!f.objective.empty()) spec->objective = f.objective;
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());

  std::string blob;
  if (!spec->workdir.empty()) {
    namespace fs = std::filesystem;
    fs::path dir = spec->workdir;
    if (dir.is_relative()) dir = fs::path(f.spec_path).parent_path() / dir;
    auto archive = PackDirectory(dir.string(), kMaxWorkdirUpload);
    if (!archive.ok()) {
      std::fprintf(stderr, "%s: workdir: %s\n", f.spec_path.c_str(),
                   archive.status().message().c_str());
      return 2;
    }
    blob = Sha256Hex(*archive);
    size_t size = archive->size();
    if (Status s = (*api)->PutBlob(blob, std::move(*archive)); !s.ok()) return Fail(s);
    if (!g.json) {
      std::fprintf(stderr, "sluice: uploaded workdir %s (%zu bytes)\n", dir.string().c_str(), size);
    }
  }
  Json body{{"spec", spec::ToJson(*spec)}};
  if (!blob.empty()) body["workdir_blob"] = blob;
  if (f.queue) body["queue"] = true;
  if (!f.team.empty()) body["team"] = f.team;
  // One key per `sluice run`: if the server dies mid-submit, the retry returns the job the first
  // attempt created instead of a second one.
  const std::string key = "run-" + RandomHex(16);
  auto resp =
      (*api)->PostIdempotent("/v1/jobs", body, key, std::chrono::seconds(60), [&](const Status& s) {
        if (!g.json) {
          std::fprintf(stderr, "sluice: submit: %s; retrying with the same Idempotency-Key\n",
                       s.message().c_str());
        }
      });
  if (!resp.ok()) {
    Fail(resp.status());
    if (resp.status().code() == StatusCode::kFailedPrecondition) {
      // Nothing can run it: show the full explanation, the same `sluice estimate` gives.
      auto est = (*api)->Post("/v1/estimate", Json{{"spec", spec::ToJson(*spec)}, {"limit", 3}});
      if (est.ok() && est->contains("explain")) {
        std::cerr << "across the whole market (agent nodes and catalogs):\n";
        PrintExplanation(std::cerr, (*est)["explain"]);
      }
    }
    return 1;
  }
  const Json& job = (*resp)["job"];
  std::string id = job.value("id", "");

  bool follow = f.follow || (!f.detach && isatty(STDOUT_FILENO));
  if (!follow) {
    if (g.json)
      std::cout << DumpJson(job, 2) << "\n";
    else
      std::cout << id << "\n";
    return 0;
  }
  if (!g.json) {
    std::fprintf(stderr, "sluice: submitted %s (%s)\n", id.c_str(), job.value("name", "").c_str());
  }
  InstallDetachHandler(id);
  return Follow(**api, id, false, g.json);
}

int JobsCommand(const GlobalFlags& g, const std::string& state, int limit) {
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  std::string path = "/v1/jobs?limit=" + std::to_string(limit);
  if (!state.empty()) path += "&state=" + state;
  auto resp = (*api)->Get(path);
  if (!resp.ok()) return Fail(resp.status());
  if (g.json) {
    std::cout << DumpJson((*resp)["jobs"], 2) << "\n";
    return 0;
  }
  Table t({"ID", "NAME", "STATE", "EXIT", "SUBMITTED", "RUNTIME", "REASON"});
  for (const auto& j : (*resp)["jobs"]) {
    int64_t started = j.value("started_ms", int64_t{0});
    int64_t finished = j.value("finished_ms", int64_t{0});
    std::string runtime = !started ? "-" : HumanDuration((finished ? finished : NowMs()) - started);
    std::string reason = j.value("reason", "");
    if (reason.size() > 60) reason = reason.substr(0, 57) + "...";
    t.Add({j.value("id", ""), j.value("name", ""), j.value("state", ""), ExitText(j),
           Age(j.value("submitted_ms", int64_t{0})) + " ago", runtime, reason});
  }
  if (t.empty()) {
    std::cout << "no jobs" << (state.empty() ? "" : " in state " + state) << "\n";
    return 0;
  }
  t.Print(std::cout);
  return 0;
}

int JobCommand(const GlobalFlags& g, const std::string& id) {
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  auto resp = (*api)->Get("/v1/jobs/" + id);
  if (!resp.ok()) return Fail(resp.status());
  if (g.json) {
    std::cout << DumpJson(*resp, 2) << "\n";
    return 0;
  }
  const Json& j = (*resp)["job"];
  std::cout << "id:        " << j.value("id", "") << "\n"
            << "name:      " << j.value("name", "") << "\n"
            << "state:     " << j.value("state", "")
            << (j.value("cancel_requested", false) ? " (cancel requested)" : "") << "\n"
            << "exit code: " << ExitText(j) << "\n";
  if (!j.value("reason", "").empty()) std::cout << "reason:    " << j.value("reason", "") << "\n";
  std::cout << "submitted: " << Age(j.value("submitted_ms", int64_t{0})) << " ago\n";
  const Json& spec = j["spec"];
  int max_restarts = 3;
  if (spec.is_object() && spec.contains("lifecycle") && spec["lifecycle"].is_object()) {
    max_restarts = spec["lifecycle"].value("max_restarts", 3);
  }
  std::cout << "restarts:  " << j.value("preemptions", 0) << " of " << max_restarts
            << " (after preemption or a lost node)\n";
  std::string ckpt = j.value("checkpoint", "");
  std::cout << "checkpoint: " << (ckpt.empty() ? "none saved" : ckpt.substr(0, 12)) << "\n";
  // The bill so far beside the market's estimate at placement (issue 14); a provider viewing a
  // job it ran is not shown the user's bill.
  if (auto cost = (*api)->Get("/v1/costs?job=" + id); cost.ok() && cost->contains("meters")) {
    const int64_t charged = cost->value("charged_micros", int64_t{0});
    const int64_t accruing = cost->value("accruing_micros", int64_t{0});
    const int64_t estimate = cost->value("estimate_micros", int64_t{0});
    std::cout << "cost:      " << ledger::FormatMicros(charged + accruing) << " so far";
    if (accruing > 0) std::cout << " (" << ledger::FormatMicros(accruing) << " not yet billed)";
    std::cout << "; estimate at placement "
              << (estimate > 0 ? ledger::FormatMicros(estimate) : std::string("unknown"));
    // The market's estimate assumed an hour of work when the spec does not say how long.
    if (estimate > 0 && !(spec.is_object() && spec.contains("expected_hours"))) {
      std::cout << " for 1 h of work (set expected_hours)";
    }
    std::cout << " (sluice costs --job " << id << ")\n";
    if (spec.is_object() && spec.contains("max_total_cost")) {
      // The budget counts compute and transfer; storage is the account's (README "Budgets").
      const int64_t budget = std::llround(spec["max_total_cost"].get<double>() * 1e6);
      const int64_t storage = cost->value("storage_micros", int64_t{0});
      std::cout << "budget:    " << ledger::FormatMicros(budget) << " (max_total_cost); "
                << ledger::FormatMicros(charged + accruing - storage) << " of it used; `sluice "
                << "budget " << id << " USD` changes it\n";
    }
  }
  std::cout << "\nattempts:\n";
  Table at({"#", "ATTEMPT", "NODE", "GPUS", "PRICE/H", "STARTED", "ENDED", "STATE", "EXIT",
            "RESTORED", "CAUSE"});
  for (const auto& a : (*resp)["attempts"]) {
    std::string gpus;
    for (const auto& g2 : a["gpus"])
      gpus += (gpus.empty() ? "" : ",") + std::to_string(g2.get<int>());
    std::string restored = a.value("checkpoint_restored", "");
    int64_t started = a.value("started_ms", int64_t{0});
    int64_t ended = a.value("ended_ms", int64_t{0});
    at.Add({std::to_string(a.value("number", 1)), a.value("id", ""), a.value("node_id", ""),
            gpus.empty() ? "-" : gpus, Dollars(a.value("price_per_hour", 0.0)),
            started ? Age(started) + " ago" : "-", ended ? Age(ended) + " ago" : "-",
            a.value("state", ""), ExitText(a), restored.empty() ? "-" : restored.substr(0, 12),
            a.value("cause", "")});
  }
  if (at.empty())
    std::cout << "  none yet\n";
  else
    at.Print(std::cout);
  std::cout << "\nevents:\n";
  for (const auto& e : (*resp)["events"]) {
    std::cout << "  " << Age(e.value("ts_ms", int64_t{0})) << " ago  " << e.value("event", "")
              << ": " << e.value("message", "") << "\n";
  }
  return 0;
}

int DeleteCommand(const GlobalFlags& g, const std::string& id) {
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  auto resp = (*api)->Delete("/v1/jobs/" + id);
  if (!resp.ok()) return Fail(resp.status());
  if (g.json) {
    std::cout << DumpJson(*resp, 2) << "\n";
  } else {
    std::cout << "deleted " << id << " with its logs, events and checkpoints\n";
  }
  return 0;
}

int NodeReclaimCommand(const GlobalFlags& g, const std::string& node, const std::vector<int>& gpus,
                       const std::string& cause) {
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  Json body = Json::object();
  if (!gpus.empty()) body["gpus"] = gpus;
  if (!cause.empty()) body["cause"] = cause;
  auto resp = (*api)->Post("/v1/nodes/" + node + "/reclaim", body);
  if (!resp.ok()) return Fail(resp.status());
  if (g.json) {
    std::cout << DumpJson(*resp, 2) << "\n";
    return 0;
  }
  const Json& pre = (*resp)["preempted"];
  if (pre.empty()) std::cout << "nothing runs there; nothing to preempt\n";
  for (const auto& a : pre) {
    std::cout << "preempting " << a.get<std::string>()
              << " (SIGTERM now, SIGKILL after its grace period; its job is requeued)\n";
  }
  if (gpus.empty()) {
    std::cout << "node " << node << " takes no new work until `sluice node resume " << node
              << "` or the server's --reclaim-cooldown passes\n";
  }
  return 0;
}

int NodeResumeCommand(const GlobalFlags& g, const std::string& node) {
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  auto resp = (*api)->Post("/v1/nodes/" + node + "/resume", Json::object());
  if (!resp.ok()) return Fail(resp.status());
  if (g.json) {
    std::cout << DumpJson(*resp, 2) << "\n";
    return 0;
  }
  std::cout << "node " << resp->value("name", node) << " takes work again\n";
  return 0;
}

int LogsCommand(const GlobalFlags& g, const std::string& id, bool follow) {
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  if (follow) {
    InstallDetachHandler(id);
    return Follow(**api, id, true, g.json);
  }
  int64_t after = 0;
  while (true) {
    auto resp =
        (*api)->Get("/v1/jobs/" + id + "/logs?after=" + std::to_string(after) + "&limit=1000");
    if (!resp.ok()) return Fail(resp.status());
    const Json& lines = (*resp)["lines"];
    for (const auto& l : lines) {
      if (g.json) {
        std::cout << DumpJson(l) << "\n";
      } else if (l.value("stream", "") == "stderr") {
        std::cerr << l.value("text", "") << "\n";
      } else {
        std::cout << l.value("text", "") << "\n";
      }
    }
    after = (*resp).value("next", after);
    if (lines.size() < 1000) break;
  }
  return 0;
}

int CancelCommand(const GlobalFlags& g, const std::string& id) {
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  auto resp = (*api)->Post("/v1/jobs/" + id + "/cancel", Json::object());
  if (!resp.ok()) return Fail(resp.status());
  const Json& j = (*resp)["job"];
  if (g.json) {
    std::cout << DumpJson(j, 2) << "\n";
  } else if (j.value("state", "") == "cancelled") {
    std::cout << id << " cancelled\n";
  } else {
    std::cout << id
              << ": cancel requested; the job gets SIGTERM, then SIGKILL after the grace "
                 "period\n";
  }
  return 0;
}

}  // namespace sluice::cli
