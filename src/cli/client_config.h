// Where the CLI finds its server and token: flags, then SLUICE_SERVER / SLUICE_TOKEN, then the
// files a local server writes into its data dir (server.url, admin.token).
#pragma once

#include <string>

#include "common/status.h"

namespace sluice::cli {

// $SLUICE_DATA_DIR, else $XDG_DATA_HOME/sluice, else ~/.local/share/sluice.
std::string DefaultDataRoot();
// The server's default --data-dir: DefaultDataRoot()/server.
std::string DefaultServerDataDir();
// The agent's default --data-dir: DefaultDataRoot()/agent.
std::string DefaultAgentDataDir();

struct ClientConfig {
  std::string server;  // "http://127.0.0.1:7070"
  std::string token;
};

// Resolves the server URL and token; an error says exactly which setting is missing.
Result<ClientConfig> ResolveClientConfig(const std::string& server_flag,
                                         const std::string& token_flag);

}  // namespace sluice::cli
