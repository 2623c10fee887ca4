// Job streams (server_core.h Subscribe): a new reader's history replayed, then followed live
// (the replay and the readers: server/job_streams.h). Members of ServerCore.
#include "server/core_internal.h"
#include "server/server_core.h"

namespace sluice::server {

using namespace core;  // NOLINT: the core's own helpers (core_internal.h)

Result<std::vector<st::LogLine>> ServerCore::ReadLogs(const std::string& job_id, int64_t after_id,
                                                      int limit) {
  {
    std::lock_guard<TimedMutex> lock(mu_);
    if (!jobs_.count(job_id) && finished_.jobs.Find(job_id) == nullptr) {
      return Status::NotFound("no job " + job_id);
    }
  }
  return store_->ReadLogs(job_id, after_id, limit);
}

Result<uint64_t> ServerCore::Subscribe(const std::string& job_id, bool events, bool logs,
                                       StreamSink sink, StreamCursor from) {
  {
    std::lock_guard<TimedMutex> lock(mu_);
    SLUICE_ASSIGN_OR_RETURN(auto job, JobRecordLocked(job_id));
    if (!job) return Status::NotFound("no job " + job_id);
  }
  // The stored history is replayed without the core's lock (issue 12 item 3; docs/design-notes.md
  // "Job streams"): it can be a whole log quota, and under the lock it stalled every commit,
  // heartbeat and pass for as long as the reader took. Rows get ids in commit order, so the
  // cursor is where the replay stands; under the lock, where nothing commits, the stream is
  // caught up when the store has no row past it, and follows live from there: no gap, no
  // duplicate. Rows committed during a round are read in the next; after kStreamReplayRounds the
  // rest (what the last round let in) is read under the lock.
  StreamCursor cursor = from;
  for (int round = 1;; ++round) {
    SLUICE_RETURN_IF_ERROR(ReplayStored(*store_, job_id, events, logs, cursor, sink));
    std::lock_guard<TimedMutex> lock(mu_);
    SLUICE_ASSIGN_OR_RETURN(bool behind, StoredPast(*store_, job_id, events, logs, cursor));
    if (behind && round < kStreamReplayRounds) continue;  // another round, without the lock
    if (behind) SLUICE_RETURN_IF_ERROR(ReplayStored(*store_, job_id, events, logs, cursor, sink));
    SLUICE_ASSIGN_OR_RETURN(auto job, JobRecordLocked(job_id));
    if (!job) return Status::NotFound("no job " + job_id + " (deleted)");
    if (st::IsTerminal(job->state)) {
      sink(EndItem(*job));
      return uint64_t{0};
    }
    return followers_.Follow(job_id, events, logs, std::move(sink));
  }
}

void ServerCore::Unsubscribe(uint64_t id) {
  std::lock_guard<TimedMutex> lock(mu_);
  followers_.Drop(id);
}

}  // namespace sluice::server
