// Turns YAML text into a SpecValue tree without letting hostile input hurt the process.
// yaml-cpp recurses once per nesting level and its Node API expands aliases, so this reader
// checks size, encoding and nesting before yaml-cpp sees the text, and uses the event API
// (no alias expansion; aliases are rejected).
#pragma once

#include <string_view>

#include "common/status.h"
#include "spec/spec_value.h"

namespace sluice::spec {

// Deeper nesting than this is rejected before parsing. A job spec needs 3 levels.
inline constexpr int kMaxYamlDepth = 64;
// More scalars and collections than this (keys included) are rejected while parsing.
inline constexpr int kMaxYamlNodes = 4096;

// Errors are "FILE:LINE:COL: message" (or "FILE: message" when there is no position).
// The root may be any kind; the caller decides what it must be.
Result<SpecValue> ReadYaml(std::string_view text, std::string_view filename);

// A conservative upper bound on the nesting depth of `text` (block indentation levels, `- `
// indicators and flow brackets outside quotes, comments and block scalars). Returns the first
// position where the bound exceeds `limit`, or line 0 when it never does. Exposed for tests.
SpecPos FindExcessiveNesting(std::string_view text, int limit);

}  // namespace sluice::spec
