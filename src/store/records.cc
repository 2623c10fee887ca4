#include "store/records.h"

#include <array>
#include <string>
#include <utility>

namespace sluice::store {
namespace {

// One table per enum keeps Name and Parse from drifting apart: both read the same rows.
constexpr std::array<std::pair<JobState, std::string_view>, 8> kJobStates = {{
    {JobState::kQueued, "queued"},
    {JobState::kStarting, "starting"},
    {JobState::kRunning, "running"},
    {JobState::kSucceeded, "succeeded"},
    {JobState::kFailed, "failed"},
    {JobState::kCancelled, "cancelled"},
    {JobState::kLost, "lost"},
    {JobState::kBudgetExhausted, "budget-exhausted"},
}};

constexpr std::array<std::pair<AttemptState, std::string_view>, 7> kAttemptStates = {{
    {AttemptState::kStarting, "starting"},
    {AttemptState::kRunning, "running"},
    {AttemptState::kSucceeded, "succeeded"},
    {AttemptState::kFailed, "failed"},
    {AttemptState::kCancelled, "cancelled"},
    {AttemptState::kLost, "lost"},
    {AttemptState::kPreempted, "preempted"},
}};

constexpr std::array<std::pair<NodeState, std::string_view>, 3> kNodeStates = {{
    {NodeState::kOnline, "online"},
    {NodeState::kOffline, "offline"},
    {NodeState::kLost, "lost"},
}};

template <typename E, size_t N>
std::string_view NameIn(const std::array<std::pair<E, std::string_view>, N>& table, E e) {
  for (const auto& [value, name] : table) {
    if (value == e) return name;
  }
  return "unknown";
}

template <typename E, size_t N>
Result<E> ParseIn(const std::array<std::pair<E, std::string_view>, N>& table, std::string_view s,
                  std::string_view what) {
  for (const auto& [value, name] : table) {
    if (name == s) return value;
  }
  std::string expected;
  for (const auto& [value, name] : table) {
    if (!expected.empty()) expected += ", ";
    expected += name;
  }
  return Status::InvalidArgument("unknown " + std::string(what) + " \"" + std::string(s) +
                                 "\" (expected one of: " + expected + ")");
}

}  // namespace

std::string_view Name(JobState s) { return NameIn(kJobStates, s); }
std::string_view Name(AttemptState s) { return NameIn(kAttemptStates, s); }
std::string_view Name(NodeState s) { return NameIn(kNodeStates, s); }

Result<JobState> ParseJobState(std::string_view s) { return ParseIn(kJobStates, s, "job state"); }
Result<AttemptState> ParseAttemptState(std::string_view s) {
  return ParseIn(kAttemptStates, s, "attempt state");
}
Result<NodeState> ParseNodeState(std::string_view s) {
  return ParseIn(kNodeStates, s, "node state");
}

bool IsTerminal(JobState s) {
  switch (s) {
    case JobState::kQueued:
    case JobState::kStarting:
    case JobState::kRunning:
    case JobState::kBudgetExhausted:
      return false;
    case JobState::kSucceeded:
    case JobState::kFailed:
    case JobState::kCancelled:
    case JobState::kLost:
      return true;
  }
  return false;
}

bool IsTerminal(AttemptState s) {
  switch (s) {
    case AttemptState::kStarting:
    case AttemptState::kRunning:
      return false;
    case AttemptState::kSucceeded:
    case AttemptState::kFailed:
    case AttemptState::kCancelled:
    case AttemptState::kLost:
    case AttemptState::kPreempted:
      return true;
  }
  return false;
}

}  // namespace sluice::store
