#include "rlinks/env_client.hpp"

#include <algorithm>
#include <cstring>
#include <iostream>
#include <numeric>
#include <random>
#include <utility>

#include "engine.hpp"
#include "local_inference.hpp"
#include "rlinks/errors.hpp"
#include "rlinks/policy.hpp"
#include "served_inference.hpp"
#include "shared_client.hpp"

namespace rlinks {
namespace {

// Episodes the mean return is taken over.
constexpr size_t kReturnsKept = 100;

size_t product(const std::vector<uint64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), size_t(1), [](size_t a, uint64_t d) { return a * size_t(d); });
}

EnvClientOptions checked(EnvClientOptions options) {
  if (options.num_envs < 1 || options.num_envs > kMaxEnvId) throw UsageError("num_envs must be 1 to 2^31 - 1");
  if (!(options.weights_every_s >= 0)) throw UsageError("weights_every_s must be >= 0");
  if (options.rollout_fragment_length < 1) throw UsageError("rollout_fragment_length must be at least 1");
  // Asked for whenever a call may need them; a runner agrees only to what it speaks.
  std::vector<std::string>& extensions = options.connection.extensions;
  for (std::string_view name : {extension::served_actions, extension::served_taken, extension::takeover}) {
    if (std::find(extensions.begin(), extensions.end(), name) == extensions.end()) extensions.push_back(std::string(name));
  }
  return options;
}

}  // namespace

const char* to_string(Inference inference) {
  switch (inference) {
    case Inference::automatic: return "automatic";
    case Inference::local: return "local";
    case Inference::served: return "served";
  }
  return "automatic";
}

EnvClientOptions::EnvClientOptions() {
  connection.reliable = true;
  connection.timeout_s = 120.0;
}

EnvClient::EnvClient(std::string_view address, EnvClientOptions options)
    : options_(checked(std::move(options))), shared_(std::make_unique<SharedClient>(address, options_.connection)),
      last_obs_(options_.num_envs), episode_return_(options_.num_envs, 0.0), taking_over_(options_.num_envs, false),
      episode_takeovers_(options_.num_envs) {}

EnvClient::~EnvClient() {
  try {
    close(false);
  } catch (...) {
  }
}

// Runs an engine call; the learner's end is noted, so close() sends nothing more.
template <class Fn>
auto EnvClient::guarded(Fn&& fn) {
  try {
    return fn();
  } catch (const TrainingEnded&) {
    ended_ = true;
    throw;
  }
}

// ---------------------------------------------------------------------------
// Lifecycle

void EnvClient::connect() { ready(); }

Ending EnvClient::run(const std::function<void()>& loop) {
  try {
    loop();
  } catch (const TrainingEnded&) {
    close(false);
    return Ending::training_ended;
  } catch (const ClientClosed&) {
    close(false);
    if (!stopped()) throw;
    return Ending::stopped;
  } catch (...) {
    close(false);
    throw;
  }
  close(true);
  if (stopped()) return Ending::stopped;
  return ended_ ? Ending::training_ended : Ending::finished;
}

void EnvClient::stop() noexcept { shared_->stop(); }

void EnvClient::close() { close(true); }

void EnvClient::close(bool flush) {
  if (closed_) return;
  closed_ = true;
  struct CloseConnection {
    SharedClient& shared;
    ~CloseConnection() {
      shared.interrupt();  // nothing is sent any more; a sender thread's wait ends now
      shared.close();
    }
  } finally{*shared_};
  if (engine_ == nullptr) return;
  try {
    engine_->close(flush && !ended_ && !shared_->stopped());
  } catch (const TrainingEnded&) {
    ended_ = true;
  }
}

bool EnvClient::running() const { return !(ended_ || closed_ || shared_->stopped()); }

bool EnvClient::stopped() const { return shared_->stopped(); }

// ---------------------------------------------------------------------------
// The loop's calls

