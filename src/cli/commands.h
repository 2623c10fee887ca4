// The user-facing subcommands. Each returns the process exit code: 0 on success, 1 for an
// error from the server or the environment, 2 for a usage error; `run` in follow mode returns
// the job's own exit code.
#pragma once

#include <string>
#include <vector>

namespace sluice::cli {

struct GlobalFlags {
  std::string server;
  std::string token;
  bool json = false;
};

struct RunFlags {
  std::string spec_path;
  bool follow = false;
  bool detach = false;
};

int RunCommand(const GlobalFlags& g, const RunFlags& f);
int JobsCommand(const GlobalFlags& g, const std::string& state, int limit);
int JobCommand(const GlobalFlags& g, const std::string& id);
int LogsCommand(const GlobalFlags& g, const std::string& id, bool follow);
int CancelCommand(const GlobalFlags& g, const std::string& id);
// `query` is the offer query language (market/query.h), `sort` like "price,-perf".
int OffersCommand(const GlobalFlags& g, const std::string& query, const std::string& sort,
                  int limit);
int CatalogImportCommand(const GlobalFlags& g, const std::vector<std::string>& files);
int NodesCommand(const GlobalFlags& g);

}  // namespace sluice::cli
