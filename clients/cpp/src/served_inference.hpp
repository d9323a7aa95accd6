// Served actions for EnvClient: the runner runs the policy and records the episodes (private to the
// library; the C++ side of rlinks_rllib/client/inference/served.py).
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine.hpp"
#include "rlinks/served.hpp"
#include "shared_client.hpp"

namespace rlinks {

// Each act() is one ACT/ACTIONS round trip (PROTOCOL.md 10.5), its rows made
// from the calls since the last one: an env that reported sends its reward
// with its observation now; an env whose episode ended sends its ending row
// (the final observation, terminated or truncated) and, when it acts again,
// its start row right after it in the same ACT; an env without an episode
// sends a start row. Endings of envs that don't act now go first. close()
// sends one last ACT that ends every episode where it stands (truncated), so
// the runner need not wait served_report_timeout_s to drop their last steps.
// Client::act handles reconnects (an interrupted episode goes on as a new one).
// Actions the simulator takes itself (log_action, take_over) and episodes not
// trained on go as the served_taken columns (PROTOCOL.md 10.5.1) and takeover's (10.8).
class ServedInference : public Engine {
 public:
  // `obs_shape`: of one observation (its product is the size of a row);
  // `space`: to read the actions by (nullopt: by the dtype they come in).
  ServedInference(SharedClient& client, std::vector<uint64_t> obs_shape, std::optional<ActionSpace> space,
                  uint32_t num_envs, std::function<void(const std::string&)> warn);

  bool is_open(uint32_t env) const override { return open_[env]; }
  bool awaiting_report(uint32_t env) const override { return acting_[env]; }
  void start(uint32_t env, const float* obs, bool train) override;
  std::vector<Action> act(const std::vector<uint32_t>& envs, const float* rows, const std::vector<Action>* taken,
                          bool takeover) override;
  bool report(uint32_t env, double reward, const float* obs, bool terminated, bool truncated) override;
  void after_report() override {}
  void end(uint32_t env) override;
  void close(bool flush) override;
  uint64_t weights_seq_no() const override { return seq_no_.load(); }
  // Pacing is the runner's: an ACT waits when exactness demands it.
  bool on_policy() const override { return false; }

 private:
  // A row of the next ACT.
  struct Row {
    uint32_t env = 0;
    std::vector<float> obs;
    double reward = 0.0;
    bool start = false, terminated = false, truncated = false;
    const Action* taken = nullptr;  // the simulator's own action (served_taken), for this call only
    bool takeover = false;
  };

  ActionsReply send(const std::vector<Row>& rows);
  // The served_taken and takeover columns of `call` (none when no row needs them).
  void add_taken_columns(const std::vector<Row>& call, ActRows& rows) const;
  void check_taken(const Action& action) const;
  Action action_of(const ActionsReply& reply, size_t i) const;

  SharedClient& client_;
  std::vector<uint64_t> obs_shape_;
  size_t obs_size_;
  std::optional<ActionSpace> space_;
  std::function<void(const std::string&)> warn_;
  std::vector<bool> open_, acting_;
  std::vector<bool> untrained_;  // the env's episode is not trained on (sent as the train column)
  std::vector<std::optional<Row>> outcome_;  // reported outcomes not sent yet
  std::vector<Row> endings_;                 // ending rows not sent yet, in the order reported
  std::atomic<uint64_t> seq_no_{0};
};

}  // namespace rlinks
