// `sluice server`: opens the store in the data dir, mints tokens on first start, serves the API
// and the agent channel, and runs until SIGINT/SIGTERM.
#pragma once

#include <string>
#include <vector>

namespace sluice::server {

struct ServerOptions {
  std::string listen = "127.0.0.1:7070";
  std::string data_dir;  // required
  double heartbeat_interval_s = 3;
  double heartbeat_grace_s = 15;
  double lease_s = 0;  // running attempts' lease (fencing); 0: two thirds of the grace
  double cancel_grace_s = 10;
  double keep_alive_interval_s = 15;  // WebSocket ping period
  int threads = 1;                    // network threads (sluice-io)
  int api_threads = 2;                // the API's request handlers (sluice-api)
  // The cost model (market/ranking.h) that ranks offers and places jobs.
  double storage_price_per_gb_month = 0.02;   // what checkpoint storage costs users
  double interruption_prior_per_hour = 0.05;  // interruptible capacity without history
  int checkpoint_retention = 3;               // checkpoints kept per job
  double preempt_cooldown_s = 60;             // a preempted job avoids the node it was preempted on
  double reverify_interval_s = 6 * 3600;  // verified nodes re-run conformance this often; 0 never
  // Limits (issue 10 item 5; README "Limits").
  int max_active_jobs_per_account = 1000;
  int max_nodes_per_provider = 1000;
  int max_concurrent_verifications = 8;  // conformance suites running at once; the rest wait
  int verify_retries = 3;                // a failed verification is asked again this often
  double verify_retry_s = 60;            // ... first after this long, then doubling
  double max_log_mib_per_attempt = 64;
  double max_upload_gib_per_account = 50;
  double refusals_per_second = 5;  // per client address, sustained; bursts of 10x
  double upload_grace_hours = 24;  // unreferenced uploads older than this are deleted
  // TLS (docs/design-notes.md, "TLS"; README "TLS").
  bool tls = false;                       // HTTPS/WSS with the CA generated in DATA_DIR/tls
  std::string tls_cert_file;              // the operator's chain (PEM, leaf first); implies TLS
  std::string tls_key_file;               // its private key
  std::vector<std::string> tls_sans;      // extra names/addresses for the generated certificate
  bool insecure_http = false;             // allow plain HTTP on a non-loopback address
  int max_connections_per_address = 256;  // open connections per client IP; 0: no cap
  bool wal_write_batching = true;  // a commit's WAL frames in a few writes (--no-wal-batching)
  int db_cache_mib = 0;            // the writer's page cache (--db-cache-mib; 0: SQLite's)
  int wal_checkpoint_pages = 0;    // WAL pages between checkpoints (0: the store's default)
  // Money (issue 14; README "Bills and earnings").
  double platform_fee_percent = 0;         // taken from the provider's share
  double settle_interval_s = 60;           // running attempts are billed this often
  double transfer_price_per_gb = 0;        // bytes the platform moves for a job
  bool allow_private_webhooks = false;     // budget alert webhooks to internal addresses
  double reclaim_cooldown_s = 1800;        // a reclaimed or noticed node takes no new work
  std::string default_credit_limit = "0";  // new user accounts: USD below zero, or "unlimited"
};

int RunServer(const ServerOptions& options);

// "HOST:PORT" -> host, port. "[::1]:80" is accepted. Port 0 means any free port.
bool SplitHostPort(const std::string& listen, std::string* host, uint16_t* port);

}  // namespace sluice::server
