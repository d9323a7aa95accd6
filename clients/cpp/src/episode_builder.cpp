#include "rlinks/episode_builder.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "rlinks/errors.hpp"

namespace rlinks {
namespace {

double clock_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Value buffer(Value data, bool finalized) {
  return Map{{"data", std::move(data)}, {"lookback", 0}, {"finalized", finalized}, {"space", nullptr}};
}

Value optional_time(const std::optional<double>& seconds) { return seconds ? Value(*seconds) : Value(); }

}  // namespace

EpisodeBuilder::EpisodeBuilder(size_t observation_size, std::vector<ExtraOutput> extras, size_t max_chunk_steps,
                               std::vector<uint64_t> box_action_shape)
    : observation_size_(observation_size), extras_(std::move(extras)), max_chunk_steps_(max_chunk_steps),
      id_source_(std::random_device{}()), box_shape_(std::move(box_action_shape)), extra_values_(extras_.size()) {
  if (observation_size_ == 0) throw UsageError("observations need at least one value");
  if (max_chunk_steps_ == 0) throw UsageError("max_chunk_steps must be at least 1");
  if (!box_shape_.empty()) {
    box_size_ = 1;
    for (uint64_t d : box_shape_) box_size_ *= size_t(d);
    if (box_size_ == 0) throw UsageError("a Box action needs at least one value");
  }
}

std::string EpisodeBuilder::new_id() {
  static const char* digits = "0123456789abcdef";
  std::string id;
  for (int half = 0; half < 2; ++half) {
    const uint64_t bits = id_source_();
    for (int i = 0; i < 16; ++i) id += digits[(bits >> (4 * i)) & 15];
  }
  return id;
}

const std::string& EpisodeBuilder::reset(const float* observation) {
  if (running_ && steps_ > 0) finish(false, true);
  running_ = true;
  id_ = new_id();
  t_started_ = 0;
  steps_ = 0;
  observations_.assign(observation, observation + observation_size_);
  actions_.clear();
  box_actions_.clear();
  rewards_.clear();
  for (auto& values : extra_values_) values.clear();
  takeovers_.clear();
  start_time_ = clock_seconds();
  last_step_time_.reset();
  return id_;
}

void EpisodeBuilder::step(int64_t action, double reward, const float* observation, bool terminated, bool truncated,
                          std::initializer_list<const float*> extra_values, bool takeover) {
  if (box_size_ > 0) throw UsageError("this builder records Box actions: use step_box()");
  check_step(reward, extra_values);
  actions_.push_back(action);
  record(reward, observation, terminated, truncated, extra_values, takeover);
}

void EpisodeBuilder::step_box(const float* action, double reward, const float* observation, bool terminated,
                          bool truncated, std::initializer_list<const float*> extra_values, bool takeover) {
  if (box_size_ == 0) throw UsageError("this builder records Discrete actions: use step() with the index");
  check_step(reward, extra_values);
  box_actions_.insert(box_actions_.end(), action, action + box_size_);
  record(reward, observation, terminated, truncated, extra_values, takeover);
}

void EpisodeBuilder::truncate() {
  if (running_ && steps_ > 0) finish(false, true);
  running_ = false;
}

void EpisodeBuilder::check_step(double reward, std::initializer_list<const float*> extra_values) const {
  if (!running_) throw UsageError("step() needs a running episode: call reset() first");
  if (!std::isfinite(reward)) throw UsageError("a reward must be a finite number");
  if (extra_values.size() != extras_.size()) {
    throw UsageError("step() needs " + std::to_string(extras_.size()) + " extra model outputs, got " +
                     std::to_string(extra_values.size()));
  }
}

// Records all of a checked step but its action (added already), then ends or cuts the chunk.
void EpisodeBuilder::record(double reward, const float* observation, bool terminated, bool truncated,
                            std::initializer_list<const float*> extra_values, bool takeover) {
  if (takeover && takeovers_.empty()) takeovers_.assign(steps_, false);
  if (!takeovers_.empty()) takeovers_.push_back(takeover);
  rewards_.push_back(float(reward));
  observations_.insert(observations_.end(), observation, observation + observation_size_);
  for (size_t k = 0; k < extras_.size(); ++k) {
    const float* values = extra_values.begin()[k];
    extra_values_[k].insert(extra_values_[k].end(), values, values + std::max<size_t>(extras_[k].width, 1));
  }
  ++steps_;
  last_step_time_ = clock_seconds();
  if (terminated || truncated) {
    finish(terminated, truncated);
  } else if (steps_ >= max_chunk_steps_) {
    cut();
  }
}

NdArray EpisodeBuilder::actions(uint64_t steps) const {
  if (box_size_ == 0) return NdArray::from_int64({steps}, actions_.data());
  std::vector<uint64_t> shape{steps};
  shape.insert(shape.end(), box_shape_.begin(), box_shape_.end());
  return NdArray::from_float32(shape, box_actions_.data());
}

std::vector<Value> EpisodeBuilder::take_chunks() {
  if (running_ && steps_ > 0) cut();
  std::vector<Value> chunks = std::move(finished_);
  finished_.clear();
  finished_steps_ = 0;
  return chunks;
}

void EpisodeBuilder::emit(bool terminated, bool truncated) {
  const uint64_t steps = steps_;
  Value extra_outputs;
  if (!extras_.empty()) {
    Map outputs;
    for (size_t k = 0; k < extras_.size(); ++k) {
      std::vector<uint64_t> shape{steps};
      if (extras_[k].width > 0) shape.push_back(extras_[k].width);
      outputs.push_back({extras_[k].name, buffer(NdArray::from_float32(shape, extra_values_[k].data()), true)});
    }
    extra_outputs = std::move(outputs);
  }
  if (!takeovers_.empty()) {
    if (extra_outputs.is_nil()) extra_outputs = Map{};
    extra_outputs.as_map().push_back({kTakeoverOutput, buffer(NdArray::from_bools(takeovers_), true)});
  }
  Array infos(steps + 1, Value(Map{}));
  finished_.push_back(Map{
      {"id_", id_},
      {"agent_id", nullptr},
      {"module_id", nullptr},
      {"multi_agent_episode_id", nullptr},
      {"observations", buffer(NdArray::from_float32({steps + 1, observation_size_}, observations_.data()), true)},
      {"actions", buffer(actions(steps), true)},
      {"rewards", buffer(NdArray::from_float32({steps}, rewards_.data()), true)},
      {"infos", buffer(std::move(infos), false)},
      {"extra_model_outputs", std::move(extra_outputs)},
      {"is_terminated", terminated},
      {"is_truncated", truncated},
      {"t_started", t_started_},
      {"t", t_started_ + steps},
      {"_observation_space", nullptr},
      {"_action_space", nullptr},
      {"_start_time", optional_time(start_time_)},
      {"_last_step_time", optional_time(last_step_time_)},
      {"custom_data", Map{}},
  });
  finished_steps_ += steps;
}

void EpisodeBuilder::finish(bool terminated, bool truncated) {
  emit(terminated, truncated);
  takeovers_.clear();
  running_ = false;
  steps_ = 0;
}

void EpisodeBuilder::cut() {
  emit(false, false);
  observations_.erase(observations_.begin(), observations_.end() - std::ptrdiff_t(observation_size_));
  actions_.clear();
  box_actions_.clear();
  rewards_.clear();
  for (auto& values : extra_values_) values.clear();
  takeovers_.clear();
  t_started_ += steps_;
  steps_ = 0;
  // The next chunk's clock starts where this one stopped, so chunk durations add up to the episode's.
  start_time_ = last_step_time_;
}

uint64_t episode_steps(const Value& state) {
  const Value* rewards = state.find("rewards");
  const Value* data = rewards != nullptr ? rewards->find("data") : nullptr;
  const Value* lookback = rewards != nullptr ? rewards->find("lookback") : nullptr;
  uint64_t skipped = 0;
  if (data == nullptr || lookback == nullptr || !lookback->get_uint64(skipped)) {
    throw UsageError("an episode state needs a rewards buffer with data and lookback");
  }
  uint64_t size;
  if (data->is_array()) {
    size = data->as_array().size();
  } else if (data->is_ndarray() && !data->as_ndarray().shape().empty()) {
    size = data->as_ndarray().shape()[0];
  } else {
    throw UsageError("an episode state's rewards must be a list or an array with a step axis");
  }
  return size > skipped ? size - skipped : 0;
}

}  // namespace rlinks
