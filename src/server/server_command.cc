#include "server/server_command.h"

#include <arpa/inet.h>
#include <malloc.h>
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string_view>

#include "audit/tls_identity.h"
#include "common/atomic_file.h"
#include "common/clock.h"
#include "ledger/micros.h"
#include "net/http_server.h"
#include "server/accounts.h"
#include "server/api.h"
#include "server/server_core.h"
#include "server/upload_gc.h"
#include "server/webhook.h"
#include "store/blob_store.h"
#include "store/sqlite_store.h"
#include "store/store.h"

namespace sluice::server {

namespace {

// Creates, writes, syncs and removes a probe file in `dir`, and commits an empty transaction's
// worth of work to the store, so a read-only disk or database is reported before listening.
Status CheckWritable(const std::string& dir, store::Store* store) {
  std::string probe = dir + "/.write-check";
  if (Status s = WriteFileAtomic(probe, "ok\n", 0600); !s.ok()) {
    return Status::FailedPrecondition("--data-dir " + dir + " is not writable: " + s.message());
  }
  std::filesystem::remove(probe);
  std::error_code ec;
  std::filesystem::create_directories(dir + "/blobs", ec);
  std::string blob_probe = dir + "/blobs/.write-check";
  if (ec || !WriteFileAtomic(blob_probe, "ok\n", 0600).ok()) {
    return Status::FailedPrecondition("the blob directory " + dir + "/blobs is not writable" +
                                      (ec ? ": " + ec.message() : std::string()));
  }
  std::filesystem::remove(blob_probe);
  if (Status s = store->CheckWritable(); !s.ok()) {
    return Status::FailedPrecondition("the database in " + dir +
                                      " is not writable: " + s.message());
  }
  return Status::Ok();
}

// True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost).
bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost") return true;
  unsigned char a[16];
  if (inet_pton(AF_INET, host.c_str(), a) == 1) return a[0] == 127;
  static const unsigned char kV6Loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  return inet_pton(AF_INET6, host.c_str(), a) == 1 && std::memcmp(a, kV6Loopback, 16) == 0;
}

// The TLS identity (docs/design-notes.md, "TLS"): the operator's --tls-cert/--tls-key, or the
// CA and server certificate kept in DATA_DIR/tls. The generated ones are made (and the server
// certificate reissued for a new --listen host) even when serving plain HTTP, so the CA pin in
// the token files is there from the first start and stays valid when --tls is turned on later.
Result<TlsIdentity> LoadServerTlsIdentity(const ServerOptions& opt, const std::string& host) {
  if (opt.tls_cert_file.empty() != opt.tls_key_file.empty()) {
    return Status::InvalidArgument("--tls-cert and --tls-key go together");
  }
  if (!opt.tls_cert_file.empty()) return LoadTlsIdentityFiles(opt.tls_cert_file, opt.tls_key_file);
  return LoadOrCreateTlsIdentity(opt.data_dir, TlsServerNames(host, opt.tls_sans));
}

}  // namespace

bool SplitHostPort(const std::string& listen, std::string* host, uint16_t* port) {
  size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 >= listen.size()) return false;
  std::string h = listen.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h.empty()) return false;
  try {
    size_t used = 0;
    int p = std::stoi(listen.substr(colon + 1), &used);
    if (used != listen.size() - colon - 1 || p < 0 || p > 65535) return false;
    *port = static_cast<uint16_t>(p);
  } catch (...) {
    return false;
  }
  *host = h;
  return true;
}

