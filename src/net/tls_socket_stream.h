// The server side of a TLS connection that holds no buffers while it is idle (issue 12 item 4;
// docs/design-notes.md, "TLS"). Boost.Asio's ssl::stream keeps four 17 KiB buffers per
// connection for its whole life (two of its own, two in its BIO pair), about 70 KiB for an agent
// that sends a heartbeat every few seconds. Here OpenSSL reads the socket itself, through a BIO
// of ours, only when the socket has bytes; what it writes is collected in a string that exists
// only while it is being sent; and with SSL_MODE_RELEASE_BUFFERS OpenSSL frees its own record
// buffers between records.
//
// Waiting for bytes goes through the beast::tcp_stream beneath (what the wait reads, up to 512
// bytes, OpenSSL reads first), so the tcp_stream's expiry still bounds every wait, as it did
// for ssl_stream.
//
// Only what the server needs is here: the server role, no renegotiation (the context refuses it)
// and no client certificates. Reads never write to the socket: what OpenSSL wants to send while
// reading (a TLS 1.3 KeyUpdate answer) goes out with the next write, so a read and a write may
// be in flight at once as Beast expects, with one writer at a time.
#pragma once

#include <openssl/ssl.h>

#include <algorithm>
#include <array>
#include <boost/asio/compose.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/role.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/websocket/teardown.hpp>
#include <cstddef>
#include <memory>
#include <string>

namespace sluice::net_internal {

// What one synchronous step on the connection came to.
struct TlsStepResult {
  bool want_read = false;  // OpenSSL needs more bytes from the peer: wait, then step again
  size_t bytes = 0;        // plaintext read or written
  boost::system::error_code ec;
};

// The connection's state, shared by the stream and its operations in flight (so a stream moved
// from one session object to another, as on a WebSocket upgrade, keeps its operations valid).
class TlsSocketCore {
 public:
  TlsSocketCore(boost::asio::ip::tcp::socket&& socket, SSL_CTX* ctx);
  ~TlsSocketCore();
  TlsSocketCore(const TlsSocketCore&) = delete;
  TlsSocketCore& operator=(const TlsSocketCore&) = delete;

  boost::beast::tcp_stream& tcp() { return tcp_; }

  // Bytes that arrived before TLS was set up (the ones a protocol sniffer read): OpenSSL reads
  // them before anything else.
  void Feed(const void* data, size_t size);
  // A wait for bytes reads into this small buffer (a heartbeat's record fits), and OpenSSL reads
  // what it got next; `n` short of the buffer means the socket was drained, so OpenSSL's next
  // read goes to the wait instead of a recv that would find nothing.
  boost::asio::mutable_buffer WaitBuffer() { return boost::asio::buffer(wait_buf_); }
  void Waited(size_t n) {
    wait_off_ = 0;
    wait_len_ = n;
    drained_ = n < wait_buf_.size();
  }
  void MarkEof() { eof_ = true; }

  TlsStepResult Handshake();
  TlsStepResult Read(void* data, size_t size);
  TlsStepResult Write(const void* data, size_t size);
  TlsStepResult Shutdown();  // queues close_notify; does not wait for the peer's

  // Encrypted bytes waiting to be sent. A writer moves them into the flight buffer, sends that,
  // and ends the flight; bytes queued meanwhile wait for the next flight.
  bool HasOutput() const { return !pending_.empty(); }
  size_t PendingBytes() const { return pending_.size(); }
  bool Flushing() const { return flushing_; }
  boost::asio::const_buffer StartFlush();
  void EndFlush();

  // For the BIO (tls_socket_stream.cc).
  int BioRead(char* out, int size, bool* retry);
  void BioWrite(const char* data, int size) { pending_.append(data, static_cast<size_t>(size)); }

 private:
  static constexpr size_t kMaxOutputFromReads = 64 * 1024;
  TlsStepResult Fail(int ret);  // the result of a step OpenSSL did not finish

  boost::beast::tcp_stream tcp_;
  SSL* ssl_ = nullptr;  // null when OpenSSL could not make one: every step fails (no_memory)
  std::string fed_;     // Feed()'s bytes not yet read by OpenSSL
  size_t fed_off_ = 0;
  std::array<char, 512> wait_buf_{};
  size_t wait_off_ = 0;  // wait_buf_[wait_off_, wait_len_) not yet read by OpenSSL
  size_t wait_len_ = 0;
  bool drained_ = false;              // the last read from the socket emptied it
  bool eof_ = false;                  // the peer closed its side of TCP
  boost::system::error_code bio_ec_;  // a socket error met by BioRead
  std::string pending_;               // written by OpenSSL, not yet in flight
  std::string flight_;                // being sent
  bool flushing_ = false;
};

// One operation on the connection: steps OpenSSL (`step` is called with the core), sends what it
// wrote when the operation may write, waits for bytes when it needs them, and steps again.
// Completes with (error_code, bytes); never from inside the call that started it.
template <typename Step>
class TlsSocketOp {
 public:
  TlsSocketOp(std::shared_ptr<TlsSocketCore> core, Step step, bool may_write)
      : core_(std::move(core)), step_(std::move(step)), may_write_(may_write) {}

