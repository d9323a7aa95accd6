// The served_actions extension: the runner computes the actions (PROTOCOL.md section 10.5).
//
// The client sends ACT, one row per env it steps now (columns of one length
// k), and gets ACTIONS: one action for each row that wants one (neither
// terminated nor truncated), in row order. Client::act does the exchange;
// this header has the rows, the reply, and the wire form of both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "rlinks/ndarray.hpp"
#include "rlinks/value.hpp"

namespace rlinks {

// Env ids are the client's own names for its envs: 0 <= id <= kMaxEnvId.
constexpr uint32_t kMaxEnvId = 0x7fffffff;
// Rows in one ACT (rlinks' runner refuses more; send several ACTs instead).
constexpr size_t kMaxActRows = 65536;

// The rows of one ACT, as columns of one length k.
//
//   env         the env of each row; the same env may appear twice (a row
//               that ends its episode, then a start row for the next)
//   obs         (k, *obs_shape), any numeric dtype: the observation now (the
//               first of an episode, the one after the last action, or the
//               final one on an ending row)
//   reward      the reward of the env's last action (ignored on start rows:
//               pass 0); sent as float32
//   start       the row starts a new episode (after a reset)
//   terminated, truncated
//               the last action ended the episode; no action is wanted
//
// and, each left empty when not sent, the columns of the served_taken
// extension (section 10.5.1) and of takeover (10.8):
//
//   taken_mask  the row's action is the simulator's own, in `taken` (a row
//               that ends its episode can't carry one)
//   taken       (k, *action_shape): those actions as the env applies them
//               (a Discrete space's as int64); other rows hold zeros
//   train       read on start rows: false starts an episode nothing of which
//               is recorded (give every row its env's setting, so a start row
//               rewritten after a reconnect keeps it)
//   takeover    rows of taken_mask where a person or a scripted controller
//               acted instead of the policy
struct ActRows {
  std::vector<uint32_t> env;
  NdArray obs{DType::float32(), {0}, Bytes{}};
  std::vector<double> reward;
  std::vector<bool> start, terminated, truncated;
  std::vector<bool> taken_mask;
  NdArray taken{DType::int64(), {0}, Bytes{}};
  std::vector<bool> train, takeover;

  size_t size() const { return env.size(); }
  bool ends(size_t row) const { return terminated[row] || truncated[row]; }
  // The envs of the rows that want an action (neither terminated nor truncated), in row order.
  std::vector<uint32_t> wanting_actions() const;
  // Throws UsageError unless: 1 to kMaxActRows rows, every column k long,
  // obs of shape (k, ...) and a numeric dtype, env ids <= kMaxEnvId,
  // rewards finite as float32, and no row that both starts and ends an
  // episode; taken_mask with `taken` of shape (k, ...) and numbers, on rows
  // that want an action; takeover only on rows of taken_mask.
  void check() const;
  // Whether the served_taken columns (taken_mask, train) are sent.
  bool has_served_taken() const { return !taken_mask.empty() || !train.empty(); }
  // Rows `rows` of these, in that order (start flags as given in `start_rows`,
  // one per kept row).
  ActRows select(const std::vector<size_t>& rows, const std::vector<bool>& start_rows) const;

 private:
  void check_taken() const;
};

// Builds the rows of one ACT for flat float32 observations, one row at a time.
class ActBuilder {
 public:
  explicit ActBuilder(size_t observation_size);

  // A row that starts a new episode on `env` at `observation` (observation_size floats).
  void start(uint32_t env, const float* observation);
  // A row that reports what `env`'s last action led to: `reward` and the
  // observation now. With terminated or truncated the episode ended there,
  // `observation` is its final one and no action is wanted for the row.
  void step(uint32_t env, const float* observation, double reward, bool terminated = false, bool truncated = false);

  size_t size() const { return env_.size(); }
  bool empty() const { return env_.empty(); }
  size_t observation_size() const { return observation_size_; }
  // The rows added since the last take(), as ActRows (obs <f4 (k, observation_size)); starts empty again.
  ActRows take();

 private:
  void add(uint32_t env, const float* observation, double reward, bool start, bool terminated, bool truncated);

  size_t observation_size_;
  std::vector<uint32_t> env_;
  std::vector<float> obs_;
  std::vector<double> reward_;
  std::vector<bool> start_, terminated_, truncated_;
};

// The answer to one ACT.
struct ActionsReply {
  // The envs of the rows that wanted an action, in row order; actions[i] is env[i]'s.
  std::vector<uint32_t> env;
  // (m, *action_shape) in the action space's form (a Discrete as int64).
  NdArray actions{DType::int64(), {0}, Bytes{}};
  // The weights the actions were computed with (the last one seen when no ACT had to be sent).
  uint64_t weights_seq_no = 0;
  // Envs whose open episode the runner had closed (as truncated) because the
  // connection dropped, found when this call sent their rows on a new
  // connection: a row that continued the episode went as a start row (a new
  // episode begins at that observation), a row that ended it was left out.
  std::vector<uint32_t> interrupted;

  size_t size() const { return env.size(); }
  // actions[i] of a Discrete space: throws ProtocolError (invalid_message)
  // unless the actions are integers of shape (m,).
  int64_t discrete(size_t i) const;
};

// The ACT message for `rows` (checked first: UsageError).
Value make_act(const ActRows& rows);

// Reads the ACTIONS answering an ACT whose rows wanting an action were those
// of `expected` (their envs, in row order). `actions` may be an array of
// shape (m, ...) or a list of m numbers (made an int64 array when they are
// all integers, else float64). Throws ProtocolError invalid_message: an env
// list that differs from `expected`, an env id that is not an int in
// 0..kMaxEnvId, m actions for another number of envs, or actions of another form.
ActionsReply read_actions(const Value& message, const std::vector<uint32_t>& expected);

}  // namespace rlinks
