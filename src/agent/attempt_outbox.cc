#include "agent/attempt_outbox.h"

#include <algorithm>

namespace sluice::agent::internal {

std::vector<Json> TakeUnsent(Attempt& a, bool launched) {
  std::vector<Json> out;
  // An exit code means the job ran, even when the agent has not yet recorded its process: a
  // job that ends within a millisecond reports its end before its supervisor's start returns.
  // The server needs `started` first (it refuses one for an attempt that already ended).
  if ((launched || a.exit.has_value()) && !a.started_sent) {
    out.push_back(proto::ToJson(proto::Started{a.id}));
    a.started_sent = true;
  }
  std::vector<proto::LogEntry> batch;
  auto flush = [&] {
    if (batch.empty()) return;
    out.push_back(proto::LogMessage(a.id, batch));
    a.sent_seq = batch.back().seq;
    batch.clear();
  };
  for (const auto& l : a.lines) {
    if (l.seq <= a.sent_seq) continue;
    batch.push_back(l);
    if (batch.size() == proto::kMaxLinesPerLogMessage) flush();
  }
  flush();
  if (!a.notice.empty() && !a.exit_sent) {
    out.push_back(proto::ToJson(proto::PreemptNotice{a.id, a.notice}));
    a.notice.clear();
  }
  if (!a.pending_checkpoint.empty() && !a.exit_sent) {
    out.push_back(proto::ToJson(proto::CheckpointSaved{a.id, a.pending_checkpoint}));
    a.pending_checkpoint.clear();
  }
  const bool finished = a.exit.has_value() || !a.error.empty();
  if (finished && !a.exit_sent && !a.lost) {
    proto::Exited ex;
    ex.attempt_id = a.id;
    ex.checkpoint = a.final_checkpoint;
    ex.exit_code = a.exit ? a.exit->exit_code : -1;
    ex.signal = a.exit ? a.exit->signal : 0;
    ex.error = a.error;
    ex.out_of_memory = a.out_of_memory;
    out.push_back(proto::ToJson(ex));
    a.exit_sent = true;
  }
  return out;
}

void AckLogs(Attempt& a, int64_t seq) {
  while (!a.lines.empty() && a.lines.front().seq <= seq) a.lines.pop_front();
  a.sent_seq = std::max(a.sent_seq, seq);
}

void RewindForReconnect(Attempt& a) {
  a.sent_seq = 0;
  a.exit_sent = false;
  a.started_sent = false;
}

}  // namespace sluice::agent::internal
