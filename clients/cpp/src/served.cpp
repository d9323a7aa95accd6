#include "rlinks/served.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "rlinks/errors.hpp"
#include "rlinks/messages.hpp"

namespace rlinks {
namespace {

constexpr size_t kShownEnvs = 8;

std::string env_list(const std::vector<uint32_t>& env) {
  std::string text = "[";
  for (size_t i = 0; i < env.size() && i < kShownEnvs; ++i) text += (i ? ", " : "") + std::to_string(env[i]);
  if (env.size() > kShownEnvs) text += ", ... (" + std::to_string(env.size()) + " envs)";
  return text + "]";
}

// Rows `rows` of an array of shape (k, ...), in that order.
NdArray select_rows(const NdArray& array, const std::vector<size_t>& rows) {
  const size_t k = array.shape().empty() ? 0 : size_t(array.shape()[0]);
  const size_t row_bytes = k == 0 ? 0 : array.nbytes() / k;
  std::vector<uint64_t> shape = array.shape();
  shape[0] = rows.size();
  Bytes data(rows.size() * row_bytes);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (row_bytes > 0) std::memcpy(&data[i * row_bytes], array.data() + rows[i] * row_bytes, row_bytes);
  }
  return NdArray(array.dtype(), std::move(shape), std::move(data));
}

ProtocolError invalid(const std::string& why) { return ProtocolError(ErrorCode::invalid_message, "ACTIONS: " + why); }

// A list of m numbers (or numpy scalars) as one array: int64 when all are integers, else float64.
NdArray list_of_numbers(const Array& items) {
  bool all_integers = true;
  for (size_t i = 0; i < items.size(); ++i) {
    const Value& item = items[i];
    if (item.is_integer() || item.is_float()) {
      all_integers = all_integers && item.is_integer();
      continue;
    }
    if (item.is_ndarray() && item.as_ndarray().shape().empty() && item.as_ndarray().dtype().is_numeric()) {
      all_integers = all_integers && item.as_ndarray().dtype().kind != 'f';
      continue;
    }
    throw invalid("actions[" + std::to_string(i) + "] is a " + item.type_name() +
                  "; a list of actions must hold numbers (send an array of shape (m, ...) for other spaces)");
  }
  const DType dtype = all_integers ? DType::int64() : DType{'<', 'f', 8};
  Bytes data(items.size() * 8);
  for (size_t i = 0; i < items.size(); ++i) {
    const Value& item = items[i];
    uint8_t* out = &data[i * 8];
    if (item.is_ndarray()) {
      const NdArray& scalar = item.as_ndarray();
      if (all_integers) {
        if (scalar.dtype().kind == 'u' && scalar.unsigned_at(0) > uint64_t(std::numeric_limits<int64_t>::max())) {
          throw invalid("actions[" + std::to_string(i) + "] does not fit in int64");
        }
        store_signed(dtype, out, scalar.dtype().kind == 'u' ? int64_t(scalar.unsigned_at(0)) : scalar.signed_at(0));
      } else {
        store_number(dtype, out, scalar.number(0));
      }
    } else if (item.is_integer()) {
      int64_t value = 0;
      if (!item.get_int64(value)) throw invalid("actions[" + std::to_string(i) + "] does not fit in int64");
      store_signed(dtype, out, value);
    } else {
      store_number(dtype, out, item.as_double());
    }
  }
  return NdArray(dtype, {uint64_t(items.size())}, std::move(data));
}

}  // namespace

// ---------------------------------------------------------------------------
// ActRows

std::vector<uint32_t> ActRows::wanting_actions() const {
  std::vector<uint32_t> wanting;
  for (size_t row = 0; row < size(); ++row) {
    if (!ends(row)) wanting.push_back(env[row]);
  }
  return wanting;
}

