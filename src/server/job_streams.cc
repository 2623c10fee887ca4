#include "server/job_streams.h"

#include <vector>

namespace sluice::server {

namespace {

Json EventItem(const store::JobEvent& ev) {
  Json item = EventToJson(ev);
  item["type"] = "event";
  return item;
}

}  // namespace

Status ReplayStored(store::Store& store, const std::string& job_id, bool events, bool logs,
                    StreamCursor& cursor, const StreamSink& sink) {
  constexpr size_t kPage = 1000;
  if (events) {
    while (true) {
      SLUICE_ASSIGN_OR_RETURN(auto page,
                              store.ReadEvents(job_id, cursor.event, static_cast<int>(kPage)));
      for (const auto& ev : page) {
        if (!sink(EventItem(ev))) return Status::Cancelled("reader went away");
        cursor.event = ev.id;
      }
      if (page.size() < kPage) break;
    }
  }
  if (logs) {
    while (true) {
      SLUICE_ASSIGN_OR_RETURN(auto page,
                              store.ReadLogs(job_id, cursor.log, static_cast<int>(kPage)));
      for (const auto& line : page) {
        if (!sink(LogToJson(line))) return Status::Cancelled("reader went away");
        cursor.log = line.id;
      }
      if (page.size() < kPage) break;
    }
  }
  return Status::Ok();
}

Result<bool> StoredPast(store::Store& store, const std::string& job_id, bool events, bool logs,
                        const StreamCursor& cursor) {
  if (events) {
    SLUICE_ASSIGN_OR_RETURN(auto next, store.ReadEvents(job_id, cursor.event, 1));
    if (!next.empty()) return true;
  }
  if (logs) {
    SLUICE_ASSIGN_OR_RETURN(auto next, store.ReadLogs(job_id, cursor.log, 1));
    if (!next.empty()) return true;
  }
  return false;
}

Json EndItem(const store::JobRecord& job) { return Json{{"type", "end"}, {"job", JobToJson(job)}}; }

uint64_t JobFollowers::Follow(const std::string& job_id, bool events, bool logs, StreamSink sink) {
  const uint64_t id = next_id_++;
  followers_[id] = Follower{job_id, events, logs, std::move(sink)};
  return id;
}

void JobFollowers::Publish(const store::WriteBatch& batch) {
  if (followers_.empty()) return;
  std::vector<uint64_t> gone;
  for (auto& [id, f] : followers_) {
    bool alive = true;
    if (f.events) {
      for (const auto& ev : batch.events) {
        if (ev.job_id == f.job_id && alive) alive = f.sink(EventItem(ev));
      }
    }
    if (f.logs) {
      for (const auto& line : batch.logs) {
        // id 0: the store already held the line (a resend), so its readers had it.
        if (line.job_id == f.job_id && line.id != 0 && alive) alive = f.sink(LogToJson(line));
      }
    }
    for (const auto& job : batch.jobs) {
      if (job.id == f.job_id && store::IsTerminal(job.state) && alive) {
        f.sink(EndItem(job));
        alive = false;
      }
    }
    if (!alive) gone.push_back(id);
  }
  for (uint64_t id : gone) followers_.erase(id);
}

void JobFollowers::Probe() {
  for (auto it = followers_.begin(); it != followers_.end();) {
    it = it->second.sink(Json()) ? std::next(it) : followers_.erase(it);
  }
}

}  // namespace sluice::server
