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
      warn_(std::move(warn)), open_(num_envs, false), acting_(num_envs, false), untrained_(num_envs, false),
      outcome_(num_envs) {
  for (uint64_t d : obs_shape_) obs_size_ *= size_t(d);
}

void ServedInference::start(uint32_t env, const float*, bool train) {
  end(env);
  open_[env] = true;
  outcome_[env].reset();
  untrained_[env] = !train;
}

std::vector<Action> ServedInference::act(const std::vector<uint32_t>& envs, const float* rows,
                                         const std::vector<Action>* taken, bool takeover) {
  if (taken != nullptr) {
    for (const Action& action : *taken) check_taken(action);
  }
  // Nothing changes here until the runner answered: a refused call leaves the rows for the next one.
  std::vector<Row> call;
  std::vector<bool> acting(open_.size(), false);
  for (uint32_t env : envs) acting[env] = true;
  for (const Row& ending : endings_) {
    if (!acting[ending.env]) call.push_back(ending);
  }
  for (size_t i = 0; i < envs.size(); ++i) {
    const uint32_t env = envs[i];
    for (const Row& ending : endings_) {
      if (ending.env == env) call.push_back(ending);
    }
    Row row;
    row.env = env;
    row.obs.assign(rows + i * obs_size_, rows + (i + 1) * obs_size_);
    if (outcome_[env]) {
      row.reward = outcome_[env]->reward;
    } else {
      row.start = true;
    }
    if (taken != nullptr) {
      row.taken = &(*taken)[i];
      row.takeover = takeover;
    }
    call.push_back(std::move(row));
  }
  const ActionsReply reply = send(call);
  endings_.clear();
  for (uint32_t env : envs) outcome_[env].reset();
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
  add_taken_columns(call, rows);
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

void ServedInference::check_taken(const Action& action) const {
  if (!space_) return;  // the runner checks the action against its space (bad_episode)
  if (space_->is_box() != action.is_box()) {
    throw UsageError(std::string("a ") + (action.is_box() ? "Box" : "Discrete") + " action for " + space_->str());
  }
  if (space_->is_box()) {
    if (action.values.size() != space_->size()) {
      throw UsageError("a Box action of " + std::to_string(action.values.size()) + " number(s), but " + space_->str() +
                       " takes " + std::to_string(space_->size()));
    }
  } else if (action.index < 0 || uint64_t(action.index) >= space_->n) {
    throw UsageError("action " + std::to_string(action.index) + " is not one of " + space_->str() + " (0.." +
                     std::to_string(space_->n - 1) + ")");
  }
}

void ServedInference::add_taken_columns(const std::vector<Row>& call, ActRows& rows) const {
  const Row* first = nullptr;
  bool untrained = false;
  for (const Row& row : call) {
    if (row.taken != nullptr && first == nullptr) first = &row;
    untrained = untrained || untrained_[row.env];
  }
  // Every row carries its env's setting, so a start row rewritten after a reconnect keeps it.
  if (untrained) {
    for (const Row& row : call) rows.train.push_back(!untrained_[row.env]);
  }
  if (first == nullptr) return;
  const bool box = first->taken->is_box();
  const size_t width = box ? first->taken->values.size() : 1;
  std::vector<uint64_t> shape{call.size()};
  const std::vector<uint64_t> action_shape = space_ ? space_->shape : std::vector<uint64_t>{width};
  if (box) shape.insert(shape.end(), action_shape.begin(), action_shape.end());
  std::vector<float> values(box ? call.size() * width : 0, 0.0f);
  std::vector<int64_t> indices(box ? 0 : call.size(), 0);
  bool takeover = false;
  for (size_t i = 0; i < call.size(); ++i) {
    const Row& row = call[i];
    rows.taken_mask.push_back(row.taken != nullptr);
    rows.takeover.push_back(row.takeover);
    takeover = takeover || row.takeover;
    if (row.taken == nullptr) continue;
    if (row.taken->is_box() != box || row.taken->values.size() != (box ? width : 0)) {
      throw UsageError("the actions taken in one call must all be of one form (a Discrete index, or a Box of " +
                       std::to_string(width) + " number(s))");
    }
    if (box) {
      std::copy(row.taken->values.begin(), row.taken->values.end(), values.begin() + std::ptrdiff_t(i * width));
    } else {
      indices[i] = row.taken->index;
    }
  }
  rows.taken = box ? NdArray::from_float32(shape, values.data()) : NdArray::from_int64(shape, indices.data());
  if (!takeover) rows.takeover.clear();
}

}  // namespace rlinks