Action EnvClient::act(Floats obs) {
  require_one_env("act(obs)", "act(env, obs) or act(envs, rows)");
  return act(std::vector<uint32_t>{0}, obs).front();
}

Action EnvClient::act(uint32_t env, Floats obs) { return act(std::vector<uint32_t>{env}, obs).front(); }

std::vector<Action> EnvClient::act(const std::vector<uint32_t>& envs, Floats obs) {
  return act_on("act", envs, obs, nullptr, false);
}

void EnvClient::log_action(Floats obs, const Action& action) {
  require_one_env("log_action(obs, action)", "log_action(env, obs, action) or log_action(envs, rows, actions)");
  log_action(std::vector<uint32_t>{0}, obs, {action});
}

void EnvClient::log_action(uint32_t env, Floats obs, const Action& action) {
  log_action(std::vector<uint32_t>{env}, obs, {action});
}

void EnvClient::log_action(const std::vector<uint32_t>& envs, Floats obs, const std::vector<Action>& actions) {
  act_on("log_action", envs, obs, &actions, false);
}

void EnvClient::take_over(Floats obs, const Action& action) {
  require_one_env("take_over(obs, action)", "take_over(env, obs, action) or take_over(envs, rows, actions)");
  take_over(std::vector<uint32_t>{0}, obs, {action});
}

void EnvClient::take_over(uint32_t env, Floats obs, const Action& action) {
  take_over(std::vector<uint32_t>{env}, obs, {action});
}

void EnvClient::take_over(const std::vector<uint32_t>& envs, Floats obs, const std::vector<Action>& actions) {
  ready();
  require_agreed(extension::takeover);
  act_on("take_over", envs, obs, &actions, true);
  for (uint32_t env : envs) taking_over_[env] = true;
}

std::vector<Action> EnvClient::act_on(const char* call, const std::vector<uint32_t>& envs, Floats obs,
                                      const std::vector<Action>* taken, bool takeover) {
  Engine& engine = ready();
  check_rows(call, envs, obs);
  if (taken != nullptr && mode_ == Inference::served) require_agreed(extension::served_taken);
  if (taken != nullptr && taken->size() != envs.size()) {
    throw UsageError(std::string(call) + "(): " + std::to_string(taken->size()) + " action(s) for " +
                     std::to_string(envs.size()) + " env(s)");
  }
  for (size_t i = 0; i < envs.size(); ++i) {
    const uint32_t env = envs[i];
    const float* row = obs.data() + i * observation_size_;
    if (engine.awaiting_report(env)) {
      throw UsageError("env " + std::to_string(env) + " acted and its outcome was not reported: call report() "
                       "before act() again");
    }
    if (!engine.is_open(env)) {
      engine.start(env, row, true);
      episode_return_[env] = 0.0;
    } else if (last_obs_[env].empty() ||
               std::memcmp(last_obs_[env].data(), row, observation_size_ * sizeof(float)) != 0) {
      throw UsageError("env " + std::to_string(env) + ": " + call + "() must take the observation last given to "
                       "report() (to start a new episode elsewhere, call start_episode() first)");
    }
  }
  std::vector<Action> actions = guarded([&] { return engine.act(envs, obs.data(), taken, takeover); });
  if (!takeover) {
    for (uint32_t env : envs) taking_over_[env] = false;
  }
  return actions;
}

void EnvClient::report(double reward, Floats next_obs, bool terminated, bool truncated) {
  require_one_env("report(reward, obs, ...)", "report(env, reward, obs, ...) or report(envs, ...)");
  report(0, reward, next_obs, terminated, truncated);
}

void EnvClient::report(uint32_t env, double reward, Floats next_obs, bool terminated, bool truncated) {
  report(std::vector<uint32_t>{env}, {reward}, next_obs, {terminated}, {truncated});
}

