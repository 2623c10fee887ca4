#include "agent_connection.h"

#include <netinet/in.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/field.hpp>
#include <chrono>
#include <utility>

namespace sluice::swarm {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

namespace {
// Generous: run.py's agents have no deadline at all; this one only keeps a lost handshake from
// holding a connect-gate slot for ever.
constexpr std::chrono::seconds kHandshakeTimeout{30};
// Defers the source port's choice to connect(), where the kernel knows the destination too
// (Linux; bind() to port 0 otherwise reserves a port for every destination).
using BindAddressNoPort = asio::detail::socket_option::boolean<IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT>;
}  // namespace

Connection::Connection(asio::io_context& ioc, asio::ssl::context& tls, Events& events, int agent)
    : ws_(ioc, tls), events_(events), agent_(agent), heartbeat_(ioc) {}

void Connection::Start(const asio::ip::address_v4& source, uint16_t port,
                       const std::string& token) {
  token_ = token;
  auto& tcp_stream = beast::get_lowest_layer(ws_);
  beast::error_code ec;
  tcp_stream.socket().open(tcp::v4(), ec);
  if (!ec) tcp_stream.socket().set_option(BindAddressNoPort(true), ec);
  if (!ec) tcp_stream.socket().bind(tcp::endpoint(source, 0), ec);
  if (ec) {
    // Reported from the loop, not from inside the engine's own call.
    asio::post(ws_.get_executor(),
               [self = shared_from_this(), ec] { self->End("bind: " + ec.message()); });
    return;
  }
  tcp_stream.expires_after(kHandshakeTimeout);  // connect, TLS and upgrade together
  tcp_stream.async_connect(
      tcp::endpoint(asio::ip::address_v4::loopback(), port),
      [self = shared_from_this()](beast::error_code e) { self->OnConnect(e); });
}

void Connection::OnConnect(beast::error_code ec) {
  if (ec) return End("connect: " + ec.message());
  beast::error_code ignored;
  beast::get_lowest_layer(ws_).socket().set_option(tcp::no_delay(true), ignored);
  ws_.next_layer().next_layer().async_handshake(
      asio::ssl::stream_base::client,
      [self = shared_from_this()](beast::error_code e) { self->OnTlsHandshake(e); });
}

void Connection::OnTlsHandshake(beast::error_code ec) {
  if (ec) return End("TLS: " + ec.message());
  // No idle timeout and no pings of our own: run.py's agents have neither. The handshake
  // timeout also bounds the close handshake.
  websocket::stream_base::timeout t;
  t.handshake_timeout = kHandshakeTimeout;
  t.idle_timeout = websocket::stream_base::none();
  t.keep_alive_pings = false;
  ws_.set_option(t);
  ws_.set_option(websocket::stream_base::decorator([token = token_](websocket::request_type& req) {
    req.set(beast::http::field::authorization, "Bearer " + token);
  }));
  // The server's close is timed here, as the frame is read, not after the close handshake.
  ws_.control_callback([this](websocket::frame_type kind, beast::string_view) {
    events_.OnControlFrame(*this, kind == websocket::frame_type::close);
  });
  upgrade_response_ = std::make_unique<websocket::response_type>();
  ws_.async_handshake(*upgrade_response_, "127.0.0.1", "/v1/agent/connect",
                      [self = shared_from_this()](beast::error_code e) { self->OnUpgrade(e); });
}

void Connection::OnUpgrade(beast::error_code ec) {
  unsigned status = upgrade_response_->result_int();
  upgrade_response_.reset();
  if (ec == websocket::error::upgrade_declined) {
    return End("upgrade refused: HTTP " + std::to_string(status));
  }
  if (ec) return End("upgrade: " + ec.message());
  beast::get_lowest_layer(ws_).expires_never();  // the WebSocket timeouts take over
  ws_.text(true);
  open_ = true;
  was_open_ = true;
  events_.OnOpen(*this);
  ReadNext();
}

void Connection::ReadNext() {
  if (ended_) return;
  ws_.async_read(read_buf_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
    if (ec) {
      return self->End(ec == websocket::error::closed ? "closed" : ec.message());
    }
    if (self->ws_.got_text()) {
      auto data = self->read_buf_.cdata();
      self->events_.OnMessage(*self,
                              std::string_view(static_cast<const char*>(data.data()), data.size()));
    }
    self->read_buf_.consume(self->read_buf_.size());
    self->ReadNext();
  });
}

void Connection::Send(std::string text) {
  if (ended_) return;
  out_.push_back(std::move(text));
  if (!writing_) WriteNext();
}

void Connection::WriteNext() {
  writing_ = true;
  ws_.async_write(asio::buffer(out_.front()),
                  [self = shared_from_this()](beast::error_code ec, std::size_t) {
                    self->out_.pop_front();
                    if (ec || self->ended_) {
                      // The read sees the same failure and ends the connection.
                      self->out_.clear();
                      self->writing_ = false;
                      beast::get_lowest_layer(self->ws_).close();
                      return;
                    }
                    if (self->out_.empty()) {
                      self->writing_ = false;
                      if (self->mute_when_written_) self->ws_.next_layer().Mute();
                    } else {
                      self->WriteNext();
                    }
                  });
}

void Connection::Mute() {
  if (writing_) {
    mute_when_written_ = true;
  } else {
    ws_.next_layer().Mute();
  }
}

void Connection::Close() {
  // Every pending operation fails (operation_aborted) and the first to see it ends us.
  beast::get_lowest_layer(ws_).close();
}

void Connection::End(std::string how) {
  if (ended_) return;
  ended_ = true;
  open_ = false;
  heartbeat_.timer.cancel();
  beast::get_lowest_layer(ws_).close();
  events_.OnEnd(*this, std::move(how));
}

}  // namespace sluice::swarm
