// The swarm's agents, compiled: what run.py's Swarm and Agent classes do, for every agent at
// once on ONE io_context on ONE thread (one thread per connection, as WsClient runs, would not
// do for 10,000). The Python swarm used about 0.4 ms of CPU per placement in the deep queue's
// release, the whole budget a 5,000/s target leaves on a 2-core machine: this engine exists so
// the bench measures the server, not its client.
//
// Per agent: connect (at most 64 connection attempts in flight, run.py's Semaphore(64)), send
// `hello`, heartbeat every interval once welcomed (first beat at a random offset), answer
// `reverify` with the passing report, `assign` with `started` and then `exited 0` (at once, or
// on release when holding), drop an attempt on `kill`/`cancel`, count `lease`s and `error`s,
// and reconnect with the node credential after a close, backing off with jitter, unless
// silenced. Inventories and reports are run.py's (generated there from its seeded random).
//
// Every method is called on the io thread: the control commands are posted there.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "agent_connection.h"

namespace sluice::swarm {

// CLOCK_MONOTONIC in seconds: the clock of Python's time.monotonic(), so the orchestrator can
// set these times against its own.
double MonotonicSeconds();

// What run.py hands over for one agent (one line of --agents-file).
struct AgentSpec {
  int i = 0;  // its index: line i of the file, agents()[i], source 127.0.0.{2 + i / per_address}
  // The hello's members other than type, node_id and attempts, as JSON text without the
  // enclosing braces ("" when none): name, inventory, prices, region, ...
  std::string hello_members;
  // The passing conformance report (a JSON object), sent with each reverify's nonce.
  std::string report;
};

// What one agent keeps across its connections (run.py's Agent).
struct Agent {
  explicit Agent(boost::asio::io_context& ioc, AgentSpec s) : spec(std::move(s)), retry(ioc) {}

  AgentSpec spec;
  std::string node_id;
  std::string credential;
  std::vector<std::pair<std::string, std::string>> held;  // (attempt, job): started, held
  bool silent = false;              // writes nothing (heartbeats, pongs, replies); keeps reading
  double last_sent = 0;             // monotonic s of its last message written (not hello, not pong)
  double last_recv = 0;             // monotonic s of the server's last frame
  std::optional<double> closed_at;  // monotonic s the connection ended
  std::string close_how;            // how it first ended ("close frame", an error); kept after
  int welcomes = 0;
  double backoff = 0.5;     // reconnect delay bound: doubles to 8 s, never reset (run.py)
  uint64_t changed = 0;     // Engine::seq() when a field above last changed
  bool connecting = false;  // holds a connect-gate slot
  std::shared_ptr<Connection> conn;
  boost::asio::steady_timer retry;
};

struct EngineOptions {
  uint16_t port = 0;
  std::string join_token;
  double interval_s = 5;
  uint64_t seed = 1;
  int per_address = 200;    // agents per source address 127.0.0.{2 + i / per_address}
  int max_connecting = 64;  // connection attempts in flight at once
};

struct Counters {
  uint64_t welcomed = 0, reported = 0, leases = 0, started = 0, exited = 0, errors = 0;
  std::string first_error;
};

class Engine : private Connection::Events {
 public:
  Engine(boost::asio::io_context& ioc, EngineOptions options, std::vector<AgentSpec> specs);

  void Start();  // every agent connects (through the gate); once, later calls do nothing

  // Control, as run.py's Swarm offers it.
  void SetHold(bool hold) { hold_ = hold; }
  bool hold() const { return hold_; }
  uint64_t Release();   // every held attempt exits now, later ones as they start; how many
  bool Silence(int i);  // false: no such agent
  void Stop();          // closes every connection; no reconnects

  const Counters& counters() const { return counters_; }
  const std::vector<std::string>& assigned_twice() const { return assigned_twice_; }
  int Assigned(const std::string& job) const;
  const std::deque<Agent>& agents() const { return agents_; }
  size_t connected() const { return open_connections_; }
  uint64_t seq() const { return seq_; }

 private:
  void OnOpen(Connection& c) override;
  void OnMessage(Connection& c, std::string_view text) override;
  void OnControlFrame(Connection& c, bool close) override;
  void OnEnd(Connection& c, std::string how) override;

  void Connect(Agent& a);
  void StartConnection(Agent& a);
  void ReleaseGate(Agent& a);
  void Write(Agent& a, std::string text);
  void StartHeartbeat(Agent& a, std::shared_ptr<Connection> c, double delay_s);
  std::string Hello(const Agent& a) const;
  void Touch(Agent& a) { a.changed = ++seq_; }
  double Uniform(double hi) { return std::uniform_real_distribution<double>(0, hi)(rng_); }

  boost::asio::io_context& ioc_;
  EngineOptions options_;
  boost::asio::ssl::context tls_;
  std::deque<Agent> agents_;  // never moved: connections and timers point into it
  std::mt19937_64 rng_;
  int connecting_ = 0;
  std::deque<int> waiting_;  // agents waiting for a connect-gate slot, in order
  bool hold_ = false;
  bool started_ = false;
  bool stopping_ = false;
  uint64_t seq_ = 0;
  // Connections open now: counted as they open and end, since run.py asks every 10 ms and a walk
  // over 10,000 agents was 4 % of the engine's CPU in a release.
  size_t open_connections_ = 0;
  Counters counters_;
  std::unordered_map<std::string, int> assigned_;  // job id -> times assigned
  std::vector<std::string> assigned_twice_;        // each job once, when assigned a second time
};

}  // namespace sluice::swarm
