#include "server/server_command.h"

#include <signal.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "common/clock.h"
#include "net/http_server.h"
#include "server/api.h"
#include "server/auth.h"
#include "server/server_core.h"
#include "store/blob_store.h"
#include "store/store.h"

namespace sluice::server {

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

  auto store = store::OpenSqliteStore(opt.data_dir + "/sluice.db");
  if (!store.ok()) {
    std::fprintf(stderr, "sluice server: %s\n", store.status().ToString().c_str());
    return 1;
  }
  store::BlobStore blobs(opt.data_dir + "/blobs");
  auto auth = TokenAuth::Bootstrap(store->get(), opt.data_dir, RealClock::Get());
  if (!auth.ok()) {
    std::fprintf(stderr, "sluice server: %s\n", auth.status().ToString().c_str());
    return 1;
  }
  CoreOptions core_opt;
  core_opt.heartbeat_interval_ms = static_cast<int64_t>(opt.heartbeat_interval_s * 1000);
  core_opt.heartbeat_grace_ms = static_cast<int64_t>(opt.heartbeat_grace_s * 1000);
  core_opt.cancel_grace_ms = static_cast<int64_t>(opt.cancel_grace_s * 1000);
  core_opt.cost_model.storage_price_per_gb_month = opt.storage_price_per_gb_month;
  core_opt.cost_model.prior_interruptions_per_hour = opt.interruption_prior_per_hour;
  core_opt.preempt_cooldown_ms = static_cast<int64_t>(opt.preempt_cooldown_s * 1000);
  core_opt.checkpoint_retention = opt.checkpoint_retention;
  core_opt.reverify_interval_ms = static_cast<int64_t>(opt.reverify_interval_s * 1000);
  // The key that signs audit bundles: created on first start, kept in the data dir (mode 0600).
  auto signing = LoadOrCreateSigningIdentity(opt.data_dir, "Sluice audit signing");
  if (!signing.ok()) {
    std::fprintf(stderr, "sluice server: audit signing key: %s\n",
                 signing.status().ToString().c_str());
    return 1;
  }
  ServerCore core(store->get(), RealClock::Get(), core_opt);
  core.SetBlobStore(&blobs);
  core.SetSigningIdentity(*std::move(signing));
  if (Status s = core.Load(); !s.ok()) {
    std::fprintf(stderr, "sluice server: loading state: %s\n", s.ToString().c_str());
    return 1;
  }
  Api api(&core, &blobs, &*auth);

  // Block the stop signals in every thread; this thread collects them with sigtimedwait.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  HttpServerOptions net_opt;
  net_opt.host = host;
  net_opt.port = port;
  net_opt.threads = opt.threads;
  net_opt.body_limit = [&api](const HttpRequest& head) { return api.BodyLimit(head); };
  net_opt.ws_keepalive_interval =
      std::chrono::milliseconds(static_cast<int64_t>(opt.keep_alive_interval_s * 1000));
  net_opt.ws_idle_timeout = std::max(net_opt.ws_keepalive_interval * 3,
                                     std::chrono::milliseconds(core_opt.heartbeat_grace_ms));
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
  std::string url = "http://" + http.address();
  // Written after listening, so a reader of server.url can connect at once (tests and the CLI
  // find a port-0 server this way).
  if (Status s = WriteFileAtomic(opt.data_dir + "/server.url", url + "\n", 0644); !s.ok()) {
    std::fprintf(stderr, "sluice server: %s\n", s.ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "sluice server: listening on %s (data dir %s)\n", url.c_str(),
               opt.data_dir.c_str());

  timespec tick{0, 200 * 1000 * 1000};
  while (true) {
    int sig = sigtimedwait(&stop_signals, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      std::fprintf(stderr, "sluice server: %s received, shutting down\n", strsignal(sig));
      break;
    }
    core.Tick();
  }
  http.Stop();
  std::filesystem::remove(opt.data_dir + "/server.url", ec);
  return 0;
}

}  // namespace sluice::server