void EnvClient::report(const std::vector<uint32_t>& envs, const std::vector<double>& rewards, Floats next_obs,
                       const std::vector<bool>& terminated, const std::vector<bool>& truncated) {
  Engine& engine = ready();
  check_rows("report", envs, next_obs);
  if (rewards.size() != envs.size() || terminated.size() != envs.size() || truncated.size() != envs.size()) {
    throw UsageError("report(): " + std::to_string(envs.size()) + " envs, but " + std::to_string(rewards.size()) +
                     " rewards, " + std::to_string(terminated.size()) + " terminated and " +
                     std::to_string(truncated.size()) + " truncated flags");
  }
  for (size_t i = 0; i < envs.size(); ++i) {
    if (!engine.awaiting_report(envs[i])) {
      throw UsageError("env " + std::to_string(envs[i]) + " has no action to report on: call act() first");
    }
    if (!std::isfinite(float(rewards[i]))) {
      throw UsageError("report(): the reward of env " + std::to_string(envs[i]) + " is " + std::to_string(rewards[i]) +
                       ", not a finite float32");
    }
  }
  for (size_t i = 0; i < envs.size(); ++i) {
    const uint32_t env = envs[i];
    const float* row = next_obs.data() + i * observation_size_;
    const bool ended = engine.report(env, rewards[i], row, terminated[i], truncated[i]);
    {
      std::lock_guard<std::mutex> lock(counters_mutex_);
      ++steps_;
      ++episode_takeovers_[env].second;
      if (taking_over_[env]) {
        ++episode_takeovers_[env].first;
        ++takeover_steps_;
      }
    }
    taking_over_[env] = false;
    episode_return_[env] += rewards[i];
    if (ended) {
      finish_episode(env);
    } else {
      last_obs_[env].assign(row, row + observation_size_);
    }
  }
  guarded([&] { engine.after_report(); });
}

void EnvClient::require_agreed(std::string_view extension) const {
  shared_->peek([&](Client& client) {
    if (!client.agreed(extension)) throw client.not_agreed(extension);
  });
}

void EnvClient::require_one_env(const char* call, const char* instead) const {
  if (options_.num_envs != 1) {
    throw UsageError(std::string(call) + " is for one env; with num_envs=" + std::to_string(options_.num_envs) +
                     ", call " + instead);
  }
}

void EnvClient::start_episode(Floats obs, bool train) { start_episode(0, obs, train); }

void EnvClient::start_episode(uint32_t env, Floats obs, bool train) {
  Engine& engine = ready();
  check_rows("start_episode", {env}, obs);
  if (!train && mode_ == Inference::served) require_agreed(extension::served_taken);
  if (engine.is_open(env)) finish_episode(env);
  engine.start(env, obs.data(), train);
  episode_return_[env] = 0.0;
  last_obs_[env].assign(obs.data(), obs.data() + observation_size_);
}

void EnvClient::end_episode() { end_episode(0); }

void EnvClient::end_episode(uint32_t env) {
  Engine& engine = ready();
  check_envs("end_episode", {env});
  if (!engine.is_open(env)) return;
  engine.end(env);
  finish_episode(env);
}

// ---------------------------------------------------------------------------
// What was agreed

Inference EnvClient::mode() {
  ready();
  return mode_;
}

bool EnvClient::on_policy() { return ready().on_policy(); }

size_t EnvClient::observation_size() {
  ready();
  return observation_size_;
}

const std::optional<RunnerConfig>& EnvClient::config() {
  ready();
  return config_;
}

std::optional<ActionSpace> EnvClient::action_space() {
  ready();
  return space_;
}

std::vector<uint32_t> EnvClient::all_envs() const {
  std::vector<uint32_t> envs(options_.num_envs);
  std::iota(envs.begin(), envs.end(), 0u);
  return envs;
}

Address EnvClient::address() const {
  return shared_->peek([](Client& client) { return client.address(); });
}

std::string EnvClient::server_agent() const {
  return shared_->peek([](Client& client) { return client.server_agent(); });
}

