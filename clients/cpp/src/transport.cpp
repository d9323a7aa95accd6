#include "rlinks/transport.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "rlinks/errors.hpp"

#ifdef RLINKS_WITH_OPENSSL
#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#endif

namespace rlinks {
namespace {

int milliseconds_until(Deadline deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : int(std::min<long long>(left, 24LL * 3600 * 1000));
}

// Waits for `events` on `fd` until `deadline`; false if they did not come.
// Throws ClientClosed as soon as `wake_fd` (a StopSignal's; -1: none) is readable.
bool wait_for(int fd, short events, Deadline deadline, int wake_fd) {
  while (true) {
    pollfd entries[2] = {{fd, events, 0}, {wake_fd, POLLIN, 0}};
    const int ready = ::poll(entries, wake_fd >= 0 ? 2 : 1, milliseconds_until(deadline));
    if (ready > 0 && wake_fd >= 0 && entries[1].revents != 0) throw ClientClosed("stopped while waiting for the server");
    if (ready > 0) return true;
    if (ready == 0) {
      if (Clock::now() >= deadline) return false;
      continue;
    }
    if (errno != EINTR) throw ConnectionLost(std::string("poll failed: ") + std::strerror(errno));
  }
}

class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

std::unique_ptr<Socket> connect_tcp(const Address& address, Deadline deadline, int wake_fd) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(address.port);
  const int status = ::getaddrinfo(address.host.c_str(), port.c_str(), &hints, &found);
  if (status != 0) throw ConnectionLost("cannot resolve " + address.host + ": " + ::gai_strerror(status));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> resolved(found, ::freeaddrinfo);

