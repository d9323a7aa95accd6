#include "served_inference.hpp"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "rlinks/errors.hpp"

namespace rlinks {

ServedInference::ServedInference(SharedClient& client, std::vector<uint64_t> obs_shape,
                                 std::optional<ActionSpace> space, uint32_t num_envs,
                                 std::function<void(const std::string&)> warn)
    : client_(client), obs_shape_(std::move(obs_shape)), obs_size_(1), space_(std::move(space)),
      warn_(std::move(warn)), open_(num_envs, false), acting_(num_envs, false), outcome_(num_envs) {
  for (uint64_t d : obs_shape_) obs_size_ *= size_t(d);
}

void ServedInference::start(uint32_t env, const float*) {
  end(env);
  open_[env] = true;
  outcome_[env].reset();
}

std::vector<Action> ServedInference::act(const std::vector<uint32_t>& envs, const float* rows) {
  std::vector<Row> call;
  std::vector<bool> acting(open_.size(), false);
  for (uint32_t env : envs) acting[env] = true;
  for (Row& ending : endings_) {
    if (!acting[ending.env]) call.push_back(std::move(ending));
  }
  for (size_t i = 0; i < envs.size(); ++i) {
    const uint32_t env = envs[i];
    for (Row& ending : endings_) {
      if (ending.env == env) call.push_back(std::move(ending));
    }
    Row row;
    row.env = env;
    row.obs.assign(rows + i * obs_size_, rows + (i + 1) * obs_size_);
    if (outcome_[env]) {
      row.reward = outcome_[env]->reward;
      outcome_[env].reset();
    } else {
      row.start = true;
    }
    call.push_back(std::move(row));
  }
  endings_.clear();
  const ActionsReply reply = send(call);
  std::unordered_map<uint32_t, size_t> position;
  for (size_t i = 0; i < reply.size(); ++i) position[reply.env[i]] = i;
  std::vector<Action> actions;
  for (uint32_t env : envs) {
    actions.push_back(action_of(reply, position.at(env)));
    acting_[env] = true;
  }
  return actions;
}

bool ServedInference::report(uint32_t env, double reward, const float* obs, bool terminated, bool truncated) {
  acting_[env] = false;
  Row row;
  row.env = env;
  row.obs.assign(obs, obs + obs_size_);
  row.reward = reward;
  if (terminated || truncated) {
    row.terminated = terminated;
    row.truncated = truncated;
    endings_.push_back(std::move(row));
    open_[env] = false;
    return true;
  }
  outcome_[env] = std::move(row);
  return false;
}

void ServedInference::end(uint32_t env) {
  if (outcome_[env]) {
    Row ending = std::move(*outcome_[env]);
    outcome_[env].reset();
    ending.truncated = true;
    endings_.push_back(std::move(ending));
  }
  // An env that acted and never reported: the runner drops that step after served_report_timeout_s.
  acting_[env] = false;
  open_[env] = false;
}

void ServedInference::close(bool flush) {
  if (!flush) return;
  for (uint32_t env = 0; env < outcome_.size(); ++env) end(env);
  if (endings_.empty()) return;
  std::vector<Row> last = std::move(endings_);
  endings_.clear();
  send(last);
}

ActionsReply ServedInference::send(const std::vector<Row>& call) {
  ActRows rows;
  std::vector<float> obs;
  for (const Row& row : call) {
    rows.env.push_back(row.env);
    obs.insert(obs.end(), row.obs.begin(), row.obs.end());
    rows.reward.push_back(row.reward);
    rows.start.push_back(row.start);
    rows.terminated.push_back(row.terminated);
    rows.truncated.push_back(row.truncated);
  }
  std::vector<uint64_t> shape{call.size()};
  shape.insert(shape.end(), obs_shape_.begin(), obs_shape_.end());
  rows.obs = NdArray::from_float32(shape, obs.data());
  ActionsReply reply = client_.call([&](Client& client) { return client.act(rows); });
  seq_no_.store(reply.weights_seq_no);
  if (!reply.interrupted.empty()) {
    warn_(std::to_string(reply.interrupted.size()) +
          " episode(s) interrupted by the lost connection; the runner records them from here on, as new episodes");
  }
  return reply;
}

Action ServedInference::action_of(const ActionsReply& reply, size_t i) const {
  const bool box = space_ ? space_->is_box() : reply.actions.dtype().kind == 'f';
  Action action;
  if (!box) {
    action.index = reply.discrete(i);
    if (space_ && (action.index < 0 || uint64_t(action.index) >= space_->n)) {
      throw ProtocolError(ErrorCode::invalid_message, "ACTIONS: action " + std::to_string(action.index) + " for env " +
                                                          std::to_string(reply.env[i]) + " is not in " + space_->str());
    }
    return action;
  }
  const size_t width = reply.size() == 0 ? 0 : reply.actions.size() / reply.size();
  if (width == 0 || (space_ && width != space_->size()) || !reply.actions.dtype().is_numeric()) {
    throw ProtocolError(ErrorCode::invalid_message, "ACTIONS: " + std::to_string(width) + " number(s) of dtype " +
                                                        reply.actions.dtype().str() + " per env, which is not an action of " +
                                                        (space_ ? space_->str() : std::string("a Box")));
  }
  for (size_t j = 0; j < width; ++j) action.values.push_back(float(reply.actions.number(i * width + j)));
  return action;
}

}  // namespace rlinks
