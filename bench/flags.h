// The benches' command lines: `--flag N` numbers and `--help`. Header-only, bench-only.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace sluice::bench {

// The number after `flag`, or `fallback` when the flag is absent.
inline size_t FlagValue(int argc, char** argv, const char* flag, size_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], flag) == 0) return std::strtoull(argv[i + 1], nullptr, 10);
  }
  return fallback;
}

// Whether `--help` or `-h` was asked for.
inline bool WantsHelp(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) return true;
  }
  return false;
}

// Says what went wrong, as `program: what`, and exits 1.
[[noreturn]] inline void Die(const char* program, const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", program, what.c_str());
  std::exit(1);
}

}  // namespace sluice::bench
