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

Result<uint64_t> ServerCore::Subscribe(const std::string& job_id, bool events, bool logs,
                                       StreamSink sink) {
  std::lock_guard<TimedMutex> lock(mu_);
  SLUICE_ASSIGN_OR_RETURN(auto job, JobRecordLocked(job_id));
  if (!job) return Status::NotFound("no job " + job_id);
  // Replay under mu_: nothing new can be committed meanwhile, so replay + live has no gap and
  // no duplicate.
  if (events) {
    int64_t after = 0;
    while (true) {
      SLUICE_ASSIGN_OR_RETURN(auto batch, store_->ReadEvents(job_id, after, 1000));
      for (const auto& ev : batch) {
        Json item = EventToJson(ev);
        item["type"] = "event";
        if (!sink(item)) return Status::Cancelled("reader went away");
        after = ev.id;
      }
      if (batch.size() < 1000) break;
    }
  }
  if (logs) {
    int64_t after = 0;
    while (true) {
      SLUICE_ASSIGN_OR_RETURN(auto batch, store_->ReadLogs(job_id, after, 1000));
      for (const auto& line : batch) {
        if (!sink(LogToJson(line))) return Status::Cancelled("reader went away");
        after = line.id;
      }
      if (batch.size() < 1000) break;
    }
  }
  if (st::IsTerminal(job->state)) {
    sink(EndItemLocked(*job));
    return uint64_t{0};
  }
  uint64_t id = next_subscriber_++;
  subscribers_[id] = Subscriber{job_id, events, logs, std::move(sink)};
  return id;
}

void ServerCore::Unsubscribe(uint64_t id) {
  std::lock_guard<TimedMutex> lock(mu_);
  subscribers_.erase(id);
}

}  // namespace sluice::server
