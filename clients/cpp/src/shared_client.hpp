// One Client used by EnvClient's loop and its off-policy sender thread, one call at a time (private to the library).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>

#include "rlinks/client.hpp"
#include "rlinks/errors.hpp"
#include "rlinks/stop_signal.hpp"

namespace rlinks {

// A Client behind a lock, with the stop signal its waits watch. Every call
// goes through call(), which turns the learner's ERROR shutting_down into
// TrainingEnded and, once stopped or closed, any failure into ClientClosed;
// it keeps a copy of the connection's counters that any thread may read.
class SharedClient {
 public:
  // Throws as Client's constructor (UsageError, NotAvailable).
  SharedClient(std::string_view address, ClientOptions options)
      : signal_(std::make_shared<StopSignal>()), client_(address, with_signal(std::move(options), signal_)) {}

  // fn(client) under the lock. `loop_waits`: the time counts as the loop's
  // wait for the network (stats' wait_s); the sender thread's calls don't.
  template <class Fn>
  auto call(Fn&& fn, bool loop_waits = true) -> std::invoke_result_t<Fn, Client&> {
    if (signal_->raised()) throw closed();
    std::lock_guard<std::mutex> lock(mutex_);
    Accounting accounting{*this, loop_waits, Clock::now()};
    try {
      return fn(client_);
    } catch (const TrainingEnded&) {
      throw;
    } catch (const ServerError& error) {
      if (error.code() == "shutting_down") throw TrainingEnded(error.text());
      throw;
    } catch (const ConnectionLost&) {
      if (signal_->raised()) throw closed();
      throw;
    } catch (const ConnectFailed&) {
      if (signal_->raised()) throw closed();
      throw;
    } catch (const ClientClosed&) {
      throw closed();
    }
  }

  // fn(client) under the lock, as it is: for reading what was agreed, even after a stop.
  template <class Fn>
  auto peek(Fn&& fn) -> std::invoke_result_t<Fn, Client&> {
    std::lock_guard<std::mutex> lock(mutex_);
    return fn(client_);
  }

  // Closes the connection for good (unacknowledged batches are given up, with a warning).
  void close() {
    std::lock_guard<std::mutex> lock(mutex_);
    client_.close();
  }

  // The user's stop (async-signal-safe): every call, and every wait inside one, ends with ClientClosed.
  void stop() noexcept {
    stopped_.store(true);
    signal_->raise();
  }
  // The same without it being the user's (closing, or a sender that must end now).
  void interrupt() noexcept { signal_->raise(); }
  bool stopped() const noexcept { return stopped_.load(); }
  bool interrupted() const noexcept { return signal_->raised(); }
  const StopSignal& signal() const { return *signal_; }

  ClientStats delivery() const {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    return delivery_;
  }
  double waited_s() const {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    return waited_s_;
  }
  ClientClosed closed() const {
    return ClientClosed(stopped() ? "stop() was called" : "the EnvClient was closed");
  }

 private:
  struct Accounting {
    SharedClient& shared;
    bool loop_waits;
    Deadline started;
    ~Accounting() {
      const ClientStats stats = shared.client_.stats();
      std::lock_guard<std::mutex> lock(shared.stats_mutex_);
      shared.delivery_ = stats;
      if (loop_waits) shared.waited_s_ += std::chrono::duration<double>(Clock::now() - started).count();
    }
  };

  static ClientOptions with_signal(ClientOptions options, std::shared_ptr<StopSignal> signal) {
    options.stop = std::move(signal);
    return options;
  }

  std::shared_ptr<StopSignal> signal_;
  std::atomic<bool> stopped_{false};
  std::mutex mutex_;
  Client client_;
  mutable std::mutex stats_mutex_;
  ClientStats delivery_;
  double waited_s_ = 0.0;
};

}  // namespace rlinks
