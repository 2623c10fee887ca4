// What the agent and an attempt's supervisor (agent/supervisor.h) say to each other, and the
// files they share in the attempt's supervisor directory (docs/design-notes.md "Supervisor").
//
// The directory, `<agent data dir>/attempts/<attempt id>.d/`, mode 0700 and hidden from every
// job, holds:
//   spec.json      what to run: written by the agent before it starts the supervisor (0600: it
//                  holds the job's env, secrets included);
//   ctl.sock       the supervisor's control socket (0600), made by the agent and inherited;
//   output.jsonl   every line the job printed, one JSON object per line, with its seq: the
//                  buffer a restarted agent replays;
//   exit.json      how the job ended, written (atomically) after the last output line;
//   supervisor.log the supervisor's own complaints.
//
// On the socket both sides send one JSON object per line. Agent -> supervisor:
//   {"op":"attach","from":N}  send me every line with seq > N, then live lines and the exit;
//   {"op":"terminate","grace_ms":G}, {"op":"kill"};
//   {"op":"lease","until":T,"kill_at":K}  the server renewed the lease (CLOCK_MONOTONIC ms);
//   {"op":"ping"}             the agent is alive (it is the agent's word that counts while it is);
//   {"op":"go","dir":D,"attempt_id":A,"cwd":C,"script":S,"env":{..},"first_seq":N,
//    "until":T,"kill_at":K}   a warm box's job: the agent has renamed the box's directories
//                             and cgroup to the attempt's (D, A) and put in its files.
// Supervisor -> agent:
//   {"ev":"started","pid":P};
//   {"ev":"line","seq":..,"stream":..,"ts_ms":..,"text":..};
//   {"ev":"frozen"}, {"ev":"thawed"};
//   {"ev":"ready"}            a warm box is built and its stub waits for the job;
//   {"ev":"exit","exit_code":C,"signal":S,"out_of_memory":B,"fenced":B,"error":E} (E: the job
//   could not start).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>

#include "agent/cgroup.h"
#include "agent/process.h"
#include "common/agent_protocol.h"
#include "common/json.h"
#include "common/status.h"

namespace sluice::supervisor {

inline constexpr const char* kSpecFile = "spec.json";
inline constexpr const char* kSocketFile = "ctl.sock";
inline constexpr const char* kOutputFile = "output.jsonl";
inline constexpr const char* kExitFile = "exit.json";
inline constexpr const char* kLogFile = "supervisor.log";
// The fd the supervisor finds its listening control socket on.
inline constexpr int kListenFd = 3;
inline constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

struct Spec {
  std::string attempt_id;  // also the cgroup's name (a warm box's own name until `go`)
  // A warm box: `process` is the sandbox with kWarmStub inside, started before its job; the job
  // (script, env, cwd) comes later in a `go` op and is handed to the stub on its stdin.
  bool warm = false;
  ProcessSpec process;    // join_cgroup_fds is not carried: the supervisor opens the cgroup
  CgroupSupport cgroups;  // layout kNone: the attempt has no cgroup
  int64_t first_seq = 1;  // the agent numbered lines of its own (a restore warning) below this
  int64_t lease_until = kNever;     // CLOCK_MONOTONIC ms: frozen from then until renewed
  int64_t kill_at = kNever;         // and killed from then, unless the agent is alive to decide
  int64_t agent_silence_ms = 5000;  // an agent not heard from for this long is not alive
  int64_t max_output_bytes = int64_t{256} << 20;  // output.jsonl stops growing here
};

Json ToJson(const Spec& s);
Result<Spec> SpecFromJson(const Json& j);

struct Exit {
  ExitInfo info;
  bool out_of_memory = false;
  bool fenced = false;  // killed by the supervisor itself: its lease ran out with no agent
  std::string error;    // the job could not start (then `info` means nothing)
};

Json ToJson(const Exit& e);  // the `exit` event, also the contents of exit.json
Result<Exit> ExitFromJson(const Json& j);

Json LineEvent(const proto::LogEntry& e);
Result<proto::LogEntry> LineFromJson(const Json& j);

// What a warm box runs until its job comes: reads the job from stdin and runs it. The input is a
// byte count on a line, then that many bytes of shell (WarmStubInput): `cd` to the job's dir,
// `export` each of its variables, then `exec /bin/bash -c` its script, every value single-quoted.
// A bash, because the box's bash is there anyway and `exec` costs nothing more. `read -N` takes
// the whole job in a few reads; `read -d ''` of NUL-separated fields, as before, read a pipe one
// byte per system call (~0.9 ms per warm start with the agent's ~600 bytes: bench/job_start).
// LC_ALL=C because -N counts characters and the payload is counted in bytes. The box must start
// with an empty environment: then all the job's shell inherits is what the job gave, plus PWD
// (which bash sets anyway) -- the stub forks nothing (a `$(...)` to list variables costs ~6 ms).
inline constexpr const char* kWarmReady = "sluice-warm-box-ready";
inline constexpr const char* kWarmStub =
    "printf '%s\\n' sluice-warm-box-ready\n"
    "IFS= read -r n && LC_ALL=C IFS= read -r -N \"$n\" job || exit 97\n"
    "eval \"$job\"\n"
    "exit 97\n";

// The stub's input for a job. A NUL ends a field, as it would an argv or environ string.
std::string WarmStubInput(const std::string& cwd, const std::string& script,
                          const std::map<std::string, std::string>& env);

// CLOCK_MONOTONIC in ms: the clock leases are told in, the same in every process on the host.
int64_t MonotonicMs();

}  // namespace sluice::supervisor
