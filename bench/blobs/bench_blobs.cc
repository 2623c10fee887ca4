// bench_blobs: what one checkpoint save costs the server core when it drops an older checkpoint
// while many other jobs keep theirs (issue 12 item 3, "nothing slow under the lock").
//
// A save beyond the retention drops the job's oldest checkpoint, and its blobs (the manifest
// and the chunks no kept checkpoint or workdir uses) are deleted in the same hold of the core's
// lock. Two worlds are built side by side (bench/core_world.h), each a core on its own SQLite
// store and blob store: `--shallow` running jobs keeping `--retention` checkpoints each in one
// (the baseline), `--keeping` in the other. Then one job saves `--saves` checkpoints in each
// world, alternating between the worlds so the host's drift hits both alike; each save is
// timed from the agent's message to its answer (commit, blob collection, reply). Prints the
// median per world and the deep world's ratio to the baseline: 1.0 means the checkpoints other
// jobs keep cost a save nothing.
//
//   bench_blobs [--keeping N] [--shallow S] [--retention K] [--chunks C] [--saves R]
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../core_world.h"
#include "../flags.h"
#include "../timing.h"
#include "store/blob_store.h"

using sluice::Json;
using sluice::bench::FlagValue;
using sluice::bench::Median;
using sluice::bench::Ms;
using Clock = std::chrono::steady_clock;

namespace {

struct Params {
  size_t retention = 2;
  size_t chunks = 8;  // per manifest
};

// One world: its core, its blob store, and the running attempts (attempt id -> node index).
struct BlobWorld {
  sluice::bench::CoreWorld w;
  std::unique_ptr<sluice::store::BlobStore> blobs;
  struct Running {
    std::string attempt;
    size_t node = 0;
  };
  std::vector<Running> running;
  size_t serial = 0;  // makes every manifest and chunk distinct

  // A manifest in agent/checkpoint_sync's format with `chunks` chunks of its own, stored with
  // them; returns its digest.
  std::string StoreCheckpoint(size_t chunks) {
    Json refs = Json::array();
    for (size_t c = 0; c < chunks; ++c) {
      const std::string body = "chunk " + std::to_string(serial) + "." + std::to_string(c);
      const std::string digest = sluice::Sha256Hex(body);
      if (!blobs->PutVerified(digest, body).ok()) w.Fail("put chunk");
      refs.push_back(digest);
    }
    ++serial;
    Json files = Json::array();
    files.push_back({{"path", "state.pt"}, {"mode", 420}, {"size", 1}, {"chunks", refs}});
    const std::string text =
        sluice::DumpJson(Json{{"version", 1}, {"files", files}, {"total_bytes", 1}});
    const std::string digest = sluice::Sha256Hex(text);
    if (!blobs->PutVerified(digest, text).ok()) w.Fail("put manifest");
    return digest;
  }

  void Save(const Running& r, const std::string& manifest) {
    w.clock.Advance(1000);
    Json msg{{"type", "checkpoint"}, {"attempt_id", r.attempt}, {"manifest", manifest}};
    if (auto s = w.core->AgentMessage(w.nodes[r.node], w.links[r.node].get(), msg); !s.ok()) {
      w.Fail("checkpoint: " + s.ToString());
    }
  }

  // `jobs` running jobs (plus the one the saves are timed on), each keeping `retention`
  // checkpoints.
  void Build(const char* name, size_t jobs, const Params& p) {
    sluice::server::CoreOptions options;
    options.checkpoint_retention = static_cast<int>(p.retention);
    w.Open(name, options);
    blobs = std::make_unique<sluice::store::BlobStore>((w.dir / "blobs").string());
    w.core->SetBlobStore(blobs.get());
    const size_t per_node = 256;  // one-CPU jobs; core_world's nodes have 512 GiB
    w.EnrolBusyFleet((jobs + 1 + per_node - 1) / per_node, jobs + 1, static_cast<int>(per_node));
    std::map<std::string, size_t> node_index;
    for (size_t i = 0; i < w.nodes.size(); ++i) node_index[w.nodes[i]] = i;
    const Json dump = w.core->StateDump();
    for (const auto& [aid, att] : dump["active_attempts"].items()) {
      running.push_back({aid, node_index.at(att["node_id"].get<std::string>())});
    }
    if (running.size() != jobs + 1) w.Fail("not every job is running");
    for (size_t j = 1; j < running.size(); ++j) {
      for (size_t k = 0; k < p.retention; ++k) Save(running[j], StoreCheckpoint(p.chunks));
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (sluice::bench::WantsHelp(argc, argv)) {
    std::printf(
        "usage: bench_blobs [--keeping N] [--shallow S] [--retention K] [--chunks C] "
        "[--saves R]\n"
        "  one job's checkpoint saves (each dropping its oldest) while N other jobs keep K\n"
        "  checkpoints of C chunks, against the same with S jobs (the baseline); medians of R\n");
    return 0;
  }
  const size_t keeping = FlagValue(argc, argv, "--keeping", 2000);
  const size_t shallow = FlagValue(argc, argv, "--shallow", 10);
  Params p;
  p.retention = std::max<size_t>(1, FlagValue(argc, argv, "--retention", 2));
  p.chunks = std::max<size_t>(1, FlagValue(argc, argv, "--chunks", 8));
  const size_t saves = std::max<size_t>(1, FlagValue(argc, argv, "--saves", 100));

  BlobWorld base, deep;
  auto t0 = Clock::now();
  base.Build("bench_blobs", shallow, p);
  deep.Build("bench_blobs", keeping, p);
  std::printf("worlds built in %.1f s: %zu and %zu jobs keeping %zu checkpoints of %zu chunks\n",
              Ms(Clock::now() - t0) / 1000, shallow, keeping, p.retention, p.chunks);
  std::vector<double> base_ms, deep_ms;
  std::vector<std::string> first;  // each world's first timed manifest
  for (size_t i = 0; i < saves + p.retention; ++i) {
    for (BlobWorld* bw : {&base, &deep}) {
      const std::string m = bw->StoreCheckpoint(p.chunks);
      if (i == 0) first.push_back(m);
      if (i < p.retention) {  // until the job keeps `retention`, a save drops nothing
        bw->Save(bw->running[0], m);
        continue;
      }
      const auto start = Clock::now();
      bw->Save(bw->running[0], m);
      (bw == &base ? base_ms : deep_ms).push_back(Ms(Clock::now() - start));
    }
  }
  // The timed saves dropped checkpoints: the first one's manifest must be gone from the blobs.
  if (base.blobs->Has(first[0]) || deep.blobs->Has(first[1])) {
    base.w.Fail("a dropped checkpoint's manifest was not deleted");
  }
  const double b = Median(base_ms), d = Median(deep_ms);
  std::printf("checkpoint save with a drop, median of %zu:\n", saves);
  std::printf("  %6zu jobs keeping checkpoints (baseline) %8.3f ms\n", shallow, b);
  std::printf("  %6zu jobs keeping checkpoints            %8.3f ms  %.2fx the baseline\n", keeping,
              d, d / b);
  return 0;
}
