// Off-policy batches sent from a thread of their own, so the simulator's loop never waits for the learner
// (private to the library; the C++ side of rlinks_rllib/client/inference/background_sender.py).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "rlinks/client.hpp"
#include "shared_client.hpp"

namespace rlinks {

// The loop hands each batch to send(); the thread delivers it (EPISODES,
// confirmed by ACKs) and, at most every `weights_every_s`, fetches the
// newest weights, which the loop takes with newest_weights(). At most
// `depth` batches wait: when the runner falls that far behind, send() waits
// for room, up to `timeout_s`. A runner that paces its clients names
// `in_flight` (its paced_in_flight, usually 1; 0: none named): then send()
// also waits until fewer than that many batches are handed over and not yet
// confirmed, so the loop samples its next batch with the weights of the last
// ACK instead of running max_unacked + depth batches ahead with old ones. An
// error of the thread (the learner ended, the connection lost for good) is
// thrown again by the loop's next send() or check().
class BackgroundSender {
 public:
  BackgroundSender(SharedClient& client, double timeout_s, double weights_every_s, size_t depth,
                   size_t in_flight = 0);
  ~BackgroundSender();  // abandon()
  BackgroundSender(const BackgroundSender&) = delete;
  BackgroundSender& operator=(const BackgroundSender&) = delete;

  // Throws Timeout when no room came within timeout_s, the thread's error, or
  // ClientClosed once the client was stopped or closed.
  void send(std::vector<Value> chunks);
  // Throws the thread's error, if it had one.
  void check();
  // The weights fetched since the last call, if any.
  std::optional<WeightsUpdate> newest_weights();
  // Delivers what is queued, waits for its ACKs and ends the thread, within
  // timeout_s (Timeout otherwise, the rest given up); throws the thread's error.
  void close();
  // Ends the thread now; what is queued is given up.
  void abandon() noexcept;

 private:
  void run();
  void wait_for_thread(Deadline deadline);

  SharedClient& client_;
  const double timeout_s_;
  const double weights_every_s_;
  const size_t depth_;
  const size_t in_flight_;  // 0: not paced

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::vector<Value>> queue_;
  size_t unconfirmed_ = 0;  // paced: batches handed over and not yet confirmed (queued ones included)
  bool closing_ = false;  // deliver what is queued, then end
  bool quit_ = false;     // end now
  bool done_ = false;
  std::optional<WeightsUpdate> newest_;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace rlinks
