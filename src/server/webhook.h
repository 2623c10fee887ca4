// Budget alert webhooks (issue 15 item 1; README "Budgets"): the address rule a webhook URL must
// pass, and the sender that POSTs each alert to its scope's webhook until it is answered 2xx.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "common/json.h"
#include "common/status.h"
#include "store/records.h"

namespace sluice::server {

class ServerCore;

// A webhook is an http(s) URL. Unless `allow_private`, its host may not be (or resolve to) a
// loopback, link-local (the cloud metadata address among them), private or unspecified address:
// a user's webhook must not make the server reach what only the server can reach. `resolve`:
// look the name up too (delivery does; setting it only checks literal addresses and
// "localhost", so a name that does not resolve yet can still be set). With `resolve`, a name's
// checked address goes to `*address` (when not null), for the delivery to connect to that very
// address: a second lookup by the HTTP client could be answered with a private one (DNS
// rebinding). Left empty for a literal address or when private addresses are allowed.
Status CheckWebhookUrl(const std::string& url, bool allow_private, bool resolve,
                       std::string* address = nullptr);

// The JSON an alert is POSTed as.
Json AlertToJson(const store::BudgetAlert& a, const std::string& scope_name);

// Delivers undelivered alerts on a thread of its own, oldest first, each retried with backoff
// (2 s, 4 s, ... up to 10 min) for up to kMaxAttempts; every try is recorded on the alert.
class WebhookSender {
 public:
  static constexpr int kMaxAttempts = 12;
  WebhookSender(ServerCore* core, bool allow_private)
      : core_(core), allow_private_(allow_private) {}
  ~WebhookSender() { Stop(); }
  void Start();
  void Stop();
  // One round: tries every due alert once. Public for tests.
  void DeliverDue();

 private:
  ServerCore* const core_;
  const bool allow_private_;
  std::map<std::string, int64_t> next_try_mono_;  // alert key -> when it may be tried again
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace sluice::server
