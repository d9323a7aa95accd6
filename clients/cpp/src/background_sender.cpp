#include "background_sender.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

namespace rlinks {
namespace {

// Waits on a condition variable in slices this long: a stop() from a signal
// handler can't notify one, so waits look at the stop signal between slices.
constexpr auto kSlice = std::chrono::milliseconds(100);

}  // namespace

BackgroundSender::BackgroundSender(SharedClient& client, double timeout_s, double weights_every_s, size_t depth,
                                   size_t in_flight)
    : client_(client), timeout_s_(timeout_s), weights_every_s_(weights_every_s),
      depth_(std::max<size_t>({depth, in_flight, 1})), in_flight_(in_flight) {
  thread_ = std::thread([this] { run(); });
}

BackgroundSender::~BackgroundSender() { abandon(); }

void BackgroundSender::send(std::vector<Value> chunks) {
  const Deadline deadline = deadline_after(timeout_s_);
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    if (error_) std::rethrow_exception(error_);
    if (done_ || closing_ || client_.interrupted()) throw client_.closed();
    const bool paced_full = in_flight_ > 0 && unconfirmed_ >= in_flight_;
    if (queue_.size() < depth_ && !paced_full) {
      queue_.push_back(std::move(chunks));
      if (in_flight_ > 0) ++unconfirmed_;
      changed_.notify_all();
      return;
    }
    if (Clock::now() >= deadline && paced_full) {
      throw Timeout("the runner confirmed none of this client's batches for " + std::to_string(int(timeout_s_)) +
                    " s (paced: it takes them one sample() at a time)");
    }
    if (Clock::now() >= deadline) {
      throw Timeout("the runner took no batch for " + std::to_string(int(timeout_s_)) + " s (" +
                    std::to_string(queue_.size()) + " waiting to be sent)");
    }
    changed_.wait_until(lock, std::min<Deadline>(deadline, Clock::now() + kSlice));
  }
}

void BackgroundSender::check() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_) std::rethrow_exception(error_);
}

std::optional<WeightsUpdate> BackgroundSender::newest_weights() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::optional<WeightsUpdate> update = std::move(newest_);
  newest_.reset();
  return update;
}

void BackgroundSender::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
  }
  changed_.notify_all();
  wait_for_thread(deadline_after(timeout_s_));
  check();
}

void BackgroundSender::abandon() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    quit_ = true;
    queue_.clear();
  }
  changed_.notify_all();
  if (!thread_.joinable()) return;
  client_.interrupt();  // a call under way ends now, not at its timeout
  thread_.join();
}

void BackgroundSender::wait_for_thread(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!done_ && Clock::now() < deadline) changed_.wait_until(lock, std::min<Deadline>(deadline, Clock::now() + kSlice));
  const bool done = done_;
  const size_t left = queue_.size();
  lock.unlock();
  if (done) {
    thread_.join();
    return;
  }
  abandon();
  throw Timeout("the sender did not deliver the last batches within " + std::to_string(int(timeout_s_)) +
                " s; closed without them (" + std::to_string(left) + " still queued)");
}

void BackgroundSender::run() {
  Deadline last_weights = Clock::now();
  try {
    while (true) {
      std::vector<Value> batch;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        while (queue_.empty() && !closing_ && !quit_ && !client_.interrupted()) changed_.wait_for(lock, kSlice);
        if (quit_ || client_.interrupted()) break;
        if (queue_.empty()) {  // closing, and all was handed over
          lock.unlock();
          client_.call([](Client& client) { client.flush(); }, false);
          break;
        }
        batch = std::move(queue_.front());
        queue_.pop_front();
      }
      changed_.notify_all();
      client_.call([&](Client& client) { client.send_episodes(std::move(batch)); }, false);
      if (in_flight_ > 0) {
        client_.call([](Client& client) { client.flush(); }, false);  // its ACK: the runner handed it to RLlib
        std::lock_guard<std::mutex> lock(mutex_);
        --unconfirmed_;
        changed_.notify_all();
      }
      if (std::chrono::duration<double>(Clock::now() - last_weights).count() >= weights_every_s_) {
        WeightsUpdate update = client_.call([](Client& client) { return client.get_state(); }, false);
        last_weights = Clock::now();
        std::lock_guard<std::mutex> lock(mutex_);
        newest_ = std::move(update);
      }
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
    queue_.clear();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  done_ = true;
  changed_.notify_all();
}

}  // namespace rlinks
