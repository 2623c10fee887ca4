// Job streams (server_core.h Subscribe): what a commit changed, delivered to the readers that
// follow those jobs, and the history replayed to a new reader. Members of ServerCore.
#include "server/core_internal.h"
#include "server/server_core.h"

namespace sluice::server {

using namespace core;  // NOLINT: the core's own helpers (core_internal.h)

Json ServerCore::EndItemLocked(const JobRecord& job) const {
  Json end{{"type", "end"}, {"job", JobToJson(job)}};
  return end;
}

// Delivers what a committed batch changed to the streams that follow those jobs.
void ServerCore::PublishLocked(const WriteBatch& batch) {
  if (subscribers_.empty()) return;
  std::vector<uint64_t> dead;
  for (auto& [id, sub] : subscribers_) {
    bool alive = true;
    if (sub.events) {
      for (const auto& ev : batch.events) {
        if (ev.job_id == sub.job_id && alive) {
          Json item = EventToJson(ev);
          item["type"] = "event";
          alive = sub.sink(item);
        }
      }
    }
    if (sub.logs) {
      for (const auto& line : batch.logs) {
        if (line.job_id == sub.job_id && alive) alive = sub.sink(LogToJson(line));
      }
    }
    for (const auto& job : batch.jobs) {
      if (job.id == sub.job_id && st::IsTerminal(job.state) && alive) {
        sub.sink(EndItemLocked(job));
        alive = false;
      }
    }
    if (!alive) dead.push_back(id);
  }
  for (uint64_t id : dead) subscribers_.erase(id);
}

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

Status ServerCore::ReplaySince(const std::string& job_id, bool events, bool logs,
                               StreamCursor& cursor, const StreamSink& sink) {
  constexpr size_t kPage = 1000;
  if (events) {
    while (true) {
      SLUICE_ASSIGN_OR_RETURN(auto page,
                              store_->ReadEvents(job_id, cursor.event, static_cast<int>(kPage)));
      for (const auto& ev : page) {
        Json item = EventToJson(ev);
        item["type"] = "event";
        if (!sink(item)) return Status::Cancelled("reader went away");
        cursor.event = ev.id;
      }
      if (page.size() < kPage) break;
    }
  }
  if (logs) {
    while (true) {
      SLUICE_ASSIGN_OR_RETURN(auto page,
                              store_->ReadLogs(job_id, cursor.log, static_cast<int>(kPage)));
      for (const auto& line : page) {
        if (!sink(LogToJson(line))) return Status::Cancelled("reader went away");
        cursor.log = line.id;
      }
      if (page.size() < kPage) break;
    }
  }
  return Status::Ok();
}

Result<bool> ServerCore::StoredPastLocked(const std::string& job_id, bool events, bool logs,
                                          const StreamCursor& cursor) {
  if (events) {
    SLUICE_ASSIGN_OR_RETURN(auto next, store_->ReadEvents(job_id, cursor.event, 1));
    if (!next.empty()) return true;
  }
  if (logs) {
    SLUICE_ASSIGN_OR_RETURN(auto next, store_->ReadLogs(job_id, cursor.log, 1));
    if (!next.empty()) return true;
  }
  return false;
}

Result<uint64_t> ServerCore::Subscribe(const std::string& job_id, bool events, bool logs,
                                       StreamSink sink) {
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
  StreamCursor cursor;
  for (int round = 1;; ++round) {
    SLUICE_RETURN_IF_ERROR(ReplaySince(job_id, events, logs, cursor, sink));
    std::lock_guard<TimedMutex> lock(mu_);
    SLUICE_ASSIGN_OR_RETURN(bool behind, StoredPastLocked(job_id, events, logs, cursor));
    if (behind && round < kStreamReplayRounds) continue;  // another round, without the lock
    if (behind) SLUICE_RETURN_IF_ERROR(ReplaySince(job_id, events, logs, cursor, sink));
    SLUICE_ASSIGN_OR_RETURN(auto job, JobRecordLocked(job_id));
    if (!job) return Status::NotFound("no job " + job_id + " (deleted)");
    if (st::IsTerminal(job->state)) {
      sink(EndItemLocked(*job));
      return uint64_t{0};
    }
    uint64_t id = next_subscriber_++;
    subscribers_[id] = Subscriber{job_id, events, logs, std::move(sink)};
    return id;
  }
}

void ServerCore::Unsubscribe(uint64_t id) {
  std::lock_guard<TimedMutex> lock(mu_);
  subscribers_.erase(id);
}

}  // namespace sluice::server
