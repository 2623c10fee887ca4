#include "net/tls_socket_stream.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <sys/socket.h>

#include <boost/asio/ssl/error.hpp>
#include <cerrno>
#include <cstring>

namespace sluice::net_internal {

namespace {

// The BIO between OpenSSL and the socket: reads come from what was fed, then straight from the
// socket without blocking; writes go to the core's pending string. It owns no buffer.
int BioReadFn(BIO* bio, char* out, int size) {
  auto* core = static_cast<TlsSocketCore*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  bool retry = false;
  int n = core->BioRead(out, size, &retry);
  if (retry) BIO_set_retry_read(bio);
  return n;
}

int BioWriteFn(BIO* bio, const char* data, int size) {
  auto* core = static_cast<TlsSocketCore*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  if (size <= 0) return 0;
  core->BioWrite(data, size);
  return size;
}

long BioCtrlFn(BIO*, int cmd, long, void*) {  // NOLINT(runtime/int): OpenSSL's signature
  // Writes are collected, so there is never anything to flush; every other control query
  // (pending bytes, kTLS, ...) is answered "no", which OpenSSL takes as "not supported".
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

int BioCreateFn(BIO* bio) {
  BIO_set_init(bio, 1);
  return 1;
}

const BIO_METHOD* SocketBioMethod() {
  static BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "sluice-socket");
    if (m) {
      BIO_meth_set_read(m, &BioReadFn);
      BIO_meth_set_write(m, &BioWriteFn);
      BIO_meth_set_ctrl(m, &BioCtrlFn);
      BIO_meth_set_create(m, &BioCreateFn);
    }
    return m;
  }();
  return method;
}

}  // namespace

