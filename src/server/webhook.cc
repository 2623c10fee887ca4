#include "server/webhook.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/clock.h"
#include "common/thread_name.h"
#include "ledger/micros.h"
#include "net/http_client.h"
#include "net/http_types.h"
#include "server/server_core.h"

namespace sluice::server {
namespace {

bool PrivateV4(uint32_t a) {  // host byte order
  const uint32_t b0 = a >> 24, b1 = (a >> 16) & 0xff;
  return b0 == 0 || b0 == 10 || b0 == 127 || (b0 == 169 && b1 == 254) ||
         (b0 == 172 && b1 >= 16 && b1 <= 31) || (b0 == 192 && b1 == 168) ||
         (b0 == 100 && b1 >= 64 && b1 <= 127);  // carrier-grade NAT, used inside clouds
}

bool PrivateV6(const in6_addr& a) {
  const uint8_t* b = a.s6_addr;
  static const uint8_t kZero[16] = {};
  if (std::memcmp(b, kZero, 15) == 0 && (b[15] == 0 || b[15] == 1)) return true;  // :: and ::1
  if ((b[0] & 0xfe) == 0xfc) return true;                                         // fc00::/7
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) return true;                         // fe80::/10
  // IPv4-mapped (::ffff:a.b.c.d): judged as IPv4.
  static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(b, kMapped, 12) == 0) {
    return PrivateV4((uint32_t{b[12]} << 24) | (uint32_t{b[13]} << 16) | (uint32_t{b[14]} << 8) |
                     b[15]);
  }
  return false;
}

// nullopt: not a literal address.
std::optional<bool> LiteralIsPrivate(const std::string& host) {
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return PrivateV4(ntohl(v4.s_addr));
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) return PrivateV6(v6);
  return std::nullopt;
}

std::string Key(const store::BudgetAlert& a) {
  return a.scope + "|" + a.month + "|" + std::to_string(a.percent);
}

}  // namespace

Status CheckWebhookUrl(const std::string& url, bool allow_private, bool resolve,
                       std::string* address) {
  if (address) address->clear();
  auto parsed = ParseUrl(url);
  if (!parsed.ok()) return Status::InvalidArgument("webhook: " + parsed.status().message());
  if (parsed->scheme != "http" && parsed->scheme != "https") {
    return Status::InvalidArgument("webhook: expected an http:// or https:// URL, got " + url);
  }
  if (allow_private) return Status::Ok();
  const std::string& host = parsed->host;
  const std::string refused = "webhook: " + host +
                              " is a loopback, link-local or private address; the server does "
                              "not send there (sluice server --allow-private-webhooks allows it)";
  std::string lower = host;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  if (lower == "localhost" || lower.ends_with(".localhost")) {
    return Status::InvalidArgument(refused);
  }
  if (auto literal = LiteralIsPrivate(host)) {
    return *literal ? Status::InvalidArgument(refused) : Status::Ok();
  }
  if (!resolve) return Status::Ok();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0) {
    return Status::Unavailable("webhook: cannot resolve " + host + ": " + gai_strerror(rc));
  }
  bool bad = false;
  std::string first;  // the address the delivery connects to: every one was checked
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    char text[INET6_ADDRSTRLEN] = "";
    if (ai->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<sockaddr_in*>(ai->ai_addr);
      bad |= PrivateV4(ntohl(in->sin_addr.s_addr));
      inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    } else if (ai->ai_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<sockaddr_in6*>(ai->ai_addr);
      bad |= PrivateV6(in6->sin6_addr);
      inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    }
    if (first.empty()) first = text;
  }
  freeaddrinfo(found);
  if (bad) return Status::InvalidArgument(refused);
  if (first.empty()) return Status::Unavailable("webhook: " + host + " has no IP address");
  if (address) *address = first;
  return Status::Ok();
}

Json AlertToJson(const store::BudgetAlert& a, const std::string& scope_name) {
  return Json{{"type", "budget-alert"},
              {"scope", a.scope},
              {"name", scope_name},
              {"month", a.month},
              {"percent", a.percent},
              {"spent_micros", a.spent_micros},
              {"budget_micros", a.budget_micros},
              {"spent", ledger::FormatMicros(a.spent_micros)},
              {"budget", ledger::FormatMicros(a.budget_micros)},
              {"ts_ms", a.ts_ms},
              {"delivered_ms", a.delivered_ms},
              {"attempts", a.attempts},
              {"last_error", a.last_error}};
}

void WebhookSender::Start() {
  thread_ = std::thread([this] {
    NameThisThread("sluice-webhook");
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      lock.unlock();
      DeliverDue();
      lock.lock();
      wake_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_; });
    }
  });
}

void WebhookSender::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void WebhookSender::DeliverDue() {
  auto pending = core_->BudgetAlerts(/*undelivered=*/true);
  if (!pending.ok()) return;  // the next round reads again
  const Clock* clock = RealClock::Get();
  for (store::BudgetAlert a : *pending) {
    if (a.attempts >= kMaxAttempts) continue;
    const std::string key = Key(a);
    auto due = next_try_mono_.find(key);
    if (due != next_try_mono_.end() && due->second > clock->MonotonicMillis()) continue;
    std::string address;  // the checked address, connected to as it is
    Status sent = CheckWebhookUrl(a.webhook, allow_private_, /*resolve=*/true, &address);
    if (sent.ok()) {
      auto url = ParseUrl(a.webhook);
      HttpClient client(*url, "", std::chrono::seconds(5), address);
      std::string path = url->base_path.empty() ? "/" : "";
      auto r = client.Request("POST", path, DumpJson(AlertToJson(a, a.scope)) + "\n");
      if (!r.ok()) {
        sent = r.status();
      } else if (r->status < 200 || r->status > 299) {
        sent = Status::Unavailable("answered HTTP " + std::to_string(r->status));
      }
    }
    ++a.attempts;
    if (sent.ok()) {
      a.delivered_ms = clock->NowMillis();
      a.last_error.clear();
      next_try_mono_.erase(key);
    } else {
      a.last_error = sent.message().substr(0, 300);
      const int64_t backoff = std::min<int64_t>(600'000, int64_t{1000} << std::min(a.attempts, 20));
      next_try_mono_[key] = clock->MonotonicMillis() + backoff;
      std::fprintf(stderr, "sluice server: budget alert webhook %s (try %d): %s\n",
                   a.webhook.c_str(), a.attempts, a.last_error.c_str());
    }
    if (Status s = core_->RecordAlertDelivery(a); !s.ok()) {
      std::fprintf(stderr, "sluice server: recording a webhook delivery failed: %s\n",
                   s.ToString().c_str());
    }
  }
}

}  // namespace sluice::server
