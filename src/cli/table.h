// Plain-text tables for people: columns padded to their widest cell, no borders.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "common/money.h"

namespace sluice::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void Print(std::ostream& out) const;
  bool empty() const { return rows_.empty(); }
  size_t size() const { return rows_.size(); }

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// "3s", "4m12s", "2h05m", "3d4h": a compact duration for tables.
std::string HumanDuration(int64_t millis);
// Money as common/money.h writes it: "$2.50".
using sluice::Dollars;

}  // namespace sluice::cli