bool EnvClient::plain_rllib() const {
  return shared_->peek([](Client& client) { return client.plain_rllib(); });
}

EnvClientStats EnvClient::stats() const {
  EnvClientStats stats;
  {
    std::lock_guard<std::mutex> lock(counters_mutex_);
    stats.steps = steps_;
    stats.episodes = episodes_;
    if (!returns_.empty()) stats.mean_return = std::accumulate(returns_.begin(), returns_.end(), 0.0) / double(returns_.size());
    stats.takeover_steps = takeover_steps_;
    uint64_t taken = 0, steps = 0;
    for (const auto& [episode_taken, episode_steps] : takeovers_kept_) {
      taken += episode_taken;
      steps += episode_steps;
    }
    if (steps > 0) stats.takeover_rate = double(taken) / double(steps);
  }
  const Engine* engine = live_engine_.load();
  stats.weights_seq_no = engine != nullptr ? engine->weights_seq_no() : 0;
  stats.wait_s = shared_->waited_s();
  stats.delivery = shared_->delivery();
  return stats;
}

// ---------------------------------------------------------------------------
// Inside

Engine& EnvClient::ready() {
  if (closed_) throw shared_->closed();
  if (shared_->interrupted()) throw shared_->closed();
  if (engine_ == nullptr) {
    engine_ = guarded([&] { return setup(); });
    live_engine_.store(engine_.get());
  }
  return *engine_;
}

std::unique_ptr<Engine> EnvClient::setup() {
  shared_->call([](Client& client) { client.connect(); });
  const bool serves = shared_->call([](Client& client) { return client.agreed(extension::served_actions); });
  if (options_.inference == Inference::served && !serves) return served_engine(false);
  config_ = shared_->call([](Client& client) { return client.get_config(); });
  if (config_ && config_->description.find("multi_agent") != nullptr) {
    throw UnsupportedModel("the runner is multi-agent (its config has 'multi_agent'); this client steps "
                           "single-agent envs: use the Python client (rlinks_rllib.client.EnvClient) for many agents");
  }
  if (options_.inference != Inference::served) {
    const WeightsUpdate update = shared_->call([](Client& client) { return client.get_state(); });
    try {
      return local_engine(update);
    } catch (const UnsupportedModel& error) {
      if (options_.inference == Inference::local || !serves) throw;
      warn(std::string("the policy can't run here (") + error.what() + "); the runner computes the actions");
    }
  }
  return served_engine(serves);
}

std::unique_ptr<Engine> EnvClient::local_engine(const WeightsUpdate& update) {
  ActionSpace space;
  if (config_) {
    const Value* description = config_->description.find("action_space");
    space = read_action_space(*description);
    if (config_->observation_shape.size() != 1) {
      throw UnsupportedModel("the runner's observations have shape " + shape_str(config_->observation_shape) +
                             "; this client's policy takes flat vectors (served actions run any module)");
    }
  } else if (options_.action_space) {
    space = *options_.action_space;
  } else {
    throw UsageError(address().str() +
                     " is RLlib's own server, which describes itself only as a pickle: set "
                     "EnvClientOptions::action_space (and rollout_fragment_length, fcnet_activation if not 500 and "
                     "'tanh')");
  }
  PolicyOptions policy_options{options_.explore, options_.normalize_actions, options_.clip_actions};
  LocalPolicy policy(update.weights, space, config_ ? config_->fcnet_activation : options_.fcnet_activation,
                     config_ ? config_->head_fcnet_activation : "relu", policy_options);
  if (config_ && policy.observation_size() != config_->observation_shape[0]) {
    throw UnsupportedModel("the weights take observations of " + std::to_string(policy.observation_size()) +
                           " numbers, but the runner's observation space has " +
                           std::to_string(config_->observation_shape[0]));
  }
  LocalInference::Setup setup;
  setup.num_envs = options_.num_envs;
  setup.on_policy = options_.on_policy.value_or(config_ ? config_->on_policy : true);
  setup.fragment = config_ ? std::max<uint64_t>(config_->rollout_fragment_length, 1) : options_.rollout_fragment_length;
  setup.timeout_s = options_.connection.timeout_s;
  setup.weights_every_s = options_.weights_every_s;
  setup.queue_batches = options_.send_queue_batches;
  setup.in_flight = config_ ? config_->paced_in_flight.value_or(0) : 0;
  std::mt19937_64 rng(options_.seed ? *options_.seed : std::random_device{}());
  observation_size_ = policy.observation_size();
  space_ = space;
  mode_ = Inference::local;
  return std::make_unique<LocalInference>(*shared_, std::move(policy), update, setup, rng);
}

