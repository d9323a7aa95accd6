#include "local_inference.hpp"

#include <utility>

namespace rlinks {

LocalInference::LocalInference(SharedClient& client, LocalPolicy policy, const WeightsUpdate& first,
                               const Setup& setup, std::mt19937_64 rng)
    : client_(client), policy_(std::move(policy)), rng_(rng), fragment_(setup.fragment),
      want_(first.want_steps.value_or(setup.fragment)), recorders_(setup.num_envs), outputs_(setup.num_envs),
      pending_(setup.num_envs, false), untrained_(setup.num_envs, false), taken_over_(setup.num_envs, false),
      seq_no_(policy_.seq_no()) {
  if (!setup.on_policy) {
    sender_ = std::make_unique<BackgroundSender>(client, setup.timeout_s, setup.weights_every_s, setup.queue_batches,
                                                 setup.in_flight);
  }
}

LocalInference::~LocalInference() = default;

bool LocalInference::is_open(uint32_t env) const {
  return untrained_[env] || (recorders_[env] != nullptr && recorders_[env]->running());
}

EpisodeBuilder& LocalInference::recorder(uint32_t env) {
  if (recorders_[env] == nullptr) {
    const ActionSpace& space = policy_.action_space();
    recorders_[env] = std::make_unique<EpisodeBuilder>(
        policy_.observation_size(), std::vector<ExtraOutput>{{"action_dist_inputs", space.dist_inputs()}, {"action_logp", 0}},
        65536, space.is_box() ? space.shape : std::vector<uint64_t>{});
  }
  return *recorders_[env];
}

void LocalInference::start(uint32_t env, const float* obs, bool train) {
  EpisodeBuilder& episode = recorder(env);
  pending_[env] = false;
  taken_over_[env] = false;
  episode.truncate();
  untrained_[env] = !train;
  if (train) episode.reset(obs);
}

std::vector<Action> LocalInference::act(const std::vector<uint32_t>& envs, const float* rows,
                                        const std::vector<Action>* taken, bool takeover) {
  if (taken != nullptr) {
    // Every taken action is checked before anything changes: a refused call changes nothing.
    for (const Action& action : *taken) policy_.check_action(action);
  }
  pace();
  const size_t size = policy_.observation_size();
  std::vector<Action> actions;
  actions.reserve(envs.size());
  for (size_t i = 0; i < envs.size(); ++i) {
    const uint32_t env = envs[i];
    if (taken != nullptr) {
      policy_.output_for(rows + i * size, (*taken)[i], outputs_[env]);
    } else {
      policy_.compute(rows + i * size, rng_, outputs_[env]);
    }
    pending_[env] = true;
    taken_over_[env] = taken != nullptr && takeover;
    actions.push_back(outputs_[env].for_env);
  }
  return actions;
}

bool LocalInference::report(uint32_t env, double reward, const float* obs, bool terminated, bool truncated) {
  const PolicyOutput& out = outputs_[env];
  const bool takeover = taken_over_[env];
  pending_[env] = false;
  taken_over_[env] = false;
  if (untrained_[env]) {
    if (terminated || truncated) untrained_[env] = false;
    return terminated || truncated;
  }
  EpisodeBuilder& episode = recorder(env);
  if (out.sampled.empty()) {
    episode.step(out.for_env.index, reward, obs, terminated, truncated, {out.dist_inputs.data(), &out.logp}, takeover);
  } else {
    episode.step_box(out.sampled.data(), reward, obs, terminated, truncated, {out.dist_inputs.data(), &out.logp},
                     takeover);
  }
  ++unsent_;
  return terminated || truncated;
}

void LocalInference::after_report() {
  if (sender_ != nullptr) {
    if (unsent_ >= fragment_) sender_->send(take_chunks());
  } else if (unsent_ >= want_) {
    exchange();
  }
}

void LocalInference::end(uint32_t env) {
  pending_[env] = false;
  taken_over_[env] = false;
  untrained_[env] = false;
  if (recorders_[env] != nullptr) recorders_[env]->truncate();
}

void LocalInference::close(bool flush) {
  if (sender_ != nullptr) {
    if (!flush) return sender_->abandon();
    std::vector<Value> chunks = take_chunks();
    if (!chunks.empty()) sender_->send(std::move(chunks));
    return sender_->close();
  }
  // On-policy, the steps of an unfinished share stay here: the runner asks
  // for whole shares, each sampled with the weights it trains.
  if (flush) client_.call([](Client& client) { client.flush(); });
}

void LocalInference::pace() {
  if (sender_ != nullptr) {
    sender_->check();
    if (std::optional<WeightsUpdate> update = sender_->newest_weights()) take_weights(*update);
  } else if (unsent_ >= want_) {
    exchange();
  }
}

void LocalInference::exchange() {
  std::vector<Value> chunks = take_chunks();
  const WeightsUpdate update =
      client_.call([&](Client& client) { return client.send_episodes_and_get_state(std::move(chunks)); });
  take_weights(update);
  want_ = update.want_steps.value_or(fragment_);
}

std::vector<Value> LocalInference::take_chunks() {
  std::vector<Value> chunks;
  for (const std::unique_ptr<EpisodeBuilder>& episode : recorders_) {
    if (episode == nullptr) continue;
    for (Value& chunk : episode->take_chunks()) chunks.push_back(std::move(chunk));
  }
  unsent_ = 0;
  return chunks;
}

void LocalInference::take_weights(const WeightsUpdate& update) {
  policy_.set_weights(update.weights);
  seq_no_.store(policy_.seq_no());
}

}  // namespace rlinks
