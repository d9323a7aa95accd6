// A byte stream to a server: TCP through POSIX sockets, or TLS over it when built with OpenSSL.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "rlinks/address.hpp"

namespace rlinks {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

Deadline deadline_after(double seconds);

struct TlsOptions {
  std::string ca_file;      // PEM CAs that may sign the server's certificate; empty: the system's
  std::string cert_file;    // PEM client certificate, for a server that asks for one
  std::string key_file;     // its key, if not in cert_file
  std::string server_name;  // the name the certificate must carry; empty: the address's host
};

class Transport {
 public:
  virtual ~Transport() = default;

  // Reads up to `size` bytes: the count read, 0 when the peer closed the
  // stream, or nullopt when nothing arrived by `deadline` (a deadline in the
  // past just looks). Throws ConnectionLost, or ClientClosed (its wake fd).
  virtual std::optional<size_t> read_some(uint8_t* buffer, size_t size, Deadline deadline) = 0;

  // Writes all `size` bytes by `deadline`. Throws Timeout or ConnectionLost.
  virtual void write_all(const uint8_t* data, size_t size, Deadline deadline) = 0;
};

// Whether tls:// addresses work in this build (RLINKS_WITH_OPENSSL).
bool tls_available();

// Connects to `address` (trying each of its resolved addresses) and, for
// tls://, runs the TLS handshake, within `timeout_s`. Throws ConnectionLost
// when it can't (refused, unreachable, unknown host, too slow), TlsFailed for
// a certificate problem, NotAvailable for tls:// without OpenSSL. With a
// `wake_fd` (a StopSignal's), every wait of the connection, this one
// included, ends with ClientClosed as soon as that fd is readable.
std::unique_ptr<Transport> open_transport(const Address& address, double timeout_s, const TlsOptions& tls,
                                          int wake_fd = -1);

}  // namespace rlinks
