// Superseded: which records of a write batch a later record of the same key replaces.
//
// An edit may change one record more than once before it commits: a job placed, started and
// finished within one batch of agent messages, or an agent's `started` and `exited` read
// together after a stall. Where the store's upsert of a record sets every column that can
// change, only the last record of a key decides the row, and the store writes that one alone
// (docs/design-notes.md "Fewer rows per placement").
#pragma once

#include <cstddef>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice::store {

// `key(record)` returns a string_view into the record. True at i when a later record has the
// same key.
template <typename Record, typename Key>
std::vector<bool> Superseded(const std::vector<Record>& records, Key key) {
  std::vector<bool> superseded(records.size(), false);
  if (records.size() < 2) return superseded;
  std::unordered_map<std::string_view, size_t> last;
  last.reserve(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    auto [it, fresh] = last.try_emplace(std::string_view(key(records[i])), i);
    if (!fresh) {
      superseded[it->second] = true;
      it->second = i;
    }
  }
  return superseded;
}

// The same, for records keyed by their `id`.
template <typename Record>
std::vector<bool> Superseded(const std::vector<Record>& records) {
  return Superseded(
      records, [](const Record& r) -> const auto& { return r.id; });
}

}  // namespace sluice::store
