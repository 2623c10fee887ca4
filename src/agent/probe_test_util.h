// Helpers shared by the probe tests: locating and reading fixtures.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace sluice::testing {

// ctest sets SLUICE_SOURCE_DIR; running the binary by hand falls back to the configure-time path.
inline std::string SourceDir() {
  const char* env = std::getenv("SLUICE_SOURCE_DIR");
  return env && *env ? env : SLUICE_SOURCE_DIR_DEFAULT;
}

inline std::string NvidiaSmiFixture(const std::string& name) {
  return SourceDir() + "/tests/fixtures/nvidia-smi/" + name;
}

inline std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace sluice::testing
