// The SQLite store's upserts of the rows every placement, start, exit and hello rewrites: nodes,
// jobs and attempts. In a header of their own so that the migration tests read the programs of
// these very statements: none may build a temporary B-tree each time it runs (store v16: an IN
// list of constants in a CHECK or an index's condition does; migrations_test.cc checks it).
// Used by sqlite_store.cc only.
#pragma once

namespace sluice::store::sqlite {

inline constexpr const char* kUpsertNode =
    "INSERT INTO nodes (id, name, inventory, state, registered_ms, last_seen_ms, "
    "price_per_gpu_hour, price_per_cpu_hour, region, interruptible_price_per_gpu_hour, "
    "interruptible_price_per_cpu_hour, verification, verification_reasons, hardware_fingerprint, "
    "software_fingerprint, verified_ms, conformance, owner, revoked, paused_until_ms, "
    "paused_reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (id) DO UPDATE SET name = excluded.name, inventory = excluded.inventory, "
    "state = excluded.state, registered_ms = excluded.registered_ms, "
    "last_seen_ms = excluded.last_seen_ms, price_per_gpu_hour = excluded.price_per_gpu_hour, "
    "price_per_cpu_hour = excluded.price_per_cpu_hour, region = excluded.region, "
    "interruptible_price_per_gpu_hour = excluded.interruptible_price_per_gpu_hour, "
    "interruptible_price_per_cpu_hour = excluded.interruptible_price_per_cpu_hour, "
    "verification = excluded.verification, verification_reasons = excluded.verification_reasons, "
    "hardware_fingerprint = excluded.hardware_fingerprint, "
    "software_fingerprint = excluded.software_fingerprint, verified_ms = excluded.verified_ms, "
    "conformance = excluded.conformance, owner = excluded.owner, revoked = excluded.revoked, "
    "paused_until_ms = excluded.paused_until_ms, paused_reason = excluded.paused_reason";
// The upserts of jobs and attempts leave out of SET the indexed columns that never change once
// the row exists (a job's submission time, owner and team; an attempt's job and creation time):
// SQLite rewrites an index, and checks a foreign key, for every column a SET names, changed or
// not, and these rows are rewritten on every placement, start and exit. The WHERE makes a record
// that does change one of them match no row, which Write reports as an error instead of a
// silent skip.
inline constexpr const char* kUpsertJob =
    "INSERT INTO jobs (id, name, spec, workdir_blob, state, priority, submitted_ms, started_ms, "
    "finished_ms, exit_code, reason, attempt_id, cancel_requested, checkpoint, preemptions, owner, "
    "team) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (id) DO UPDATE SET name = excluded.name, spec = excluded.spec, "
    "workdir_blob = excluded.workdir_blob, state = excluded.state, priority = excluded.priority, "
    "started_ms = excluded.started_ms, "
    "finished_ms = excluded.finished_ms, exit_code = excluded.exit_code, "
    "reason = excluded.reason, attempt_id = excluded.attempt_id, "
    "cancel_requested = excluded.cancel_requested, checkpoint = excluded.checkpoint, "
    "preemptions = excluded.preemptions "
    "WHERE jobs.submitted_ms = excluded.submitted_ms AND jobs.owner = excluded.owner "
    "AND jobs.team = excluded.team";
inline constexpr const char* kUpsertAttempt =
    "INSERT INTO attempts (id, job_id, node_id, gpus, cpus, memory_gb, price_per_hour, state, "
    "created_ms, started_ms, ended_ms, exit_code, cause, number, checkpoint_restored, "
    "interruptible, node_snapshot, expected_cost_micros) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (id) DO UPDATE SET node_id = excluded.node_id, "
    "gpus = excluded.gpus, cpus = excluded.cpus, memory_gb = excluded.memory_gb, "
    "price_per_hour = excluded.price_per_hour, state = excluded.state, "
    "started_ms = excluded.started_ms, "
    "ended_ms = excluded.ended_ms, exit_code = excluded.exit_code, cause = excluded.cause, "
    "number = excluded.number, checkpoint_restored = excluded.checkpoint_restored, "
    "interruptible = excluded.interruptible, node_snapshot = excluded.node_snapshot, "
    "expected_cost_micros = excluded.expected_cost_micros "
    "WHERE attempts.job_id = excluded.job_id AND attempts.created_ms = excluded.created_ms";

}  // namespace sluice::store::sqlite
