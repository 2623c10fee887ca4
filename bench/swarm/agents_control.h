// The engine's control protocol: run.py writes one command a line on the engine's stdin and reads
// one JSON line back on its stdout for each (logs go to stderr). Commands:
//
//   start                 every agent connects (once; the agents file is read by then)
//   hold [off]            assigned attempts are held (started, no exit) / exit at once again
//   release               every held attempt exits now, later ones as soon as they start
//   silence I [J ...]     those agents write nothing more (pongs included) and never reconnect
//   stats                 {"welcomed","reported","leases","started","exited","assigned_twice",
//                          "errors","first_error","connected","hold","cpu_s"}
//   agents [I ...]        {"agents":[record, ...]} for those agents (all without ids)
//   changed SEQ           {"seq":S,"agents":[...]}: the agents whose record changed after SEQ
//                         (0: all), so run.py can keep 10,000 records current cheaply
//   assigned JOB [...]    {"assigned":{"JOB":times assigned, ...}}
//   stop                  closes every connection and exits 0 ({"ok":true} first)
//
// A record: {"i","silent","node_id","welcomes","last_sent","last_recv","closed_at" (null while
// open),"close_how"}, times in CLOCK_MONOTONIC seconds (Python's time.monotonic()).
// An unknown command or a bad argument answers {"error":"..."}.
#pragma once

#include <string>
#include <string_view>

#include "agents_engine.h"

namespace sluice::swarm {

struct ControlReply {
  std::string json;  // one line, no newline
  bool stop = false;
};

// Runs one command line on the engine (on the io thread).
ControlReply HandleCommand(Engine& engine, std::string_view line);

// This process's CPU time, user + system, in seconds.
double OwnCpuSeconds();

}  // namespace sluice::swarm
