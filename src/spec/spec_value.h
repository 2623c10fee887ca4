// SpecValue: a neutral tree that both the YAML and the JSON readers produce, so the JobSpec
// rules are written once (job_spec.cc) whatever the input format.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::spec {

struct SpecValue;

// Where a node came from. line == 0 means "no position" (the JSON form has none).
struct SpecPos {
  int line = 0;  // 1-based
  int col = 0;   // 1-based
};

struct SpecKey {
  std::string text;
  SpecPos pos;
};

struct SpecValue {
  enum class Kind { kNull, kString, kNumber, kBool, kMap, kSeq };

  Kind kind = Kind::kNull;
  // For scalars: the text as written (a number keeps its spelling, e.g. "2.50" or "1e3").
  std::string text;
  SpecPos pos;
  // kMap: entries in document order; duplicates are kept so the validator can report them.
  std::vector<std::pair<SpecKey, SpecValue>> entries;
  // kSeq: items.
  std::vector<SpecValue> items;
};

// "string", "number", "mapping", ... for error messages.
const char* KindName(SpecValue::Kind kind);

// Errors are one line: control bytes in user text (or in yaml-cpp's messages, which quote the
// offending character) are written as \xNN.
std::string EscapeControl(std::string_view s);

// User text shown inside a one-line message: quoted, truncated to 40 bytes, control bytes, quotes
// and backslashes escaped.
std::string QuoteText(std::string_view s);
// What a value is, for "expected X, got Y" messages: `string "abc"`, `12`, `a mapping`, ...
std::string DescribeValue(const SpecValue& v);

}  // namespace sluice::spec
