// bench_finished: what a finished job costs the server core now that finished jobs leave its job
// map (issue 12 item 3; docs/design-notes.md "Finished jobs").
//
// One world (bench/core_world.h): a core on its own SQLite store, no nodes. `--jobs` N jobs are
// submitted to wait (queue_unschedulable): the heap they hold is what a job in the job map costs,
// the baseline (before this change every finished job stayed there, at that cost). Then every one
// is cancelled and a tick retires them: the heap they still hold is what a finished job costs now.
// Heap bytes in use are glibc's (mallinfo2) less SQLite's own (its page cache), since RSS does
// not shrink when the allocator keeps freed pages. It also times the reads that now go to the
// store, against the same reads while the jobs were in memory: GET of one job (GetJob) and a
// list of the newest 100 (ListJobs), medians of `--reads` each. And a tenant's list (its own
// `--tenant-jobs`, half waiting and half finished, under a JobScope): alone (the baseline), then
// behind the N jobs of another account while they wait and once they finished; before the
// per-owner index (docs/design-notes.md "The job list") it walked every live job under the core's
// lock and paged through every tenant's finished jobs.
//
//   bench_finished [--jobs N] [--reads R] [--tenant-jobs T]
#include <malloc.h>
#include <sqlite3.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "../core_world.h"
#include "../flags.h"
#include "../timing.h"

using sluice::bench::FlagValue;
using sluice::bench::Median;
using sluice::bench::Ms;
using Clock = std::chrono::steady_clock;

namespace {

// Bytes the program's heap holds for it, SQLite's share left out.
double HeapBytes() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<double>(m.uordblks + m.hblkhd) - static_cast<double>(sqlite3_memory_used());
}

struct Reads {
  double get_ms = 0;   // median GetJob
  double list_ms = 0;  // median ListJobs of the newest 100
};

// `listed`: how many jobs the list of the newest 100 must have.
Reads TimeReads(sluice::bench::CoreWorld& w, const std::vector<std::string>& ids, size_t listed,
                size_t reads) {
  std::mt19937 rng(7);
  std::vector<double> get, list;
  for (size_t i = 0; i < reads; ++i) {
    const std::string& id = ids[rng() % ids.size()];
    auto start = Clock::now();
    auto d = w.core->GetJob(id);
    get.push_back(Ms(Clock::now() - start));
    if (!d.ok()) w.Fail("get " + id + ": " + d.status().ToString());
    start = Clock::now();
    auto l = w.core->ListJobs(std::nullopt, 100);
    list.push_back(Ms(Clock::now() - start));
    if (!l.ok() || l->size() != listed) w.Fail("list: wrong answer");
  }
  return {Median(get), Median(list)};
}

// The median time of a tenant's list of its newest 100 jobs; each answer must be its `expect`.
double TimeTenantList(sluice::bench::CoreWorld& w, const sluice::store::JobScope& tenant,
                      size_t expect, size_t reads) {
  std::vector<double> list;
  for (size_t i = 0; i < reads; ++i) {
    const auto start = Clock::now();
    auto l = w.core->ListJobs(std::nullopt, 100, &tenant);
    list.push_back(Ms(Clock::now() - start));
    if (!l.ok() || l->size() != expect) w.Fail("tenant's list: wrong answer");
  }
  return Median(list);
}

}  // namespace