  std::string last_error = "no address";
  for (addrinfo* candidate = found; candidate != nullptr; candidate = candidate->ai_next) {
    auto socket = std::make_unique<Socket>(
        ::socket(candidate->ai_family, candidate->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, candidate->ai_protocol));
    if (socket->fd() < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    int result = ::connect(socket->fd(), candidate->ai_addr, candidate->ai_addrlen);
    if (result != 0 && errno == EINPROGRESS) {
      if (!wait_for(socket->fd(), POLLOUT, deadline, wake_fd)) {
        last_error = "timed out";
        continue;
      }
      int error = 0;
      socklen_t length = sizeof error;
      ::getsockopt(socket->fd(), SOL_SOCKET, SO_ERROR, &error, &length);
      result = error == 0 ? 0 : -1;
      errno = error;
    }
    if (result != 0) {
      last_error = std::strerror(errno);
      continue;
    }
    const int on = 1;
    ::setsockopt(socket->fd(), IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    return socket;
  }
  throw ConnectionLost("cannot connect to " + address.str() + ": " + last_error);
}

class TcpTransport : public Transport {
 public:
  TcpTransport(std::unique_ptr<Socket> socket, int wake_fd) : socket_(std::move(socket)), wake_fd_(wake_fd) {}

  std::optional<size_t> read_some(uint8_t* buffer, size_t size, Deadline deadline) override {
    while (true) {
      const ssize_t got = ::recv(socket_->fd(), buffer, size, 0);
      if (got >= 0) return size_t(got);
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) throw ConnectionLost(std::string("receive failed: ") + std::strerror(errno));
      if (!wait_for(socket_->fd(), POLLIN, deadline, wake_fd_)) return std::nullopt;
    }
  }

  void write_all(const uint8_t* data, size_t size, Deadline deadline) override {
    size_t sent = 0;
    while (sent < size) {
      const ssize_t wrote = ::send(socket_->fd(), data + sent, size - sent, MSG_NOSIGNAL);
      if (wrote >= 0) {
        sent += size_t(wrote);
        continue;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) throw ConnectionLost(std::string("send failed: ") + std::strerror(errno));
      if (!wait_for(socket_->fd(), POLLOUT, deadline, wake_fd_)) throw Timeout("the server did not take our data in time (it stopped reading)");
    }
  }

 private:
  std::unique_ptr<Socket> socket_;
  int wake_fd_;
};

#ifdef RLINKS_WITH_OPENSSL

std::string openssl_error() {
  const unsigned long code = ERR_get_error();
  if (code == 0) return errno != 0 ? std::strerror(errno) : "connection closed";
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  ERR_clear_error();
  return text;
}

class TlsTransport : public Transport {
 public:
  TlsTransport(std::unique_ptr<Socket> socket, const Address& address, const TlsOptions& options, Deadline deadline,
               int wake_fd)
      : socket_(std::move(socket)), wake_fd_(wake_fd) {
    context_.reset(SSL_CTX_new(TLS_client_method()));
    SSL_CTX* context = context_.get();
    if (context == nullptr) throw TlsFailed("cannot make a TLS context: " + openssl_error());
    SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION);
    SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nullptr);
    const bool loaded = options.ca_file.empty()
                            ? SSL_CTX_set_default_verify_paths(context) == 1
                            : SSL_CTX_load_verify_locations(context, options.ca_file.c_str(), nullptr) == 1;
    if (!loaded) throw TlsFailed("cannot load the CA certificates '" + options.ca_file + "': " + openssl_error());
    if (!options.cert_file.empty()) {
      const std::string& key = options.key_file.empty() ? options.cert_file : options.key_file;
      if (SSL_CTX_use_certificate_chain_file(context, options.cert_file.c_str()) != 1 ||
          SSL_CTX_use_PrivateKey_file(context, key.c_str(), SSL_FILETYPE_PEM) != 1) {
        throw TlsFailed("cannot load the client certificate '" + options.cert_file + "': " + openssl_error());
      }
    }
    ssl_.reset(SSL_new(context));
    SSL* ssl = ssl_.get();
    if (ssl == nullptr) throw TlsFailed("cannot make a TLS session: " + openssl_error());
    SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_set_fd(ssl, socket_->fd());
    const std::string name = options.server_name.empty() ? address.host : options.server_name;
    in6_addr ip;
    const bool is_ip = ::inet_pton(AF_INET, name.c_str(), &ip) == 1 || ::inet_pton(AF_INET6, name.c_str(), &ip) == 1;
    if (is_ip) {
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str());
    } else {
      SSL_set_tlsext_host_name(ssl, name.c_str());
      SSL_set1_host(ssl, name.c_str());
    }
    while (true) {
      const int result = SSL_connect(ssl);
      if (result == 1) return;
      const int error = SSL_get_error(ssl, result);
      if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
        if (!wait_for(socket_->fd(), error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline, wake_fd_)) {
          throw ConnectionLost("the TLS handshake with " + address.str() + " timed out");
        }
        continue;
      }
      const long verified = SSL_get_verify_result(ssl);
      if (verified != X509_V_OK) {
        throw TlsFailed(address.str() + ": the server's certificate is not trusted: " +
                        X509_verify_cert_error_string(verified) + ". Is --ca-file the CA that signed it, and is it made out to this host name?");
      }
      throw ConnectionLost("the TLS handshake with " + address.str() + " failed: " + openssl_error());
    }
  }

  std::optional<size_t> read_some(uint8_t* buffer, size_t size, Deadline deadline) override {
    while (true) {
      const int got = SSL_read(ssl_.get(), buffer, int(std::min<size_t>(size, 1 << 30)));
      if (got > 0) return size_t(got);
      const int error = SSL_get_error(ssl_.get(), got);
      if (error == SSL_ERROR_ZERO_RETURN || (error == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)) return 0;
      if (error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE) {
        throw ConnectionLost("TLS receive failed: " + openssl_error());
      }
      if (!wait_for(socket_->fd(), error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline, wake_fd_)) return std::nullopt;
    }
  }

  void write_all(const uint8_t* data, size_t size, Deadline deadline) override {
    size_t sent = 0;
    while (sent < size) {
      const int wrote = SSL_write(ssl_.get(), data + sent, int(std::min<size_t>(size - sent, 1 << 30)));
      if (wrote > 0) {
        sent += size_t(wrote);
        continue;
      }
      const int error = SSL_get_error(ssl_.get(), wrote);
      if (error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE) {
        throw ConnectionLost("TLS send failed: " + openssl_error());
      }
      if (!wait_for(socket_->fd(), error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline, wake_fd_)) {
        throw Timeout("the server did not take our data in time (it stopped reading)");
      }
    }
  }

 private:
  std::unique_ptr<Socket> socket_;
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> context_{nullptr, SSL_CTX_free};
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl_{nullptr, SSL_free};
  int wake_fd_;
};

#endif  // RLINKS_WITH_OPENSSL

}  // namespace

Deadline deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

bool tls_available() {
#ifdef RLINKS_WITH_OPENSSL
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Transport> open_transport(const Address& address, double timeout_s, const TlsOptions& tls,
                                          int wake_fd) {
  if (address.tls && !tls_available()) {
    throw NotAvailable(address.str() + " asks for TLS, but this build of rlinks has no OpenSSL: "
                       "configure it with -DRLINKS_WITH_OPENSSL=ON");
  }
  const Deadline deadline = deadline_after(timeout_s);
  std::unique_ptr<Socket> socket = connect_tcp(address, deadline, wake_fd);
#ifdef RLINKS_WITH_OPENSSL
  if (address.tls) return std::make_unique<TlsTransport>(std::move(socket), address, tls, deadline, wake_fd);
#else
  (void)tls;
#endif
  return std::make_unique<TcpTransport>(std::move(socket), wake_fd);
}

}  // namespace rlinks