int RunServer(const ServerOptions& opt) {
  // Block the stop signals before any thread starts (threads inherit the mask); this thread
  // collects them with sigtimedwait. A thread started earlier would keep SIGTERM's default
  // action, and a SIGTERM delivered to it would kill the server without its shutdown.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  std::string host;
  uint16_t port = 0;
  if (!SplitHostPort(opt.listen, &host, &port)) {
    std::fprintf(stderr, "sluice server: --listen: expected HOST:PORT, got `%s`\n",
                 opt.listen.c_str());
    return 2;
  }
  std::error_code ec;
  std::filesystem::create_directories(opt.data_dir, ec);
  if (ec) {
    std::fprintf(stderr, "sluice server: cannot create --data-dir %s: %s\n", opt.data_dir.c_str(),
                 ec.message().c_str());
    return 1;
  }
  ::chmod(opt.data_dir.c_str(), 0700);  // it holds the token files

  // Plain HTTP sends bearer tokens in the clear: only on loopback unless the operator insists.
  const bool tls = opt.tls || !opt.tls_cert_file.empty();
  if (!tls && !IsLoopbackHost(host)) {
    if (!opt.insecure_http) {
      std::fprintf(stderr,
                   "sluice server: refusing plain HTTP on %s, which is not a loopback address: "
                   "pass --tls (a generated CA) or --tls-cert/--tls-key, or --insecure-http if "
                   "a TLS proxy in front does the encryption\n",
                   opt.listen.c_str());
      return 2;
    }
    std::fprintf(stderr,
                 "sluice server: WARNING: serving plain HTTP on %s (--insecure-http): tokens, "
                 "job specs and logs cross the network unencrypted\n",
                 opt.listen.c_str());
  }
  auto tls_identity = LoadServerTlsIdentity(opt, host);
  if (!tls_identity.ok()) {
    std::fprintf(stderr, "sluice server: TLS: %s\n", tls_identity.status().message().c_str());
    return tls_identity.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }

  // An older database is upgraded in place at open; a step may index a large table, so the
  // start says what it does and how long it took rather than sitting silent.
  const std::string db_path = opt.data_dir + "/sluice.db";
  store::SqliteStoreOptions store_options;
  store_options.wal_write_batching = opt.wal_write_batching;
  store_options.page_cache_mib = opt.db_cache_mib;
  store_options.wal_checkpoint_pages = opt.wal_checkpoint_pages;  // 0: the store's default
  int upgraded_to = 0;
  const auto opened = std::chrono::steady_clock::now();
  store_options.on_upgrade_step = [&](int version, std::string_view what, int from_version) {
    if (upgraded_to == 0) {
      std::fprintf(stderr,
                   "sluice server: upgrading %s from schema v%d, a step at a time (a large "
                   "database takes a while; a stop resumes at the next start)\n",
                   db_path.c_str(), from_version);
    }
    std::fprintf(stderr, "sluice server:   v%d: %.*s\n", version, static_cast<int>(what.size()),
                 what.data());
    upgraded_to = version;
  };
  auto store = store::OpenSqliteStore(db_path, store_options);
  if (!store.ok()) {
    std::fprintf(stderr, "sluice server: %s\n", store.status().ToString().c_str());
    return 1;
  }
  if (upgraded_to != 0) {
    std::fprintf(stderr, "sluice server: %s is at schema v%d (upgraded in %.1f s)\n",
                 db_path.c_str(), upgraded_to,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - opened).count());
  }
  store::BlobStore blobs(opt.data_dir + "/blobs");
  // A read-only disk must stop the server now, not at the first write after "listening".
  if (Status s = CheckWritable(opt.data_dir, store->get()); !s.ok()) {
    std::fprintf(stderr, "sluice server: %s\n", s.message().c_str());
    return 1;
  }
  auto accounts =
      Accounts::Bootstrap(store->get(), opt.data_dir, RealClock::Get(), tls_identity->ca_sha256);
  if (!accounts.ok()) {
    std::fprintf(stderr, "sluice server: %s\n", accounts.status().ToString().c_str());
    return 1;
  }
  auto default_limit = ledger::ParseCreditLimit(opt.default_credit_limit, "--default-credit-limit");
  if (!default_limit.ok()) {
    std::fprintf(stderr, "sluice server: %s\n", default_limit.status().message().c_str());
    return 2;
  }
  (*accounts)->SetDefaultCreditLimit(*default_limit);
  CoreOptions core_opt;
  core_opt.platform_fee_bps = static_cast<int>(std::lround(opt.platform_fee_percent * 100));
  core_opt.settle_interval_ms = static_cast<int64_t>(opt.settle_interval_s * 1000);
  core_opt.transfer_price_per_gb = opt.transfer_price_per_gb;
  core_opt.reclaim_cooldown_ms = static_cast<int64_t>(opt.reclaim_cooldown_s * 1000);
  core_opt.heartbeat_interval_ms = static_cast<int64_t>(opt.heartbeat_interval_s * 1000);
  core_opt.heartbeat_grace_ms = static_cast<int64_t>(opt.heartbeat_grace_s * 1000);
  core_opt.lease_ms = opt.lease_s > 0 ? static_cast<int64_t>(opt.lease_s * 1000)
                                      : core_opt.heartbeat_grace_ms * 2 / 3;
  // The fencing argument (docs/design-notes.md "Leases and fencing") needs the lease to run out
  // on the agent before the server declares the node lost and places its work elsewhere, and
  // heartbeats frequent enough to renew it.
  if (core_opt.lease_ms >= core_opt.heartbeat_grace_ms ||
      core_opt.lease_ms <= core_opt.heartbeat_interval_ms) {
    std::fprintf(stderr,
                 "sluice server: --lease (%.1f s) must be shorter than --heartbeat-grace (%.1f s) "
                 "and longer than --heartbeat-interval (%.1f s)\n",
                 static_cast<double>(core_opt.lease_ms) / 1000, opt.heartbeat_grace_s,
                 opt.heartbeat_interval_s);
    return 2;
  }
  core_opt.cancel_grace_ms = static_cast<int64_t>(opt.cancel_grace_s * 1000);
  core_opt.stall_credit_after_ms = 2000;
  // The io threads' lag, once they run (the core ticks only after the HttpServer below starts).
  std::atomic<const HttpServer*> io_threads{nullptr};
  core_opt.read_lag_ms = [&io_threads]() -> int64_t {
    const HttpServer* http = io_threads.load(std::memory_order_acquire);
    return http == nullptr ? 0 : static_cast<int64_t>(http->io_lag().count());
  };
  core_opt.reliability_in_background = true;  // ten missed ticks (the tick runs every 200 ms)
  core_opt.cost_model.storage_price_per_gb_month = opt.storage_price_per_gb_month;
  core_opt.cost_model.prior_interruptions_per_hour = opt.interruption_prior_per_hour;
  core_opt.preempt_cooldown_ms = static_cast<int64_t>(opt.preempt_cooldown_s * 1000);
  core_opt.checkpoint_retention = opt.checkpoint_retention;
  core_opt.reverify_interval_ms = static_cast<int64_t>(opt.reverify_interval_s * 1000);
  core_opt.max_active_jobs_per_account = opt.max_active_jobs_per_account;
  core_opt.max_nodes_per_provider = opt.max_nodes_per_provider;
  core_opt.max_concurrent_verifications = opt.max_concurrent_verifications;
  core_opt.verify_retries = opt.verify_retries;
  core_opt.verify_retry_ms = static_cast<int64_t>(opt.verify_retry_s * 1000);
  core_opt.max_log_bytes_per_attempt =
      static_cast<int64_t>(opt.max_log_mib_per_attempt * 1024 * 1024);
  // The key that signs audit bundles: created on first start, kept in the data dir (mode 0600).
  auto signing = LoadOrCreateSigningIdentity(opt.data_dir, "Sluice audit signing");
  if (!signing.ok()) {
    std::fprintf(stderr, "sluice server: audit signing key: %s\n",
                 signing.status().ToString().c_str());
    return 1;
  }
  ServerCore core(store->get(), RealClock::Get(), core_opt);
  core.SetBlobStore(&blobs);
  core.SetAccounts(accounts->get());
  core.SetSigningIdentity(*std::move(signing));
  if (Status s = core.Load(); !s.ok()) {
    std::fprintf(stderr, "sluice server: loading state: %s\n", s.ToString().c_str());
    return 1;
  }
  core.StartScheduler();
  core.StartInbox();
  ApiOptions api_opt;
  api_opt.max_blob_bytes_per_account =
      static_cast<size_t>(opt.max_upload_gib_per_account * 1024 * 1024 * 1024);
  api_opt.refusals.per_second = opt.refusals_per_second;
  api_opt.refusals.burst = opt.refusals_per_second * 10;
  api_opt.allow_private_webhooks = opt.allow_private_webhooks;
  Api api(&core, &blobs, accounts->get(), RealClock::Get(), api_opt);
  // Budget alerts go out on a thread of their own: a slow webhook never holds up the core.
  WebhookSender webhooks(&core, opt.allow_private_webhooks);
  webhooks.Start();

  HttpServerOptions net_opt;
  net_opt.host = host;
  net_opt.port = port;
  net_opt.threads = opt.threads;
  net_opt.handler_threads = opt.api_threads;
  net_opt.body_limit = [&api](const HttpRequest& head) { return api.BodyLimit(head); };
  net_opt.ws_keepalive_interval =
      std::chrono::milliseconds(static_cast<int64_t>(opt.keep_alive_interval_s * 1000));
  net_opt.ws_idle_timeout = std::max(net_opt.ws_keepalive_interval * 3,
                                     std::chrono::milliseconds(core_opt.heartbeat_grace_ms));
  if (tls) {
    net_opt.tls_cert_chain_pem = tls_identity->cert_chain_pem;
    net_opt.tls_key_pem = tls_identity->key_pem;
  }
  net_opt.max_connections_per_address = static_cast<size_t>(opt.max_connections_per_address);
  HttpServer http(
      net_opt,
      [&api](HttpRequest req, std::shared_ptr<ResponseWriter> w) {
        api.Handle(std::move(req), std::move(w));
      },
      [&api](const HttpRequest& req, const std::shared_ptr<WsConnection>& conn) {
        return api.Upgrade(req, conn);
      });
  if (Status s = http.Start(); !s.ok()) {
    std::fprintf(stderr, "sluice server: cannot listen on %s: %s\n", opt.listen.c_str(),
                 s.message().c_str());
    return 1;
  }
  io_threads.store(&http, std::memory_order_release);
  std::string url = (tls ? "https://" : "http://") + http.address();
  // Written after listening, so a reader of server.url can connect at once (tests and the CLI
  // find a port-0 server this way).
  if (Status s = WriteFileAtomic(opt.data_dir + "/server.url", url + "\n", 0644); !s.ok()) {
    std::fprintf(stderr, "sluice server: %s\n", s.ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "sluice server: listening on %s (data dir %s)\n", url.c_str(),
               opt.data_dir.c_str());
  if (tls && !tls_identity->ca_sha256.empty()) {
    std::fprintf(stderr, "sluice server: TLS CA sha256 %s (clients pin it; token files carry it)\n",
                 tls_identity->ca_sha256.c_str());
  }

  timespec tick{0, 200 * 1000 * 1000};
  int64_t last_gc_mono = RealClock::Get()->MonotonicMillis();
  int64_t last_trim_mono = last_gc_mono;
  while (true) {
    int sig = sigtimedwait(&stop_signals, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      std::fprintf(stderr, "sluice server: %s received, shutting down\n", strsignal(sig));
      break;
    }
    core.Tick();
    int64_t now_mono = RealClock::Get()->MonotonicMillis();
    // Freed memory back to the system, every 10 s: glibc keeps what a burst freed (a
    // registration storm's TLS handshakes and conformance reports) in its arenas, so a server
    // back to idle would otherwise keep the RSS of its busiest minute (issue 12 item 4). That is
    // for builds on glibc's malloc (SLUICE_JEMALLOC off, the sanitizer build); with jemalloc, the
    // default, glibc's arenas stay empty, this finds nothing, and jemalloc's background thread
    // returns freed pages once they have been unused for its decay time (src/jemalloc_conf.cc).
    if (now_mono - last_trim_mono >= 10 * 1000) {
      last_trim_mono = now_mono;
      malloc_trim(0);
    }
    // Abandoned uploads, every ten minutes (a sweep reads every kept checkpoint manifest).
    if (now_mono - last_gc_mono >= 10 * 60 * 1000) {
      last_gc_mono = now_mono;
      auto gc =
          CollectUnreferencedUploads(accounts->get(), &core, &blobs, RealClock::Get()->NowMillis(),
                                     static_cast<int64_t>(opt.upload_grace_hours * 3600e3));
      if (!gc.ok()) {
        std::fprintf(stderr, "sluice server: upload collection: %s\n",
                     gc.status().message().c_str());
      } else if (gc->blobs_deleted > 0) {
        std::fprintf(stderr, "sluice server: deleted %lld unreferenced uploads (%lld bytes)\n",
                     static_cast<long long>(gc->blobs_deleted),
                     static_cast<long long>(gc->bytes_freed));
      }
    }
  }
  webhooks.Stop();
  http.Stop();
  std::filesystem::remove(opt.data_dir + "/server.url", ec);
  return 0;
}

}  // namespace sluice::server