  template <typename Self>
  void operator()(Self& self, boost::system::error_code ec = {}, size_t n = 0) {
    switch (state_) {
      case State::kPosted:
        return self.complete(result_.ec, result_.bytes);
      case State::kFlushed:
        core_->EndFlush();
        if (ec) return self.complete(ec, 0);
        break;  // on with the step's result
      case State::kWaited:
        // The peer's FIN goes to OpenSSL, which tells a close_notify'd end (eof) from a cut
        // (stream_truncated); every other error ends the operation.
        if (ec == boost::asio::error::eof) {
          core_->Waited(0);
          core_->MarkEof();
        } else if (ec) {
          return self.complete(ec, 0);
        } else {
          core_->Waited(n);
        }
        result_ = step_(*core_);
        break;
      case State::kStart:
        result_ = step_(*core_);
        break;
    }
    if (may_write_ && core_->HasOutput() && !core_->Flushing()) {
      state_ = State::kFlushed;
      suspended_ = true;
      boost::asio::async_write(core_->tcp(), core_->StartFlush(), std::move(self));
      return;
    }
    if (result_.want_read && !result_.ec) {
      state_ = State::kWaited;
      suspended_ = true;
      core_->tcp().async_read_some(core_->WaitBuffer(), std::move(self));
      return;
    }
    if (!suspended_) {
      // Done at once: complete through the executor, as Asio promises (a Beast loop reading
      // buffered records would otherwise recurse).
      state_ = State::kPosted;
      boost::asio::post(core_->tcp().get_executor(), std::move(self));
      return;
    }
    self.complete(result_.ec, result_.bytes);
  }

 private:
  enum class State { kStart, kWaited, kFlushed, kPosted };
  std::shared_ptr<TlsSocketCore> core_;
  Step step_;
  bool may_write_;
  State state_ = State::kStart;
  bool suspended_ = false;
  TlsStepResult result_;
};

template <typename Step, typename Token>
auto StartTlsSocketOp(const std::shared_ptr<TlsSocketCore>& core, Step step, bool may_write,
                      Token&& token) {
  return boost::asio::async_compose<Token, void(boost::system::error_code, size_t)>(
      TlsSocketOp<Step>(core, std::move(step), may_write),
      token,  // Boost 1.74 takes it by reference, and moves from it
      core->tcp());
}

// The stream Beast's HTTP and WebSocket code is written against (AsyncReadStream and
// AsyncWriteStream; next_layer() is the tcp_stream, so beast::get_lowest_layer finds it).
class TlsSocketStream {
 public:
  using executor_type = boost::beast::tcp_stream::executor_type;

  TlsSocketStream(boost::asio::ip::tcp::socket&& socket, SSL_CTX* ctx)
      : core_(std::make_shared<TlsSocketCore>(std::move(socket), ctx)) {}

  executor_type get_executor() noexcept { return core_->tcp().get_executor(); }
  boost::beast::tcp_stream& next_layer() { return core_->tcp(); }
  const std::shared_ptr<TlsSocketCore>& core() { return core_; }

  // The server's half of the handshake; `initial` are bytes already read from the socket.
  template <typename ConstBuffer, typename Token>
  auto async_handshake(const ConstBuffer& initial, Token&& token) {
    for (auto it = boost::asio::buffer_sequence_begin(initial);
         it != boost::asio::buffer_sequence_end(initial); ++it) {
      boost::asio::const_buffer b(*it);
      core_->Feed(b.data(), b.size());
    }
    return Start([](TlsSocketCore& c) { return c.Handshake(); }, true, std::forward<Token>(token));
  }

  template <typename MutableBuffers, typename Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    boost::asio::mutable_buffer first = FirstNonEmpty<boost::asio::mutable_buffer>(buffers);
    return Start(
        [first](TlsSocketCore& c) {
          if (first.size() == 0) return TlsStepResult{};
          return c.Read(first.data(), first.size());
        },
        false, std::forward<Token>(token));
  }

