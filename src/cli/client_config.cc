#include "cli/client_config.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/text.h"

namespace sluice::cli {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string ReadTrimmed(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  return Trim(ss.str());
}

}  // namespace

std::string DefaultDataRoot() {
  if (auto d = Env("SLUICE_DATA_DIR"); !d.empty()) return d;
  if (auto x = Env("XDG_DATA_HOME"); !x.empty()) return x + "/sluice";
  std::string home = Env("HOME");
  return (home.empty() ? std::string(".") : home) + "/.local/share/sluice";
}

std::string DefaultServerDataDir() { return DefaultDataRoot() + "/server"; }
std::string DefaultAgentDataDir() { return DefaultDataRoot() + "/agent"; }

Result<ClientConfig> ResolveClientConfig(const std::string& server_flag,
                                         const std::string& token_flag) {
  ClientConfig c;
  c.server = !server_flag.empty() ? server_flag : Env("SLUICE_SERVER");
  if (c.server.empty()) c.server = ReadTrimmed(DefaultServerDataDir() + "/server.url");
  if (c.server.empty()) {
    return Status::FailedPrecondition(
        "no server: pass --server URL or set SLUICE_SERVER (a local `sluice server` also writes " +
        DefaultServerDataDir() + "/server.url)");
  }
  c.token = !token_flag.empty() ? token_flag : Env("SLUICE_TOKEN");
  if (c.token.empty()) c.token = ReadTrimmed(DefaultServerDataDir() + "/admin.token");
  if (c.token.empty()) {
    return Status::FailedPrecondition(
        "no token: pass --token or set SLUICE_TOKEN (a local server writes it to " +
        DefaultServerDataDir() + "/admin.token)");
  }
  return c;
}

}  // namespace sluice::cli
