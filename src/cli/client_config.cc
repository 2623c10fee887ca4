#include "cli/client_config.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/text.h"
#include "common/token_file.h"

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

// Reads a whole file; NotFound when it cannot be opened.
Result<std::string> ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The token file to use, parsed: $SLUICE_TOKEN_FILE (must exist), else the local server's
// admin.token (may be absent: nullopt-like empty secret).
Result<TokenFile> ReadTokenFile(const std::string& local_default) {
  std::string path = Env("SLUICE_TOKEN_FILE");
  const bool explicit_file = !path.empty();
  if (!explicit_file) path = local_default;
  auto text = ReadWhole(path);
  if (!text.ok()) {
    if (explicit_file) return Status::FailedPrecondition("SLUICE_TOKEN_FILE: cannot read " + path);
    return TokenFile{};
  }
  if (Trim(*text).empty() && !explicit_file) return TokenFile{};
  auto parsed = ParseTokenFile(*text);
  if (!parsed.ok()) {
    return Status::FailedPrecondition(path + ": " + parsed.status().message());
  }
  return parsed;
}

}  // namespace

std::string& CaFileFlag() {
  static std::string flag;
  return flag;
}

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
  const std::string local_url = ReadTrimmed(DefaultServerDataDir() + "/server.url");
  c.token = !token_flag.empty() ? token_flag : Env("SLUICE_TOKEN");
  TokenFile file;
  if (c.token.find('\n') != std::string::npos) {
    // `SLUICE_TOKEN=$(cat admin.token)` holds a whole token file: its secret and CA pin.
    auto parsed = ParseTokenFile(c.token);
    if (!parsed.ok()) return Status::InvalidArgument("SLUICE_TOKEN: " + parsed.status().message());
    file = *std::move(parsed);
    c.token = file.secret;
  }
  if (c.token.empty()) {
    SLUICE_ASSIGN_OR_RETURN(file, ReadTokenFile(DefaultServerDataDir() + "/admin.token"));
    c.token = file.secret;
  }
  c.server = !server_flag.empty() ? server_flag : Env("SLUICE_SERVER");
  if (c.server.empty()) c.server = file.server;
  if (c.server.empty()) c.server = local_url;
  if (c.server.empty()) {
    return Status::FailedPrecondition(
        "no server: pass --server URL or set SLUICE_SERVER (a local `sluice server` also writes " +
        DefaultServerDataDir() + "/server.url)");
  }
  if (c.token.empty()) {
    return Status::FailedPrecondition(
        "no token: pass --token or set SLUICE_TOKEN or SLUICE_TOKEN_FILE (a local server writes "
        "it to " +
        DefaultServerDataDir() + "/admin.token)");
  }
  std::string ca_file = !CaFileFlag().empty() ? CaFileFlag() : Env("SLUICE_CA_FILE");
  if (!ca_file.empty()) {
    auto pem = ReadWhole(ca_file);
    if (!pem.ok()) return Status::FailedPrecondition("--ca-file: cannot read " + ca_file);
    c.tls.ca_pem = *pem;
  } else if (!file.ca_sha256.empty()) {
    c.tls.ca_sha256 = file.ca_sha256;
  } else if (!local_url.empty() && c.server == local_url) {
    // The local server, reached through its own server.url: its CA is right here.
    if (auto pem = ReadWhole(DefaultServerDataDir() + "/tls/ca.crt"); pem.ok()) c.tls.ca_pem = *pem;
  }
  return c;
}

Result<std::string> ResolveAgentServer(const std::string& server_flag,
                                       const std::string& join_token_file) {
  if (!server_flag.empty()) return server_flag;
  if (auto env = Env("SLUICE_SERVER"); !env.empty()) return env;
  if (auto text = ReadWhole(join_token_file); text.ok()) {
    // A malformed file is reported when the agent reads it for the token.
    if (auto f = ParseTokenFile(*text); f.ok() && !f->server.empty()) return f->server;
  }
  if (auto local = ReadTrimmed(DefaultServerDataDir() + "/server.url"); !local.empty()) {
    return local;
  }
  return Status::FailedPrecondition(
      "no server: pass --server URL, set SLUICE_SERVER, or use a join token file with a "
      "`server:` line (a local `sluice server` also writes " +
      DefaultServerDataDir() + "/server.url)");
}

}  // namespace sluice::cli