void ActRows::check() const {
  const size_t k = env.size();
  if (k == 0 || k > kMaxActRows) {
    throw UsageError("an ACT holds 1 to " + std::to_string(kMaxActRows) + " rows, got " + std::to_string(k));
  }
  if (reward.size() != k || start.size() != k || terminated.size() != k || truncated.size() != k) {
    throw UsageError("ACT: env, reward, start, terminated and truncated must have one entry per row (" +
                     std::to_string(k) + ")");
  }
  if (obs.is_scalar() || obs.shape().empty() || obs.shape()[0] != k) {
    throw UsageError("ACT: obs must be an array of shape (" + std::to_string(k) + ", ...): one observation per row");
  }
  if (!obs.dtype().is_numeric()) throw UsageError("ACT: obs must hold numbers, not " + obs.dtype().str());
  for (size_t row = 0; row < k; ++row) {
    if (env[row] > kMaxEnvId) {
      throw UsageError("ACT: env ids are 0.." + std::to_string(kMaxEnvId) + ", got " + std::to_string(env[row]));
    }
    if (!std::isfinite(float(reward[row]))) {
      throw UsageError("ACT: the reward of row " + std::to_string(row) + " (env " + std::to_string(env[row]) +
                       ") is not a finite float32; pass 0 on start rows");
    }
    if (start[row] && ends(row)) {
      throw UsageError("ACT: row " + std::to_string(row) + " (env " + std::to_string(env[row]) +
                       ") both starts and ends an episode; send the ending row, then a start row");
    }
  }
  check_taken();
}

void ActRows::check_taken() const {
  const size_t k = env.size();
  const auto column = [k](const std::vector<bool>& flags, const char* name) {
    if (!flags.empty() && flags.size() != k) {
      throw UsageError(std::string("ACT: ") + name + " must be empty (not sent) or have one entry per row (" +
                       std::to_string(k) + ")");
    }
  };
  column(taken_mask, "taken_mask");
  column(train, "train");
  column(takeover, "takeover");
  if (!taken_mask.empty()) {
    if (taken.is_scalar() || taken.shape().empty() || taken.shape()[0] != k || !taken.dtype().is_numeric()) {
      throw UsageError("ACT: taken must be an array of numbers of shape (" + std::to_string(k) +
                       ", ...): one action per row");
    }
    for (size_t row = 0; row < k; ++row) {
      if (taken_mask[row] && ends(row)) {
        throw UsageError("ACT: row " + std::to_string(row) + " (env " + std::to_string(env[row]) +
                         ") carries a taken action but ends its episode");
      }
    }
  }
  for (size_t row = 0; row < takeover.size(); ++row) {
    if (takeover[row] && (taken_mask.empty() || !taken_mask[row])) {
      throw UsageError("ACT: row " + std::to_string(row) + " (env " + std::to_string(env[row]) +
                       ") is a take-over without a taken action");
    }
  }
}

ActRows ActRows::select(const std::vector<size_t>& rows, const std::vector<bool>& start_rows) const {
  if (start_rows.size() != rows.size()) throw UsageError("ActRows::select: one start flag per selected row");
  ActRows selected;
  for (size_t i = 0; i < rows.size(); ++i) {
    const size_t row = rows.at(i);
    if (row >= size()) throw UsageError("ActRows::select: row " + std::to_string(row) + " out of range");
    selected.env.push_back(env[row]);
    selected.reward.push_back(reward[row]);
    selected.start.push_back(start_rows[i]);
    selected.terminated.push_back(terminated[row]);
    selected.truncated.push_back(truncated[row]);
    if (!taken_mask.empty()) selected.taken_mask.push_back(taken_mask[row]);
    if (!train.empty()) selected.train.push_back(train[row]);
    if (!takeover.empty()) selected.takeover.push_back(takeover[row]);
  }
  selected.obs = select_rows(obs, rows);
  if (!taken_mask.empty()) selected.taken = select_rows(taken, rows);
  return selected;
}

// ---------------------------------------------------------------------------
// ActBuilder

ActBuilder::ActBuilder(size_t observation_size) : observation_size_(observation_size) {}

void ActBuilder::start(uint32_t env, const float* observation) { add(env, observation, 0.0, true, false, false); }

void ActBuilder::step(uint32_t env, const float* observation, double reward, bool terminated, bool truncated) {
  add(env, observation, reward, false, terminated, truncated);
}

void ActBuilder::add(uint32_t env, const float* observation, double reward, bool start, bool terminated,
                     bool truncated) {
  if (env > kMaxEnvId) throw UsageError("env ids are 0.." + std::to_string(kMaxEnvId) + ", got " + std::to_string(env));
  if (!std::isfinite(float(reward))) throw UsageError("the reward of env " + std::to_string(env) + " is not a finite float32");
  env_.push_back(env);
  obs_.insert(obs_.end(), observation, observation + observation_size_);
  reward_.push_back(reward);
  start_.push_back(start);
  terminated_.push_back(terminated);
  truncated_.push_back(truncated);
}

