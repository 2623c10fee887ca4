// One simulated agent's wss:// connection to the server: connect from a chosen source address,
// TLS (no certificate check: a loopback bench against the server's own CA, as run.py), the
// WebSocket upgrade of GET /v1/agent/connect, then messages both ways. Transport only: what the
// agent says is the engine's (agents_engine.h), told through Events.
//
// Everything runs on the engine's one io_context thread, so nothing here is locked; the
// connection keeps itself alive (shared_from_this) while an operation of its own is pending.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address_v4.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket/stream.hpp>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>

#include "mute_stream.h"

namespace sluice::swarm {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // Called on the io thread. OnEnd comes exactly once per Start, whether the connection failed
  // before the upgrade or was closed after it; nothing comes after it.
  class Events {
   public:
    virtual void OnOpen(Connection& c) = 0;  // upgraded: messages may be sent
    virtual void OnMessage(Connection& c, std::string_view text) = 0;
    virtual void OnControlFrame(Connection& c, bool close) = 0;  // ping, pong or close read
    virtual void OnEnd(Connection& c, std::string how) = 0;

   protected:
    ~Events() = default;
  };

  // What the engine's heartbeat keeps per connection: it starts at the first welcome and its
  // timer is cancelled when the connection ends.
  struct Heartbeat {
    explicit Heartbeat(boost::asio::io_context& ioc) : timer(ioc) {}
    boost::asio::steady_timer timer;
    uint64_t seq = 0;
    bool started = false;
  };

  Connection(boost::asio::io_context& ioc, boost::asio::ssl::context& tls, Events& events,
             int agent);

  // Binds `source` (any port), connects to 127.0.0.1:port, handshakes TLS and upgrades with
  // `Authorization: Bearer token`. Connect, TLS and upgrade together must finish within 30 s.
  void Start(const boost::asio::ip::address_v4& source, uint16_t port, const std::string& token);
  // Queues a text message (sent in order, one write at a time, as Beast requires).
  void Send(std::string text);
  // Writes nothing more once the messages already queued are written (as run.py's agent, whose
  // earlier writes are in its transport's buffer), pongs and the close reply included
  // (mute_stream.h).
  void Mute();
  // Ends the connection now (the engine is stopping): OnEnd follows.
  void Close();

  int agent() const { return agent_; }
  bool open() const { return open_; }
  bool was_open() const { return was_open_; }  // its upgrade completed, whatever since
  Heartbeat& heartbeat() { return heartbeat_; }

 private:
  void OnConnect(boost::beast::error_code ec);
  void OnTlsHandshake(boost::beast::error_code ec);
  void OnUpgrade(boost::beast::error_code ec);
  void ReadNext();
  void WriteNext();
  void End(std::string how);

  boost::beast::websocket::stream<MuteTlsStream> ws_;
  Events& events_;
  int agent_;
  std::string token_;
  // Only during the upgrade (the server's 101 or refusal), not for the connection's life.
  std::unique_ptr<boost::beast::websocket::response_type> upgrade_response_;
  boost::beast::flat_buffer read_buf_;
  std::deque<std::string> out_;  // front() is being written while writing_
  bool writing_ = false;
  bool mute_when_written_ = false;
  bool open_ = false;
  bool was_open_ = false;
  bool ended_ = false;
  Heartbeat heartbeat_;
};

}  // namespace sluice::swarm
