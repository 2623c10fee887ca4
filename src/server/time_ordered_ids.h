// Ids for jobs and attempts that sort by when they were made (docs/design-notes.md "Ids in
// creation order"). The store indexes jobs and attempts by id, and their events by job id; with
// random ids every commit of a burst of starts and exits touched a random page of each of those
// indexes per job, so commits wrote and checkpointed page after page of WAL. Ids made in order
// put what a burst touches, jobs placed and attempts started together, on neighbouring pages.
//
// An id is a prefix and 16 hex digits: 12 of a value that never goes back (the wall clock's
// milliseconds, times 16, plus a count within the millisecond; a burst of more than 16 a
// millisecond runs ahead of the clock rather than repeat), then 4 random ones, so that two
// servers, or one restarted behind a clock that stepped back, are unlikely to make the same id.
// Not thread-safe: the core calls it under its lock.
#pragma once

#include <cstdint>
#include <string>

#include "common/clock.h"

namespace sluice::server {

class TimeOrderedIds {
 public:
  explicit TimeOrderedIds(const Clock* clock) : clock_(clock) {}
  std::string Next(const char* prefix);

 private:
  const Clock* clock_;
  uint64_t last_ = 0;  // the ordered part of the last id
};

}  // namespace sluice::server
