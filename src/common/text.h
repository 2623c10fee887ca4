// Small text utilities shared by parsers and the CLI.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sluice {

// True when `s` is well-formed UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
bool IsValidUtf8(std::string_view s);
// Byte offset of the first invalid UTF-8 sequence, or npos.
size_t FirstInvalidUtf8(std::string_view s);
std::string Trim(std::string_view s);
std::vector<std::string> Split(std::string_view s, char sep);
std::string ToLower(std::string_view s);
// Fields of one CSV line (data files compiled in): commas split, double quotes group, "" is a
// literal quote. No error reporting: for trusted, tested data, not user input.
std::vector<std::string> CsvFields(std::string_view line);
// Levenshtein distance, for "did you mean" suggestions.
size_t EditDistance(std::string_view a, std::string_view b);
// Compares dotted version strings numerically part by part ("535.104.05" > "535.86.05").
// Returns <0, 0, >0. Non-numeric parts compare as strings.
int CompareVersions(std::string_view a, std::string_view b);

}  // namespace sluice