  // Writes up to one TLS record's worth, gathered from the whole sequence. Beast hands a
  // WebSocket message over as two buffers, its frame header and its payload; written one buffer
  // at a time they went out as two records, each its own socket write and its own decryption at
  // the peer (asio's ssl::stream does the same; beast::flat_stream is its remedy, not used here
  // because it keeps its flattening buffer's capacity between writes, which every idle agent's
  // connection would then hold). A single buffer, or a first one of a full record, is written in
  // place; several smaller ones are copied into a string that lives only while the write runs
  // (docs/design-notes.md "TLS").
  template <typename ConstBuffers, typename Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    boost::asio::const_buffer first = FirstNonEmpty<boost::asio::const_buffer>(buffers);
    std::string gathered;
    if (first.size() < kMaxRecord) gathered = Gather(buffers);
    return Start(
        [first, gathered = std::move(gathered)](TlsSocketCore& c) {
          if (!gathered.empty()) return c.Write(gathered.data(), gathered.size());
          if (first.size() == 0) return TlsStepResult{};
          return c.Write(first.data(), std::min<size_t>(first.size(), kMaxRecord));
        },
        true, std::forward<Token>(token));
  }

  // Sends close_notify (without waiting for the peer's).
  template <typename Token>
  auto async_shutdown(Token&& token) {
    return Start([](TlsSocketCore& c) { return c.Shutdown(); }, true, std::forward<Token>(token));
  }

 private:
  static constexpr size_t kMaxRecord = 16 * 1024;

  template <typename Buffer, typename Buffers>
  static Buffer FirstNonEmpty(const Buffers& buffers) {
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers); ++it) {
      Buffer b(*it);
      if (b.size() != 0) return b;
    }
    return Buffer();
  }

  // The sequence's first kMaxRecord bytes in one string when they lie in more than one buffer;
  // empty when one buffer holds them all (written in place).
  template <typename ConstBuffers>
  static std::string Gather(const ConstBuffers& buffers) {
    const auto begin = boost::asio::buffer_sequence_begin(buffers);
    const auto end = boost::asio::buffer_sequence_end(buffers);
    size_t non_empty = 0;
    for (auto it = begin; it != end && non_empty < 2; ++it) {
      if (boost::asio::const_buffer(*it).size() != 0) ++non_empty;
    }
    std::string out;
    if (non_empty < 2) return out;
    for (auto it = begin; it != end && out.size() < kMaxRecord; ++it) {
      boost::asio::const_buffer b(*it);
      out.append(static_cast<const char*>(b.data()), std::min(b.size(), kMaxRecord - out.size()));
    }
    return out;
  }

  template <typename Step, typename Token>
  auto Start(Step step, bool may_write, Token&& token) {
    return StartTlsSocketOp(core_, std::move(step), may_write, std::forward<Token>(token));
  }

  std::shared_ptr<TlsSocketCore> core_;
};

// WebSocket's closing step for this stream (found by Beast through argument-dependent lookup):
// close_notify, then the TCP teardown beneath.
class TlsTeardownOp {
 public:
  TlsTeardownOp(boost::beast::role_type role, std::shared_ptr<TlsSocketCore> core)
      : role_(role), core_(std::move(core)) {}

  template <typename Self>
  void operator()(Self& self, boost::system::error_code ec = {}, size_t = 0) {
    switch (step_++) {
      case 0:
        return StartTlsSocketOp(
            core_, [](TlsSocketCore& c) { return c.Shutdown(); }, true, std::move(self));
      case 1: {
        (void)ec;  // the peer may be gone already; the TCP teardown still runs
        using boost::beast::websocket::async_teardown;
        return async_teardown(role_, core_->tcp(), std::move(self));
      }
      default:
        // A peer that closes without reading to the end is not an error of ours.
        if (ec == boost::asio::error::eof) ec = {};
        return self.complete(ec);
    }
  }

 private:
  boost::beast::role_type role_;
  std::shared_ptr<TlsSocketCore> core_;  // keeps the socket alive while the op runs
  int step_ = 0;
};

template <typename Handler>
void async_teardown(boost::beast::role_type role, TlsSocketStream& stream, Handler&& handler) {
  boost::asio::async_compose<Handler, void(boost::system::error_code)>(
      TlsTeardownOp(role, stream.core()), handler, stream.next_layer());
}

// Synchronous teardown: only for Beast's synchronous close, which the server does not use; it
// closes the socket without close_notify.
void teardown(boost::beast::role_type role, TlsSocketStream& stream, boost::system::error_code& ec);

}  // namespace sluice::net_internal
