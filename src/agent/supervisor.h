// The supervisor of one attempt (issue 11 item 1; docs/design-notes.md "Supervisor"): the small
// process, one per attempt, that starts the job (in its cgroup and sandbox) and owns it until it
// ends — the role slurmstepd or conmon play. It outlives the agent: the job's output goes to a
// file in the attempt's directory, its exit to exit.json, and a restarted agent reattaches over
// the control socket and replays what it missed. It enforces the attempt's lease on its own:
// past the lease the job is frozen (thawed when the agent brings a renewal), and past the kill
// deadline, with no agent alive to speak for it, the whole cgroup is killed, so nothing of it
// can still run when the server places the job elsewhere.
//
// The files and the socket protocol are in agent/supervisor_protocol.h. The agent starts it as
// `sluice-supervisor <dir>` in a session of its own, outside the job's cgroup, with the
// listening socket on fd 3 (SupervisedJob::Start, agent/supervised_job.h).
#pragma once

#include <string>

namespace sluice::supervisor {

// Supervises the attempt described by `dir`/spec.json until the job has ended and its exit is
// on disk. `listen_fd` is the bound, listening control socket. Returns the process exit code:
// 0 once the job's exit is recorded (whatever it was), 1 when that could not be done.
int RunSupervisor(const std::string& dir, int listen_fd);

}  // namespace sluice::supervisor