int main(int argc, char** argv) {
  if (sluice::bench::WantsHelp(argc, argv)) {
    std::printf(
        "usage: bench_finished [--jobs N] [--reads R] [--tenant-jobs T]\n"
        "  heap per job while N jobs wait in memory (the baseline) and once they finished and\n"
        "  left it; GetJob and a 100-job list, medians of R, in memory and from the store; a\n"
        "  tenant's list of its T jobs alone (the baseline) and behind the N\n");
    return 0;
  }
  const size_t jobs = std::max<size_t>(1, FlagValue(argc, argv, "--jobs", 20000));
  const size_t reads = std::max<size_t>(1, FlagValue(argc, argv, "--reads", 200));
  const size_t tenant_jobs = FlagValue(argc, argv, "--tenant-jobs", 40);
  sluice::bench::CoreWorld w;
  sluice::server::CoreOptions options;
  w.Open("bench_finished", options);
  sluice::spec::JobSpec spec;
  spec.name = "bench";
  spec.run = "python train.py --epochs 10";
  spec.resources.cpus = 4;
  spec.resources.memory_gb = 16;
  spec.env = {{"WANDB_PROJECT", "bench"}, {"SEED", "7"}};
  sluice::server::SubmitOptions submit;
  submit.owner = "acct-bench";
  submit.queue_unschedulable = true;  // no node: every job waits, in memory
  submit.exempt_from_quota = true;    // an admin's, as the swarm submits
  // The tenant's jobs: half wait, half are cancelled and retired (the store keeps them).
  sluice::server::SubmitOptions as_tenant;
  as_tenant.owner = "acct-tenant";
  as_tenant.queue_unschedulable = true;
  for (size_t i = 0; i < tenant_jobs; ++i) {
    auto job = w.core->SubmitJob(spec, "", as_tenant);
    if (!job.ok()) w.Fail("tenant's submit: " + job.status().ToString());
    if (i % 2 == 1 && !w.core->CancelJob(job->id).ok()) w.Fail("tenant's cancel");
    w.clock.Advance(1);
  }
  w.core->Tick();
  const sluice::store::JobScope tenant{{"acct-tenant"}, {}};
  const size_t tenant_listed = std::min<size_t>(100, tenant_jobs);
  const double tenant_alone = TimeTenantList(w, tenant, tenant_listed, reads);
  std::vector<std::string> ids;
  const double heap0 = HeapBytes();
  for (size_t i = 0; i < jobs; ++i) {
    auto job = w.core->SubmitJob(spec, "", submit);
    if (!job.ok()) w.Fail("submit: " + job.status().ToString());
    ids.push_back(job->id);
    w.clock.Advance(1);
  }
  const double waiting = (HeapBytes() - heap0) / static_cast<double>(jobs);
  const size_t listed = std::min<size_t>(100, ids.size() + tenant_jobs);
  const Reads in_memory = TimeReads(w, ids, listed, reads);
  const double tenant_behind_live = TimeTenantList(w, tenant, tenant_listed, reads);
  for (const auto& id : ids) {
    if (auto c = w.core->CancelJob(id); !c.ok()) w.Fail("cancel: " + c.status().ToString());
  }
  w.core->Tick();  // retires them
  if (w.core->StateDump()["jobs"].size() != tenant_jobs - tenant_jobs / 2) {
    w.Fail("finished jobs were not retired");  // only the tenant's waiting ones may stay
  }
  const double finished = (HeapBytes() - heap0) / static_cast<double>(jobs);
  const Reads from_store = TimeReads(w, ids, listed, reads);
  const double tenant_behind_finished = TimeTenantList(w, tenant, tenant_listed, reads);
  std::printf("%zu jobs; heap per job (SQLite's own left out):\n", jobs);
  std::printf("  waiting, in the job map     %8.0f bytes  (baseline: every finished job, before)\n",
              waiting);
  std::printf("  finished, out of it         %8.0f bytes  %.3fx the baseline\n", finished,
              finished / waiting);
  std::printf("reads (medians of %zu):\n", reads);
  std::printf("  GetJob     in memory %7.3f ms, finished from the store %7.3f ms  %.2fx\n",
              in_memory.get_ms, from_store.get_ms, from_store.get_ms / in_memory.get_ms);
  std::printf("  ListJobs   in memory %7.3f ms, finished from the store %7.3f ms  %.2fx\n",
              in_memory.list_ms, from_store.list_ms, from_store.list_ms / in_memory.list_ms);
  std::printf("a tenant's list of its %zu jobs (medians of %zu):\n", tenant_jobs, reads);
  std::printf("  alone                                %7.3f ms  (baseline)\n", tenant_alone);
  std::printf("  behind %zu waiting jobs of another   %7.3f ms  %.2fx\n", jobs, tenant_behind_live,
              tenant_behind_live / tenant_alone);
  std::printf("  behind %zu finished jobs of another  %7.3f ms  %.2fx\n", jobs,
              tenant_behind_finished, tenant_behind_finished / tenant_alone);
  return 0;
}