ActRows ActBuilder::take() {
  ActRows rows;
  rows.obs = NdArray::from_float32({uint64_t(env_.size()), uint64_t(observation_size_)}, obs_.data());
  rows.env = std::move(env_);
  rows.reward = std::move(reward_);
  rows.start = std::move(start_);
  rows.terminated = std::move(terminated_);
  rows.truncated = std::move(truncated_);
  env_.clear();
  obs_.clear();
  reward_.clear();
  start_.clear();
  terminated_.clear();
  truncated_.clear();
  return rows;
}

// ---------------------------------------------------------------------------
// ActionsReply

int64_t ActionsReply::discrete(size_t i) const {
  const char kind = actions.dtype().kind;
  if ((kind != 'i' && kind != 'u') || actions.is_scalar() || actions.shape().size() != 1) {
    throw invalid("the actions are " + actions.dtype().str() + " of shape (" +
                  (actions.shape().empty() ? std::string() : std::to_string(actions.shape()[0])) +
                  (actions.shape().size() > 1 ? ", ...)" : ")") + ", not one integer per env (a Discrete space's form)");
  }
  if (i >= size()) throw UsageError("ActionsReply::discrete: index " + std::to_string(i) + " of " + std::to_string(size()));
  if (kind == 'u') {
    const uint64_t value = actions.unsigned_at(i);
    if (value > uint64_t(std::numeric_limits<int64_t>::max())) throw invalid("action " + std::to_string(i) + " does not fit in int64");
    return int64_t(value);
  }
  return actions.signed_at(i);
}

// ---------------------------------------------------------------------------
// Wire form

Value make_act(const ActRows& rows) {
  rows.check();
  Array env(rows.env.begin(), rows.env.end());
  std::vector<float> reward(rows.reward.begin(), rows.reward.end());
  Value message = make_message(MessageType::act, {{"env", std::move(env)},
                                                  {"obs", rows.obs},
                                                  {"reward", NdArray::from_float32({uint64_t(reward.size())}, reward.data())},
                                                  {"start", NdArray::from_bools(rows.start)},
                                                  {"terminated", NdArray::from_bools(rows.terminated)},
                                                  {"truncated", NdArray::from_bools(rows.truncated)}});
  // In the order rlinks_rllib.protocol.served.act_message adds them.
  if (!rows.taken_mask.empty()) {
    message.set("taken_mask", NdArray::from_bools(rows.taken_mask));
    message.set("taken", rows.taken);
  }
  if (!rows.train.empty()) message.set("train", NdArray::from_bools(rows.train));
  if (!rows.takeover.empty()) message.set("takeover", NdArray::from_bools(rows.takeover));
  return message;
}

ActionsReply read_actions(const Value& message, const std::vector<uint32_t>& expected) {
  if (validate_message(message) != MessageType::actions) {
    throw ProtocolError(ErrorCode::unexpected_message, "expected ACTIONS");
  }
  ActionsReply reply;
  const Array& env = message.find("env")->as_array();
  for (size_t i = 0; i < env.size(); ++i) {
    uint64_t id = 0;
    if (!env[i].is_count() || !env[i].get_uint64(id) || id > kMaxEnvId) {
      throw invalid("env[" + std::to_string(i) + "] must be an int in 0.." + std::to_string(kMaxEnvId) + ", got a " +
                    env[i].type_name());
    }
    reply.env.push_back(uint32_t(id));
  }
  if (reply.env != expected) {
    throw invalid("for envs " + env_list(reply.env) + ", but actions were asked for " + env_list(expected) +
                  " (the rows that wanted one, in row order)");
  }
  const Value& actions = *message.find("actions");
  if (actions.is_array()) {
    reply.actions = list_of_numbers(actions.as_array());
  } else {
    reply.actions = actions.as_ndarray();
    if (reply.actions.is_scalar() || reply.actions.shape().empty()) {
      throw invalid("actions must be an array of shape (m, ...), one per env, got a single value");
    }
    if (!reply.actions.dtype().is_numeric()) throw invalid("actions must hold numbers, not " + reply.actions.dtype().str());
  }
  const uint64_t count = reply.actions.shape()[0];
  if (count != reply.env.size()) {
    throw invalid(std::to_string(count) + " actions for " + std::to_string(reply.env.size()) + " envs");
  }
  message.find("weights_seq_no")->get_uint64(reply.weights_seq_no);
  return reply;
}

}  // namespace rlinks
