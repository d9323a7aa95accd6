#include "rlinks/stop_signal.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "rlinks/errors.hpp"

namespace rlinks {

static_assert(std::atomic<bool>::is_always_lock_free, "StopSignal::raise() must be async-signal-safe");

StopSignal::StopSignal() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw ConnectionLost(std::string("cannot make the stop signal's pipe: ") + std::strerror(errno));
  }
  read_fd_ = fds[0];
  write_fd_ = fds[1];
}

StopSignal::~StopSignal() {
  ::close(read_fd_);
  ::close(write_fd_);
}

void StopSignal::raise() noexcept {
  const int saved = errno;
  raised_.store(true);
  const char byte = 1;
  // A full pipe is readable already; nothing else can fail that matters here.
  [[maybe_unused]] const ssize_t wrote = ::write(write_fd_, &byte, 1);
  errno = saved;
}

void StopSignal::sleep_until(Deadline deadline) const {
  while (!raised()) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return;
    pollfd entry{read_fd_, POLLIN, 0};
    ::poll(&entry, 1, int(std::min<long long>(left, 1000)));
  }
  throw ClientClosed("stopped");
}

}  // namespace rlinks
