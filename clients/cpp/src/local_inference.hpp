// Local inference for EnvClient: the policy runs here, episodes are recorded here (private to the library;
// the C++ side of rlinks_rllib/client/inference/local.py).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "background_sender.hpp"
#include "engine.hpp"
#include "rlinks/episode_builder.hpp"
#include "rlinks/policy.hpp"
#include "shared_client.hpp"

namespace rlinks {

// The policy, one episode recorder per env, and the pacing the runner asks for:
//  - on-policy (PPO): once the runner's share of the next update is recorded
//    (want_steps), it is sent and the weights trained on it awaited, the one
//    wait exactness demands; a share of 0 (the runner has all it needs) makes
//    the next act() wait for the next weights;
//  - off-policy (APPO, IMPALA, or on_policy=false): every fragment's worth of
//    steps goes to a BackgroundSender, and newer weights are taken whenever it
//    has fetched some: act() never waits for the learner.
class LocalInference : public Engine {
 public:
  struct Setup {
    uint32_t num_envs = 1;
    bool on_policy = true;
    uint64_t fragment = 500;  // steps per batch (rollout_fragment_length), and the share without want_steps
    double timeout_s = 120;   // the sender's waits
    double weights_every_s = 1.0;
    size_t queue_batches = 4;
    size_t in_flight = 0;  // off-policy: the runner's paced_in_flight (0: it names none)
  };

  LocalInference(SharedClient& client, LocalPolicy policy, const WeightsUpdate& first, const Setup& setup,
                 std::mt19937_64 rng);
  ~LocalInference() override;

  bool is_open(uint32_t env) const override;
  bool awaiting_report(uint32_t env) const override { return pending_[env]; }
  void start(uint32_t env, const float* obs, bool train) override;
  std::vector<Action> act(const std::vector<uint32_t>& envs, const float* rows, const std::vector<Action>* taken,
                          bool takeover) override;
  bool report(uint32_t env, double reward, const float* obs, bool terminated, bool truncated) override;
  void after_report() override;
  void end(uint32_t env) override;
  void close(bool flush) override;
  uint64_t weights_seq_no() const override { return seq_no_.load(); }
  bool on_policy() const override { return sender_ == nullptr; }

 private:
  void pace();
  void exchange();
  std::vector<Value> take_chunks();
  void take_weights(const WeightsUpdate& update);
  EpisodeBuilder& recorder(uint32_t env);

  SharedClient& client_;
  LocalPolicy policy_;
  std::mt19937_64 rng_;
  const uint64_t fragment_;
  uint64_t want_;
  std::vector<std::unique_ptr<EpisodeBuilder>> recorders_;
  // The output each env acted with last, and whether its outcome is still to be reported.
  std::vector<PolicyOutput> outputs_;
  std::vector<char> pending_;
  std::vector<char> untrained_;   // the env's running episode is not trained on (acted on, never recorded)
  std::vector<char> taken_over_;  // the env's pending action was taken over: its step is marked
  uint64_t unsent_ = 0;
  std::atomic<uint64_t> seq_no_;
  std::unique_ptr<BackgroundSender> sender_;  // off-policy only
};

}  // namespace rlinks
