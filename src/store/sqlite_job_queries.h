// The SQLite store's reads of the jobs table, in a header of their own so that the migration
// tests read the plans of these very statements: the finished-job lists must match the partial
// indexes' condition of store v16 word for word, or the planner ignores those indexes and a list
// reads every row (migrations_test.cc checks it). Used by sqlite_store.cc only.
#pragma once

namespace sluice::store::sqlite {

#define SLUICE_JOB_COLUMNS                                                                  \
  "SELECT id, name, spec, workdir_blob, state, priority, submitted_ms, started_ms, "        \
  "finished_ms, exit_code, reason, attempt_id, cancel_requested, checkpoint, preemptions, " \
  "owner, team FROM jobs "
inline constexpr const char* kSelectJobs = SLUICE_JOB_COLUMNS "ORDER BY submitted_ms, rowid";
inline constexpr const char* kSelectJob = SLUICE_JOB_COLUMNS "WHERE id = ?";
// Finished jobs newest first, after a cursor; `state = ?` is skipped when its flag is 0. The
// first term is the partial indexes' condition (store v16, an OR chain: an IN list would build a
// temporary B-tree on every write of a job row), written out so the planner uses
// them: a range of jobs_finished (all), jobs_finished_by_owner or jobs_finished_by_team read
// backwards from the cursor (the row value is the range), no sort, no unfinished row stepped
// over.
#define SLUICE_FINISHED_WHERE                                                                 \
  "WHERE (state = 'succeeded' OR state = 'failed' OR state = 'cancelled' OR state = 'lost') " \
  "AND (? = 0 OR state = ?) "                                                                 \
  "AND (submitted_ms, id) < (?, ?) "
#define SLUICE_NEWEST_FIRST "ORDER BY submitted_ms DESC, id DESC LIMIT ?"
inline constexpr const char* kSelectFinishedJobs =
    SLUICE_JOB_COLUMNS SLUICE_FINISHED_WHERE SLUICE_NEWEST_FIRST;
inline constexpr const char* kSelectFinishedJobsOfOwner =
    SLUICE_JOB_COLUMNS SLUICE_FINISHED_WHERE "AND owner = ? " SLUICE_NEWEST_FIRST;
inline constexpr const char* kSelectFinishedJobsOfTeam =
    SLUICE_JOB_COLUMNS SLUICE_FINISHED_WHERE "AND team != '' AND team = ? " SLUICE_NEWEST_FIRST;
#undef SLUICE_NEWEST_FIRST
#undef SLUICE_FINISHED_WHERE
#undef SLUICE_JOB_COLUMNS

}  // namespace sluice::store::sqlite