TlsSocketCore::TlsSocketCore(boost::asio::ip::tcp::socket&& socket, SSL_CTX* ctx)
    : tcp_(std::move(socket)) {
  const BIO_METHOD* method = SocketBioMethod();
  if (!method) return;
  SSL* ssl = SSL_new(ctx);
  BIO* bio = ssl ? BIO_new(method) : nullptr;
  if (!bio) {
    SSL_free(ssl);
    ERR_clear_error();
    return;
  }
  BIO_set_data(bio, this);
  SSL_set_bio(ssl, bio, bio);  // the SSL owns the BIO now
  SSL_set_accept_state(ssl);
  // Read-ahead: OpenSSL asks the BIO for all it can hold, not a header and then a body, so a
  // record costs one recv.
  SSL_set_read_ahead(ssl, 1);
  // RELEASE_BUFFERS: OpenSSL frees its record buffers whenever they are empty, which for an idle
  // connection is always. The other two let a write be retried from a moved buffer.
  SSL_set_mode(ssl, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE |
                        SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  ssl_ = ssl;
}

TlsSocketCore::~TlsSocketCore() {
  if (ssl_) SSL_free(ssl_);
}

void TlsSocketCore::Feed(const void* data, size_t size) {
  if (fed_off_ == fed_.size()) {
    fed_.clear();
    fed_off_ = 0;
  }
  fed_.append(static_cast<const char*>(data), size);
}

int TlsSocketCore::BioRead(char* out, int size, bool* retry) {
  if (size <= 0) return 0;
  if (fed_off_ < fed_.size()) {
    size_t n = std::min(fed_.size() - fed_off_, static_cast<size_t>(size));
    std::memcpy(out, fed_.data() + fed_off_, n);
    fed_off_ += n;
    if (fed_off_ == fed_.size()) {
      // A sniffed ClientHello can be a few KiB; an idle connection keeps none of it.
      std::string().swap(fed_);
      fed_off_ = 0;
    }
    return static_cast<int>(n);
  }
  if (wait_off_ < wait_len_) {
    size_t n = std::min(wait_len_ - wait_off_, static_cast<size_t>(size));
    std::memcpy(out, wait_buf_.data() + wait_off_, n);
    wait_off_ += n;
    return static_cast<int>(n);
  }
  if (eof_) return 0;
  if (drained_) {
    // Nothing was left a moment ago: wait (the wait's read finds bytes that came since).
    drained_ = false;
    *retry = true;
    return -1;
  }
  for (;;) {
    ssize_t n = ::recv(tcp_.socket().native_handle(), out, static_cast<size_t>(size),
                       MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      drained_ = n < size;
      return static_cast<int>(n);
    }
    if (n == 0) {
      eof_ = true;
      return 0;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      *retry = true;
      return -1;
    }
    bio_ec_ = boost::system::error_code(errno, boost::system::system_category());
    return -1;
  }
}

boost::asio::const_buffer TlsSocketCore::StartFlush() {
  flushing_ = true;
  flight_.swap(pending_);
  return boost::asio::buffer(flight_);
}

void TlsSocketCore::EndFlush() {
  flushing_ = false;
  flight_.clear();
  // A large write's bytes are not kept for the life of the connection.
  if (flight_.capacity() > 4096) std::string().swap(flight_);
  if (pending_.empty() && pending_.capacity() > 4096) std::string().swap(pending_);
}

TlsStepResult TlsSocketCore::Fail(int ret) {
  TlsStepResult r;
  int err = SSL_get_error(ssl_, ret);
  switch (err) {
    case SSL_ERROR_WANT_READ:
      if (bio_ec_) {
        r.ec = bio_ec_;
      } else {
        r.want_read = true;
      }
      break;
    case SSL_ERROR_ZERO_RETURN:  // the peer's close_notify: a clean end of stream
      r.ec = boost::asio::error::eof;
      break;
    case SSL_ERROR_SYSCALL:
      r.ec =
          bio_ec_ ? bio_ec_ : boost::system::error_code(boost::asio::ssl::error::stream_truncated);
      break;
    case SSL_ERROR_SSL: {
      unsigned long e = ERR_peek_error();  // NOLINT(runtime/int): OpenSSL's type
      if (bio_ec_) {
        r.ec = bio_ec_;
      } else if (eof_ && ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
        r.ec = boost::asio::ssl::error::stream_truncated;  // TCP closed without close_notify
      } else {
        r.ec =
            boost::system::error_code(static_cast<int>(e), boost::asio::error::get_ssl_category());
      }
      break;
    }
    default:  // WANT_WRITE cannot happen (writes are collected); anything else is a bug of ours
      r.ec = boost::asio::error::invalid_argument;
      break;
  }
  ERR_clear_error();
  return r;
}

TlsStepResult TlsSocketCore::Handshake() {
  if (!ssl_) return {false, 0, boost::asio::error::no_memory};
  ERR_clear_error();
  int ret = SSL_do_handshake(ssl_);
  if (ret == 1) return {};
  return Fail(ret);
}

TlsStepResult TlsSocketCore::Read(void* data, size_t size) {
  if (!ssl_) return {false, 0, boost::asio::error::no_memory};
  ERR_clear_error();
  size_t n = 0;
  int ret = SSL_read_ex(ssl_, data, size, &n);
  // What OpenSSL answers while reading (KeyUpdate) waits for the next write; a peer that keeps
  // asking while the server has nothing to send would grow it without bound, so it is cut off.
  if (pending_.size() > kMaxOutputFromReads) return {false, 0, boost::asio::error::no_buffer_space};
  if (ret == 1) return {false, n, {}};
  return Fail(ret);
}

TlsStepResult TlsSocketCore::Write(const void* data, size_t size) {
  if (!ssl_) return {false, 0, boost::asio::error::no_memory};
  ERR_clear_error();
  size_t n = 0;
  int ret = SSL_write_ex(ssl_, data, size, &n);
  if (ret == 1) return {false, n, {}};
  TlsStepResult r = Fail(ret);
  // Only a read may wait for bytes (two waits at once would share the wait buffer); a write that
  // needs to read would mean renegotiation, which the context refuses.
  if (r.want_read) r = {false, 0, boost::asio::error::operation_not_supported};
  return r;
}

TlsStepResult TlsSocketCore::Shutdown() {
  if (!ssl_) return {false, 0, boost::asio::error::no_memory};
  ERR_clear_error();
  // 0: our close_notify is queued and the peer's not yet seen, which is all we wait for.
  int ret = SSL_shutdown(ssl_);
  if (ret >= 0) return {};
  TlsStepResult r = Fail(ret);
  if (r.want_read) r = {};
  return r;
}

void teardown(boost::beast::role_type, TlsSocketStream& stream, boost::system::error_code& ec) {
  stream.next_layer().socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
  stream.next_layer().socket().close(ec);
}

}  // namespace sluice::net_internal
