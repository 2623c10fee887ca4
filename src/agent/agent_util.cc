// Small helpers of the agent runtime (agent_internal.h).
#include "agent/agent_internal.h"

namespace sluice::agent::internal {

void Log(const char* fmt, const std::string& a, const std::string& b) {
  std::fprintf(stderr, "sluice agent: ");
  std::fprintf(stderr, fmt, a.c_str(), b.c_str());
  std::fprintf(stderr, "\n");
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A string field of a server message; "" when absent or not a string.
std::string StringField(const Json& msg, const char* key) {
  auto v = GetStringOr(msg, key, "");
  return v.ok() ? *v : "";
}

// Field 22 of /proc/PID/stat: when the process started. Recorded with the process group so a
// later agent never kills an unrelated process that reused the pid.
std::string ProcessStartTime(pid_t pid) {
  auto stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (!stat.ok()) return "";
  size_t close = stat->rfind(')');
  if (close == std::string::npos) return "";
  std::istringstream rest(stat->substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22) return field;
  }
  return "";
}

// Server-issued ids are [A-Za-z0-9-]; anything else is replaced so an id can never name a path
// outside the agent's data dir.
std::string SafeName(std::string_view id) {
  std::string out;
  for (char c : id) {
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
  }
  return out.empty() ? "_" : out;
}

// Makes `prepared` (a directory the agent filled) the directory `box_dir` that a warm sandbox
// binds: its entries move into `box_dir` and `box_dir` takes its name. The box keeps seeing the
// same inode at its own path; the agent keeps its paths. Both are in the data dir: renames.
Status AdoptDirectory(const std::string& prepared, const std::string& box_dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(prepared, ec)) {
    fs::rename(e.path(), fs::path(box_dir) / e.path().filename(), ec);
    if (ec) return Status::Internal("cannot move " + e.path().string() + ": " + ec.message());
  }
  if (ec) return Status::Internal("cannot list " + prepared + ": " + ec.message());
  fs::remove(prepared, ec);
  fs::rename(box_dir, prepared, ec);
  if (ec) return Status::Internal("cannot rename " + box_dir + ": " + ec.message());
  return Status::Ok();
}

}  // namespace sluice::agent::internal
