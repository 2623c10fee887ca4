// One server core for a bench: its own SQLite store in a fresh temp dir, a fake clock, and the
// fleet it enrols (node i's agent is links[i]). The benches that time the core in-process
// (bench/placement, bench/settle, bench/uptime) build their worlds on it. Header-only,
// bench-only; a failure exits with `program: what` (bench/flags.h's Die).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "common/clock.h"
#include "common/crypto.h"
#include "flags.h"
#include "server/server_core.h"
#include "server/test_fleet.h"
#include "store/store.h"

namespace sluice::bench {

struct CoreWorld {
  std::string name;
  std::filesystem::path dir;
  FakeClock clock;
  std::unique_ptr<store::Store> store;
  std::unique_ptr<server::ServerCore> core;
  std::vector<std::string> nodes;
  std::vector<std::shared_ptr<server::testing::RecordingLink>> links;

  CoreWorld() = default;
  CoreWorld(const CoreWorld&) = delete;
  CoreWorld& operator=(const CoreWorld&) = delete;
  ~CoreWorld() {
    core.reset();
    store.reset();
    std::error_code ignored;
    if (!dir.empty()) std::filesystem::remove_all(dir, ignored);
  }

  // A store under a fresh temp dir named for `program`, and a core on it with `options`, loaded.
  void Open(const char* program, const server::CoreOptions& options) {
    program_ = program;
    dir = std::filesystem::temp_directory_path() / (std::string(program) + "-" + RandomHex(6));
    std::filesystem::create_directories(dir);
    auto st = store::OpenSqliteStore((dir / "sluice.db").string());
    if (!st.ok()) Fail("store: " + st.status().ToString());
    store = std::move(*st);
    core = std::make_unique<server::ServerCore>(store.get(), &clock, options);
    if (auto s = core->Load(); !s.ok()) Fail("load: " + s.ToString());
  }

  // Enrols a node as an agent would (server/test_fleet.h's EnrolNode); it becomes nodes.back().
  void Enrol(const proto::Hello& hello) {
    auto link = std::make_shared<server::testing::RecordingLink>();
    auto node = server::testing::EnrolNode(*core, link, hello);
    if (!node.ok()) Fail("enrol: " + node.status().ToString());
    nodes.push_back(*node);
    links.push_back(std::move(link));
  }

  [[noreturn]] void Fail(const std::string& what) const { Die(program_.c_str(), what); }

 private:
  std::string program_ = "bench";
};

}  // namespace sluice::bench
