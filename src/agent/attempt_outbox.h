// What the server has not yet been told about an attempt, and how its acknowledgements and a
// reconnect change that (issue 12 item 2: the agent's resend and ack rules as a seam, pure and
// unit-tested; docs/design-notes.md "Reconciliation"). No I/O: the agent sends what these
// return on its server link, under its lock.
#pragma once

#include <cstdint>
#include <vector>

#include "agent/agent_internal.h"
#include "common/json.h"

namespace sluice::agent::internal {

// The messages owed for `a`, in the order the server needs them: started (once its process
// exists, `launched`, or it has an exit code), its log lines not yet sent on this connection (in
// batches of at most proto::kMaxLinesPerLogMessage), a preemption this side started, a periodic
// checkpoint, and its exit (never for an attempt reported lost). Marks them sent on this
// connection.
std::vector<Json> TakeUnsent(Attempt& a, bool launched);

// The server stored every line up to `seq`: they are dropped. An older ack changes nothing.
void AckLogs(Attempt& a, int64_t seq);

// A new connection: everything not acknowledged goes again (the server drops duplicates by
// seq and acknowledges a second exit without applying it).
void RewindForReconnect(Attempt& a);

}  // namespace sluice::agent::internal
