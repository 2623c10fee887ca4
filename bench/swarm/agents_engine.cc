#include "agents_engine.h"

#include <time.h>

#include <algorithm>
#include <boost/asio/ip/address_v4.hpp>
#include <chrono>

#include "common/agent_protocol.h"
#include "common/json.h"

namespace sluice::swarm {

namespace asio = boost::asio;

namespace {

std::string Quoted(std::string_view s) { return Json(std::string(s)).dump(); }

// A string member of a message, or `fallback` when missing or not a string.
std::string StringOr(const Json& msg, const char* key, std::string fallback) {
  auto it = msg.find(key);
  return it != msg.end() && it->is_string() ? it->get<std::string>() : std::move(fallback);
}

std::chrono::nanoseconds Seconds(double s) {
  return std::chrono::nanoseconds(static_cast<int64_t>(s * 1e9));
}

// The agent's messages in the protocol's own encoding (common/agent_protocol.h), so the bench
// speaks whatever the real agent speaks.
std::string Exited(const std::string& attempt) {
  return proto::ToJson(proto::Exited{attempt, 0, 0}).dump();
}

}  // namespace

double MonotonicSeconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

Engine::Engine(asio::io_context& ioc, EngineOptions options, std::vector<AgentSpec> specs)
    : ioc_(ioc),
      options_(std::move(options)),
      tls_(asio::ssl::context::tls_client),
      rng_(options_.seed) {
  // No certificate check: a loopback bench against the server's own CA, as run.py does.
  tls_.set_verify_mode(asio::ssl::verify_none);
  for (auto& s : specs) agents_.emplace_back(ioc_, std::move(s));
}

void Engine::Start() {
  if (started_) return;
  started_ = true;
  for (auto& a : agents_) Connect(a);
}

void Engine::Connect(Agent& a) {
  if (stopping_) return;
  if (connecting_ < options_.max_connecting) {
    StartConnection(a);
  } else {
    waiting_.push_back(a.spec.i);
  }
}

void Engine::StartConnection(Agent& a) {
  ++connecting_;
  a.connecting = true;
  Connection::Events& events = *this;
  a.conn = std::make_shared<Connection>(ioc_, tls_, events, a.spec.i);
  auto source = asio::ip::address_v4(0x7f000002u + static_cast<uint32_t>(a.spec.i) /
                                                       static_cast<uint32_t>(options_.per_address));
  a.conn->Start(source, options_.port, a.credential.empty() ? options_.join_token : a.credential);
}

void Engine::ReleaseGate(Agent& a) {
  if (!a.connecting) return;
  a.connecting = false;
  --connecting_;
  while (!waiting_.empty() && connecting_ < options_.max_connecting && !stopping_) {
    int next = waiting_.front();
    waiting_.pop_front();
    StartConnection(agents_[next]);
  }
}

std::string Engine::Hello(const Agent& a) const {
  std::string out = R"({"type":"hello","node_id":)" + Quoted(a.node_id) + R"(,"attempts":[)";
  for (size_t k = 0; k < a.held.size(); ++k) {
    if (k) out += ',';
    out += R"({"attempt_id":)" + Quoted(a.held[k].first) + R"(,"running":true})";
  }
  out += ']';
  if (!a.spec.hello_members.empty()) out += ',' + a.spec.hello_members;
  out += '}';
  return out;
}

void Engine::OnOpen(Connection& c) {
  Agent& a = agents_[c.agent()];
  ++open_connections_;
  a.closed_at.reset();
  Touch(a);
  c.Send(Hello(a));  // not Write: run.py's hello does not count as the last message sent
  // Silenced while reconnecting: run.py's agent still says hello, then nothing more.
  if (a.silent) c.Mute();
  ReleaseGate(a);  // run.py holds its gate until the hello is written
}

void Engine::Write(Agent& a, std::string text) {
  if (a.silent || !a.conn || !a.conn->open()) return;
  a.conn->Send(std::move(text));
  a.last_sent = MonotonicSeconds();
  Touch(a);
}

void Engine::StartHeartbeat(Agent& a, std::shared_ptr<Connection> c, double delay_s) {
  auto& timer = c->heartbeat().timer;
  timer.expires_after(Seconds(delay_s));
  timer.async_wait([this, &a, c](boost::system::error_code ec) {
    if (ec || !c->open()) return;
    if (!a.silent) {
      Write(a, proto::ToJson(proto::Heartbeat{static_cast<int64_t>(++c->heartbeat().seq)}).dump());
    }
    StartHeartbeat(a, c, options_.interval_s);
  });
}

void Engine::OnMessage(Connection& c, std::string_view text) {
  Agent& a = agents_[c.agent()];
  a.last_recv = MonotonicSeconds();
  Touch(a);
  auto parsed = ParseJson(text);
  if (!parsed.ok() || !parsed->is_object()) return;
  const Json& msg = *parsed;
  std::string type = StringOr(msg, "type", "");
  if (type == "lease") {
    ++counters_.leases;
  } else if (type == "assign") {
    std::string attempt = StringOr(msg, "attempt_id", "");
    std::string job = StringOr(msg, "job_id", "");
    if (++assigned_[job] == 2) assigned_twice_.push_back(job);
    Write(a, proto::ToJson(proto::Started{attempt}).dump());
    ++counters_.started;
    if (hold_) {
      a.held.emplace_back(attempt, job);
    } else {
      Write(a, Exited(attempt));
      ++counters_.exited;
    }
  } else if (type == "welcome") {
    ++counters_.welcomed;
    ++a.welcomes;
    a.node_id = StringOr(msg, "node_id", a.node_id);
    std::string credential = StringOr(msg, "credential", "");
    if (!credential.empty()) a.credential = credential;
    auto& beat = c.heartbeat();
    if (!beat.started) {
      beat.started = true;
      StartHeartbeat(a, c.shared_from_this(), Uniform(options_.interval_s));
    }
  } else if (type == "reverify") {
    auto report = ParseJson(a.spec.report);  // run.py's, checked when the file was read
    Write(a, proto::ToJson(proto::ConformanceMessage{report.ok() ? *report : Json::object(),
                                                     StringOr(msg, "nonce", "")})
                 .dump());
    ++counters_.reported;
  } else if (type == "kill" || type == "cancel") {
    std::string attempt = StringOr(msg, "attempt_id", "");
    std::erase_if(a.held, [&](const auto& h) { return h.first == attempt; });
  } else if (type == "error") {
    if (counters_.errors++ == 0) counters_.first_error = StringOr(msg, "message", "");
  }
}

void Engine::OnControlFrame(Connection& c, bool close) {
  Agent& a = agents_[c.agent()];
  a.last_recv = MonotonicSeconds();
  if (close) {
    a.close_how = "close frame";
    if (!a.closed_at) a.closed_at = a.last_recv;
  }
  Touch(a);
}

void Engine::OnEnd(Connection& c, std::string how) {
  Agent& a = agents_[c.agent()];
  if (c.was_open()) --open_connections_;
  ReleaseGate(a);
  if (a.conn.get() == &c) a.conn.reset();
  if (!a.closed_at) a.closed_at = MonotonicSeconds();
  if (a.close_how.empty()) a.close_how = std::move(how);
  Touch(a);
  if (stopping_ || a.silent) return;
  a.retry.expires_after(Seconds(Uniform(a.backoff)));
  a.backoff = std::min(a.backoff * 2, 8.0);
  a.retry.async_wait([this, &a](boost::system::error_code ec) {
    if (!ec) Connect(a);
  });
}

uint64_t Engine::Release() {
  hold_ = false;
  uint64_t n = 0;
  for (auto& a : agents_) {
    for (const auto& [attempt, job] : a.held) {
      Write(a, Exited(attempt));
      ++counters_.exited;
      ++n;
    }
    a.held.clear();
  }
  return n;
}

bool Engine::Silence(int i) {
  if (i < 0 || static_cast<size_t>(i) >= agents_.size()) return false;
  Agent& a = agents_[i];
  a.closed_at.reset();  // its close is timed from the silence on (run.py resets it too)
  a.silent = true;
  if (a.conn) a.conn->Mute();
  Touch(a);
  return true;
}

void Engine::Stop() {
  stopping_ = true;
  waiting_.clear();
  for (auto& a : agents_) {
    a.retry.cancel();
    if (a.conn) a.conn->Close();
  }
}

int Engine::Assigned(const std::string& job) const {
  auto it = assigned_.find(job);
  return it == assigned_.end() ? 0 : it->second;
}

}  // namespace sluice::swarm
