// bench_swarm_agents: the swarm's agents as one compiled process (agents_engine.h says why),
// started and steered by bench/swarm/run.py --engine cxx.
//
//   bench_swarm_agents --agents-file PATH --port N --join-token T [--interval S] [--seed N]
//                      [--per-address N] [--max-connecting N]
//
// --agents-file: JSON lines, line k for agent k: {"i":k, "hello":{the hello's members but
// type, node_id and attempts}, "report":{the passing conformance report}} (run.py generates
// the inventories from its seeded random and builds the report, so both engines play the same
// fleet). Commands on stdin, replies on stdout (agents_control.h); logs on stderr.
#include <sys/resource.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "../flags.h"
#include "agents_control.h"
#include "agents_engine.h"
#include "common/agent_protocol.h"
#include "common/json.h"

namespace {

constexpr const char* kProgram = "bench_swarm_agents";

// The text after `flag`, or `fallback` when the flag is absent.
std::string FlagText(int argc, char** argv, const char* flag, std::string fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], flag) == 0) return argv[i + 1];
  }
  return fallback;
}

// The members of a JSON object as text, without the enclosing braces ("" when none).
std::string MembersText(const sluice::Json& obj) {
  std::string text = sluice::DumpJson(obj);
  return text.size() > 2 ? text.substr(1, text.size() - 2) : "";
}

std::vector<sluice::swarm::AgentSpec> LoadAgents(const std::string& path) {
  std::ifstream in(path);
  if (!in) sluice::bench::Die(kProgram, "cannot read " + path);
  std::vector<sluice::swarm::AgentSpec> specs;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    std::string where = path + " line " + std::to_string(specs.size() + 1);
    auto parsed = sluice::ParseJson(line);
    if (!parsed.ok()) sluice::bench::Die(kProgram, where + ": " + parsed.status().message());
    const sluice::Json& j = *parsed;
    if (!j.is_object() || !j.contains("i") || !j["i"].is_number_integer() ||
        j["i"].get<int64_t>() != static_cast<int64_t>(specs.size()) || !j.contains("hello") ||
        !j["hello"].is_object() || !j.contains("report") || !j["report"].is_object()) {
      sluice::bench::Die(kProgram, where + ": expected {\"i\":" + std::to_string(specs.size()) +
                                       ",\"hello\":{...},\"report\":{...}}");
    }
    // Read as the server reads a hello and written as the agent writes one (common/
    // agent_protocol): a hello the server would refuse stops the run here, naming its line, and
    // every connection sends the protocol's own encoding. The node id and the attempts it runs
    // change as the run goes, so Engine::Hello adds them to these members.
    auto typed = sluice::proto::HelloFromJson(j["hello"]);
    if (!typed.ok()) sluice::bench::Die(kProgram, where + ": hello: " + typed.status().message());
    sluice::Json hello = sluice::proto::ToJson(*typed);
    for (const char* k : {"type", "node_id", "attempts"}) hello.erase(k);
    specs.push_back(
        {static_cast<int>(specs.size()), MembersText(hello), sluice::DumpJson(j["report"])});
  }
  return specs;
}

// Each connection is a descriptor: 10,000 agents need more than the usual soft limit of 1,024.
void RaiseFileLimit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (sluice::bench::WantsHelp(argc, argv)) {
    std::fprintf(
        stderr,
        "usage: %s --agents-file PATH --port N --join-token T [--interval S] "
        "[--seed N] [--per-address N] [--max-connecting N]\n"
        "commands on stdin: start, hold [off], release, silence I..., stats, agents [I...], "
        "changed SEQ, assigned JOB..., stop (bench/swarm/agents_control.h)\n",
        kProgram);
    return 0;
  }
  sluice::swarm::EngineOptions options;
  std::string file = FlagText(argc, argv, "--agents-file", "");
  options.port = static_cast<uint16_t>(sluice::bench::FlagValue(argc, argv, "--port", 0));
  options.join_token = FlagText(argc, argv, "--join-token", "");
  options.interval_s = std::strtod(FlagText(argc, argv, "--interval", "5").c_str(), nullptr);
  options.seed = sluice::bench::FlagValue(argc, argv, "--seed", 1);
  options.per_address =
      static_cast<int>(sluice::bench::FlagValue(argc, argv, "--per-address", 200));
  options.max_connecting =
      static_cast<int>(sluice::bench::FlagValue(argc, argv, "--max-connecting", 64));
  if (file.empty() || options.port == 0 || options.join_token.empty()) {
    sluice::bench::Die(kProgram, "--agents-file, --port and --join-token are required");
  }
  if (!(options.interval_s > 0) || options.per_address < 1 || options.max_connecting < 1) {
    sluice::bench::Die(kProgram, "--interval, --per-address and --max-connecting must be > 0");
  }
  RaiseFileLimit();
  auto specs = LoadAgents(file);
  size_t n = specs.size();
  if (static_cast<size_t>(options.per_address) * 253 < n) {
    sluice::bench::Die(kProgram, "more agents than source addresses 127.0.0.2-254 can carry");
  }

  boost::asio::io_context ioc(1);
  auto work = boost::asio::make_work_guard(ioc);
  sluice::swarm::Engine engine(ioc, options, std::move(specs));
  std::fprintf(stderr, "%s: %zu agents for 127.0.0.1:%u; they connect on `start`\n", kProgram, n,
               static_cast<unsigned>(options.port));

  // Commands are read on a thread of their own and run on the io thread, so nothing the
  // agents touch needs a lock. End of input (run.py gone) stops the engine.
  std::thread([&ioc, &engine] {
    auto run = [&ioc, &engine](std::string line) {
      boost::asio::post(ioc, [&ioc, &engine, line = std::move(line)] {
        auto reply = sluice::swarm::HandleCommand(engine, line);
        std::fwrite(reply.json.data(), 1, reply.json.size(), stdout);
        std::fputc('\n', stdout);
        std::fflush(stdout);
        if (reply.stop) ioc.stop();
      });
    };
    for (std::string line; std::getline(std::cin, line);) run(line);
    run("stop");
  }).detach();

  ioc.run();
  std::fflush(stdout);
  // The reader thread may still be blocked reading stdin, and connections still have handlers
  // queued: leave without unwinding either (the kernel closes every socket).
  std::_Exit(0);
}
