// `sluice server`: opens the store in the data dir, mints tokens on first start, serves the API
// and the agent channel, and runs until SIGINT/SIGTERM.
#pragma once

#include <string>

namespace sluice::server {

struct ServerOptions {
  std::string listen = "127.0.0.1:7070";
  std::string data_dir;  // required
  double heartbeat_interval_s = 3;
  double heartbeat_grace_s = 15;
  double cancel_grace_s = 10;
  double keep_alive_interval_s = 15;  // WebSocket ping period
  int threads = 2;
  // The cost model (market/ranking.h) that ranks offers and places jobs.
  double storage_price_per_gb_month = 0.02;   // what checkpoint storage costs users
  double interruption_prior_per_hour = 0.05;  // interruptible capacity without history
  int checkpoint_retention = 3;               // checkpoints kept per job
  double preempt_cooldown_s = 60;             // a preempted job avoids the node it was preempted on
  double reverify_interval_s = 6 * 3600;  // verified nodes re-run conformance this often; 0 never
};

int RunServer(const ServerOptions& options);

// "HOST:PORT" -> host, port. "[::1]:80" is accepted. Port 0 means any free port.
bool SplitHostPort(const std::string& listen, std::string* host, uint16_t* port);

}  // namespace sluice::server