std::unique_ptr<Engine> EnvClient::served_engine(bool serves) {
  if (!serves) {
    const std::string who = plain_rllib() ? "RLlib's own server" : "agent '" + server_agent() + "'";
    throw NotAgreed(address().str() + " (" + who + ") did not agree to served_actions: it does not compute "
                    "actions for its clients; use Inference::local");
  }
  if (!config_ || config_->observation_shape.empty()) {
    throw UnsupportedModel("served actions here take Box observations, and the runner did not describe one");
  }
  std::optional<ActionSpace> space;
  try {
    space = read_action_space(*config_->description.find("action_space"));
  } catch (const UnsupportedModel&) {
    // Not Discrete or Box: the actions are read as they come.
  }
  observation_size_ = product(config_->observation_shape);
  space_ = space;
  mode_ = Inference::served;
  return std::make_unique<ServedInference>(*shared_, config_->observation_shape, space, options_.num_envs,
                                           [this](const std::string& text) { warn(text); });
}

void EnvClient::check_envs(const char* call, const std::vector<uint32_t>& envs) const {
  for (size_t i = 0; i < envs.size(); ++i) {
    if (envs[i] >= options_.num_envs) {
      throw UsageError(std::string(call) + "(): env " + std::to_string(envs[i]) + " is not one of 0.." +
                       std::to_string(options_.num_envs - 1) + " (EnvClientOptions::num_envs)");
    }
    if (std::find(envs.begin(), envs.begin() + std::ptrdiff_t(i), envs[i]) != envs.begin() + std::ptrdiff_t(i)) {
      throw UsageError(std::string(call) + "(): env " + std::to_string(envs[i]) + " is named twice");
    }
  }
}

void EnvClient::check_rows(const char* call, const std::vector<uint32_t>& envs, Floats rows) const {
  check_envs(call, envs);
  if (envs.empty()) throw UsageError(std::string(call) + "(): no envs");
  if (rows.size() != envs.size() * observation_size_) {
    throw UsageError(std::string(call) + "(): " + std::to_string(rows.size()) + " floats for " +
                     std::to_string(envs.size()) + " env(s), but the runner's observations have " +
                     std::to_string(observation_size_) + " each (" + std::to_string(envs.size() * observation_size_) +
                     " in all)");
  }
}

void EnvClient::finish_episode(uint32_t env) {
  std::lock_guard<std::mutex> lock(counters_mutex_);
  ++episodes_;
  returns_.push_back(episode_return_[env]);
  if (returns_.size() > kReturnsKept) returns_.pop_front();
  takeovers_kept_.push_back(episode_takeovers_[env]);
  if (takeovers_kept_.size() > kReturnsKept) takeovers_kept_.pop_front();
  episode_takeovers_[env] = {0, 0};
  taking_over_[env] = false;
  episode_return_[env] = 0.0;
  last_obs_[env].clear();
}

void EnvClient::warn(const std::string& text) const {
  if (options_.connection.warn) {
    options_.connection.warn(text);
  } else {
    std::cerr << "rlinks: " << text << std::endl;
  }
}

}  // namespace rlinks
