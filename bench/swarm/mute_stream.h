// A TLS stream that can be muted: once muted, every write is reported done without reaching TLS
// or the socket, while reads go on as before.
//
// Why: a silenced agent (dead-node detection) must write nothing, pongs included, yet keep
// reading so it sees the server close it. Beast 1.74 answers every ping with a pong inside its
// read operation and has no option to turn that off (a control_callback only observes the
// ping). Sitting between the WebSocket stream and TLS, this layer swallows that pong, and the
// reply to the server's close frame, exactly where run.py's Python agent simply writes nothing.
#pragma once

#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <boost/beast/websocket/teardown.hpp>
#include <utility>

namespace sluice::swarm {

class MuteTlsStream {
 public:
  // beast::tcp_stream with the io_context's own executor type rather than a type-erased one:
  // cheaper on every read and write (one thread, one io_context).
  using tcp_layer_type =
      boost::beast::basic_stream<boost::asio::ip::tcp, boost::asio::io_context::executor_type>;
  using next_layer_type = boost::beast::ssl_stream<tcp_layer_type>;
  using executor_type = next_layer_type::executor_type;

  MuteTlsStream(boost::asio::io_context& ioc, boost::asio::ssl::context& ctx) : next_(ioc, ctx) {}

  executor_type get_executor() noexcept { return next_.get_executor(); }
  next_layer_type& next_layer() noexcept { return next_; }
  const next_layer_type& next_layer() const noexcept { return next_; }

  // From now on nothing more is written (a write already handed to TLS still completes).
  void Mute() { muted_ = true; }
  bool muted() const { return muted_; }

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return next_.async_read_some(buffers, std::forward<Token>(token));
  }

  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::beast::error_code, std::size_t)>(
        [this](auto handler, const ConstBuffers& b) {
          if (!muted_) {
            next_.async_write_some(b, std::move(handler));
            return;
          }
          // Every byte "written", so Beast's state stays that of a completed write.
          std::size_t n = boost::asio::buffer_size(b);
          boost::asio::post(
              next_.get_executor(),
              boost::beast::bind_front_handler(std::move(handler), boost::beast::error_code{}, n));
        },
        token, buffers);
  }

 private:
  next_layer_type next_;
  bool muted_ = false;
};

// The WebSocket close's teardown, found by argument-dependent lookup: TLS's own (close_notify)
// unless muted, when the socket is just closed, writing nothing.
inline void teardown(boost::beast::role_type role, MuteTlsStream& s, boost::beast::error_code& ec) {
  if (s.muted()) {
    boost::beast::get_lowest_layer(s).socket().close(ec);
    return;
  }
  using boost::beast::websocket::teardown;
  teardown(role, s.next_layer(), ec);
}

template <class Handler>
void async_teardown(boost::beast::role_type role, MuteTlsStream& s, Handler&& handler) {
  if (s.muted()) {
    boost::beast::error_code ec;
    boost::beast::get_lowest_layer(s).socket().close(ec);
    boost::asio::post(s.get_executor(),
                      boost::beast::bind_front_handler(std::forward<Handler>(handler), ec));
    return;
  }
  using boost::beast::websocket::async_teardown;
  async_teardown(role, s.next_layer(), std::forward<Handler>(handler));
}

}  // namespace sluice::swarm
