// Where the CLI finds its server and token: flags, then SLUICE_SERVER / SLUICE_TOKEN, then the
// files a local server writes into its data dir (server.url, admin.token). And, for https://
// servers, how to verify them (docs/design-notes.md, "TLS").
#pragma once

#include <string>

#include "common/status.h"
#include "net/http_types.h"

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
  TlsTrust tls;  // how an https:// server is verified (ApiClient puts it into the Url)
};

// Resolves the server URL, the token and the TLS trust; an error says exactly which setting is
// missing or unreadable.
//  * token: --token, else $SLUICE_TOKEN, else the token file ($SLUICE_TOKEN_FILE, else the local
//    server's admin.token; token_file.h: the secret, then optional ca-sha256 and server lines).
//  * server: --server, else $SLUICE_SERVER, else the token file's `server:`, else the local
//    server's server.url.
//  * trust: --ca-file / $SLUICE_CA_FILE (a PEM CA), else the pin of the token file whose secret
//    is used, else the local server's tls/ca.crt when the server is the local one, else the
//    system trust store.
Result<ClientConfig> ResolveClientConfig(const std::string& server_flag,
                                         const std::string& token_flag);

// The agent's server URL: --server, else $SLUICE_SERVER, else the join token file's `server:`,
// else the local server's server.url. FailedPrecondition when none says.
Result<std::string> ResolveAgentServer(const std::string& server_flag,
                                       const std::string& join_token_file);

// The client commands' --ca-file, bound once by main_command.cc (the commands take their
// settings through ResolveClientConfig, which reads it).
std::string& CaFileFlag();

}  // namespace sluice::cli
