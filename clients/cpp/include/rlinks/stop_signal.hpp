// A stop request that any thread or a signal handler can make, and that a socket wait notices at once.
#pragma once

#include <atomic>

#include "rlinks/transport.hpp"

namespace rlinks {

// A flag plus a self-pipe: raise() sets the flag and makes fd() readable, so
// a wait in poll() on a socket (Transport, given fd()) or between reconnect
// attempts (Client) ends at once with ClientClosed instead of running to its
// timeout. Once raised it stays raised.
//
// The constructor throws ConnectionLost when the system has no pipe to give
// (out of file descriptors).
class StopSignal {
 public:
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  // Async-signal-safe: an atomic store and one write(2); errno is kept.
  void raise() noexcept;
  bool raised() const noexcept { return raised_.load(); }
  // Readable once raised (for poll()).
  int fd() const noexcept { return read_fd_; }
  // Sleeps until `deadline`, or throws ClientClosed as soon as the signal is raised.
  void sleep_until(Deadline deadline) const;

 private:
  std::atomic<bool> raised_{false};
  int read_fd_ = -1;
  int write_fd_ = -1;
};

}  // namespace rlinks
