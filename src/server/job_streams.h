// Job streams (ServerCore::Subscribe; docs/design-notes.md "Job streams"): a reader of a job's
// events and logs gets the stored history first, read a page at a time from the store past a
// cursor (row ids are in commit order), then each committed change as it commits, until the job
// ends. The core decides when a reader is caught up (under its lock, where nothing commits);
// this file holds the replay and the readers that follow live. No lock of its own.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/json.h"
#include "common/status.h"
#include "server/core_types.h"
#include "store/store.h"

namespace sluice::server {

// Where a replay stands: the last row id delivered of each kind.
struct StreamCursor {
  int64_t event = 0;
  int64_t log = 0;
};

// Sends the stored events and/or log lines of `job_id` past `cursor` to `sink`, oldest first,
// moving the cursor past each. Cancelled when the sink refuses an item (the reader went away).
Status ReplayStored(store::Store& store, const std::string& job_id, bool events, bool logs,
                    StreamCursor& cursor, const StreamSink& sink);
// Whether the store holds a row of those kinds past `cursor`.
Result<bool> StoredPast(store::Store& store, const std::string& job_id, bool events, bool logs,
                        const StreamCursor& cursor);
// The last item of a stream: {"type":"end","job":{...}}.
Json EndItem(const store::JobRecord& job);

// The readers following jobs live.
class JobFollowers {
 public:
  // Follows `job_id`'s events and/or logs from now on; returns the reader's id (never 0).
  uint64_t Follow(const std::string& job_id, bool events, bool logs, StreamSink sink);
  void Drop(uint64_t id) { followers_.erase(id); }
  // Delivers what a committed batch changed to the readers of its jobs: events, then log lines,
  // in the batch's order, with the ids the store gave them (Store::Write), so a reader can
  // resume after the last it got; a job that ended gets its end item and loses its readers. A
  // reader whose sink refuses an item is dropped.
  void Publish(const store::WriteBatch& batch);
  // A liveness probe (a null item) to every reader, so readers of a job that never ends are
  // dropped once they go away.
  void Probe();
  size_t size() const { return followers_.size(); }

 private:
  struct Follower {
    std::string job_id;
    bool events = false;
    bool logs = false;
    StreamSink sink;
  };
  std::map<uint64_t, Follower> followers_;
  uint64_t next_id_ = 1;
};

}  // namespace sluice::server
