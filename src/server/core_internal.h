// Helpers shared by the files that implement ServerCore (server_core.h; docs/design-notes.md
// "Server core"): ids, prices in messages, and the cause an attempt carries while it is being
// preempted. Not part of the core's interface.
#pragma once

#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

#include "common/crypto.h"
#include "common/money.h"
#include "store/store.h"

namespace sluice::server::core {

// The store's names every core file uses; `using namespace core;` brings them in with the rest.
using store::AttemptRecord;
using store::AttemptState;
using store::JobRecord;
using store::WriteBatch;
namespace st = store;

inline std::string NewId(const char* prefix) { return std::string(prefix) + RandomHex(6); }

// "$2.5/h": a locked price in an event.
inline std::string Money(double per_hour) { return DollarsPerHour(per_hour); }

// "0,1,3"
std::string GpuList(const std::vector<int>& gpus);

// A wall time in UTC by strftime's `format` ("%Y-%m-%d": the day cost totals file a charge under).
inline std::string Utc(int64_t ms, const char* format) {
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[48];
  return std::strftime(buf, sizeof buf, format, &tm) > 0 ? buf : "";
}

inline double GiB(uint64_t mib) { return static_cast<double>(mib) / 1024.0; }

// Incremental passes lean on the last full search while it is younger than kFullSearchLastsMs,
// so a change the bookkeeping missed cannot strand a job for longer; the tick renews it from
// kFullSearchRenewMs on (docs/design-notes.md "Placement at scale").
constexpr int64_t kFullSearchLastsMs = 10'000;
constexpr int64_t kFullSearchRenewMs = 8'000;

// An attempt's cause while its preemption is under way. Stored with the attempt, so an exit that
// arrives after a server restart is still recognised as the end of a preemption.
constexpr std::string_view kPreemptingPrefix = "preempting: ";
// Whether two records of one attempt take the same room on their node: equal in everything a
// node's capacity reads of its attempts (ServerCore::NodeCapacityLocked). A change that keeps
// this (an attempt started) leaves the node's capacity as it was.
inline bool SameRoomOnNode(const store::AttemptRecord& a, const store::AttemptRecord& b) {
  auto preempting = [](const std::string& cause) { return cause.rfind(kPreemptingPrefix, 0) == 0; };
  return a.node_id == b.node_id && a.gpus == b.gpus && a.cpus == b.cpus &&
         a.memory_gb == b.memory_gb && a.interruptible == b.interruptible &&
         a.price_per_hour == b.price_per_hour && preempting(a.cause) == preempting(b.cause);
}
// The causes of stops by money (issue 15 item 1): the job's max_total_cost, its account's
// credit. An attempt that ends with one of them leaves its job budget-exhausted, not requeued.
constexpr std::string_view kBudgetStop = "max_total_cost reached";
constexpr std::string_view kCreditStop = "credit limit reached";
constexpr std::string_view kMonthlyStop = "monthly budget reached";
// Whether an attempt's cause is one of those stops (as preempting or as preempted).
inline bool StoppedByMoney(std::string_view cause) {
  for (std::string_view prefix : {kPreemptingPrefix, std::string_view("preempted: ")}) {
    if (cause.substr(0, prefix.size()) != prefix) continue;
    const std::string_view rest = cause.substr(prefix.size());
    return rest.substr(0, kBudgetStop.size()) == kBudgetStop ||
           rest.substr(0, kCreditStop.size()) == kCreditStop ||
           rest.substr(0, kMonthlyStop.size()) == kMonthlyStop;
  }
  return false;
}

}  // namespace sluice::server::core
