// A simulator that trains with RLlib over RLlink, in C++: the template to copy.
//
// CartPole (gymnasium's CartPole-v1 dynamics, written out below) stands in for
// your simulator. The loop does the four things a client has to do:
//   1. connect to a learner's runner (or to its directory, which names one);
//   2. run the policy locally, from the weights the runner sends;
//   3. record each step into episode chunks;
//   4. send the chunks, on-policy, and continue with the new weights.
//
// With --served-actions the runner runs the policy instead (PROTOCOL.md
// section 10.5): each tick, one ACT reports every env's observation and the
// reward of its last action, and the ACTIONS say what each env does next.
// No weights, no network, no episode recording here (run_served below).
//
// Run a learner first (rlinks learner --config configs/ppo_cartpole.yaml),
// then one or more copies of this:
//   cartpole --address 127.0.0.1:5555
//   cartpole --address 127.0.0.1:5555 --served-actions --envs 8

#include <array>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "rlinks/auth.hpp"
#include "rlinks/client.hpp"
#include "rlinks/episode_builder.hpp"
#include "rlinks/mlp.hpp"
#include "rlinks/sampling.hpp"

namespace {

constexpr const char* kUsage = R"(usage: cartpole [options]

CartPole-v1 training with an RLlib learner over RLlink.

  --address HOST:PORT    runner or directory to connect to (default 127.0.0.1:5556;
                         tls://HOST:PORT for TLS)
  --port PORT            shorthand for --address 127.0.0.1:PORT
  --max-steps N          stop after N env steps (default 100000)
  --seed S               seed of the env and the action sampling
  --reliable             reconnect after a dropped connection and resend unconfirmed batches
  --timeout SECONDS      longest wait for any one reply (default 120)
  --retry-attempts N     connection attempts before giving up (default 20)
  --fragment-steps N     steps per batch when the server doesn't say (plain RLlib; default 500)
  --activation NAME      hidden activation when the server doesn't say (default tanh)
  --secret-file PATH     shared secret for an authenticating learner (or set RLINKS_SECRET)
  --ca-file, --cert-file, --key-file PATH
                         TLS: CA to check the server with; client certificate and key
  --served-actions       the learner computes the actions (served_actions): send
                         observations, get actions; no weights or network here
  --envs N               served actions: CartPoles stepped together, one ACT per
                         tick (default 1)
)";

// gymnasium's CartPole-v1: the same constants, Euler integration, reward 1
// per step, termination at |x| > 2.4 or |theta| > 12 degrees, truncation
// (TimeLimit) at 500 steps, initial state uniform in [-0.05, 0.05).
class CartPole {
 public:
  using Observation = std::array<float, 4>;
  struct Step {
    Observation observation;
    double reward;
    bool terminated;
    bool truncated;
  };

  explicit CartPole(uint64_t seed) : rng_(seed) {}

  Observation reset() {
    std::uniform_real_distribution<double> uniform(-0.05, 0.05);
    for (double& value : state_) value = uniform(rng_);
    elapsed_steps_ = 0;
    return observation();
  }

  Step step(int64_t action) {
    auto& [x, x_dot, theta, theta_dot] = state_;
    const double force = action == 1 ? kForceMag : -kForceMag;
    const double cos_theta = std::cos(theta), sin_theta = std::sin(theta);
    const double temp = (force + kPoleMassLength * theta_dot * theta_dot * sin_theta) / kTotalMass;
    const double theta_acc = (kGravity * sin_theta - cos_theta * temp) /
                             (kLength * (4.0 / 3.0 - kMassPole * cos_theta * cos_theta / kTotalMass));
    const double x_acc = temp - kPoleMassLength * theta_acc * cos_theta / kTotalMass;
    x += kTau * x_dot;
    x_dot += kTau * x_acc;
    theta += kTau * theta_dot;
    theta_dot += kTau * theta_acc;
    ++elapsed_steps_;
    const bool terminated = x < -kXThreshold || x > kXThreshold || theta < -kThetaThreshold || theta > kThetaThreshold;
    return {observation(), 1.0, terminated, elapsed_steps_ >= kMaxEpisodeSteps};
  }

 private:
  static constexpr double kGravity = 9.8;
  static constexpr double kMassCart = 1.0;
  static constexpr double kMassPole = 0.1;
  static constexpr double kTotalMass = kMassCart + kMassPole;
  static constexpr double kLength = 0.5;  // half the pole's length
  static constexpr double kPoleMassLength = kMassPole * kLength;
  static constexpr double kForceMag = 10.0;
  static constexpr double kTau = 0.02;  // seconds between state updates
  static constexpr double kThetaThreshold = 12 * 2 * 3.14159265358979323846 / 360;
  static constexpr double kXThreshold = 2.4;
  static constexpr int kMaxEpisodeSteps = 500;

  Observation observation() const {
    return {float(state_[0]), float(state_[1]), float(state_[2]), float(state_[3])};
  }

  std::mt19937_64 rng_;
  std::array<double, 4> state_{};
  int elapsed_steps_ = 0;
};

struct Args {
  std::string address = "127.0.0.1:5556";
  uint64_t max_steps = 100000;
  std::optional<uint64_t> seed;
  bool reliable = false;
  bool served_actions = false;
  uint64_t envs = 1;
  double timeout_s = 120.0;
  int retry_attempts = 20;
  uint64_t fragment_steps = 500;
  std::string activation = "tanh";
  std::string secret_file, ca_file, cert_file, key_file;
};

[[noreturn]] void usage_error(const std::string& why) {
  std::cerr << "cartpole: " << why << "\n" << kUsage;
  std::exit(2);
}

uint64_t parse_count(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || text[0] == '-') usage_error(flag + " needs a non-negative integer, got '" + text + "'");
  return value;
}

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::optional<std::string> inline_value;
    if (const size_t equals = flag.find('='); flag.rfind("--", 0) == 0 && equals != std::string::npos) {
      inline_value = flag.substr(equals + 1);
      flag = flag.substr(0, equals);
    }
    const auto value = [&]() -> std::string {
      if (inline_value) return *inline_value;
      if (i + 1 >= argc) usage_error(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else if (flag == "--address") {
      args.address = value();
    } else if (flag == "--port") {
      args.address = "127.0.0.1:" + std::to_string(parse_count(flag, value()));
    } else if (flag == "--max-steps") {
      args.max_steps = parse_count(flag, value());
    } else if (flag == "--seed") {
      args.seed = parse_count(flag, value());
    } else if (flag == "--reliable") {
      args.reliable = true;
    } else if (flag == "--served-actions") {
      args.served_actions = true;
    } else if (flag == "--envs") {
      args.envs = parse_count(flag, value());
    } else if (flag == "--timeout") {
      args.timeout_s = double(parse_count(flag, value()));
    } else if (flag == "--retry-attempts") {
      args.retry_attempts = int(parse_count(flag, value()));
    } else if (flag == "--fragment-steps") {
      args.fragment_steps = parse_count(flag, value());
    } else if (flag == "--activation") {
      args.activation = value();
    } else if (flag == "--secret-file") {
      args.secret_file = value();
    } else if (flag == "--ca-file") {
      args.ca_file = value();
    } else if (flag == "--cert-file") {
      args.cert_file = value();
    } else if (flag == "--key-file") {
      args.key_file = value();
    } else {
      usage_error("unknown option '" + flag + "'");
    }
  }
  // An env that ends its episode takes two rows of one ACT (the end, then the start of the next).
  if (args.envs < 1 || args.envs > rlinks::kMaxActRows / 2) {
    usage_error("--envs needs 1 to " + std::to_string(rlinks::kMaxActRows / 2) + " envs");
  }
  if (args.envs > 1 && !args.served_actions) usage_error("--envs N > 1 needs --served-actions");
  return args;
}

volatile std::sig_atomic_t stop_requested = 0;

void request_stop(int) { stop_requested = 1; }

// The policy: RLlib's default MLP run from the latest weights, skipping stale ones.
class Policy {
 public:
  Policy(std::string activation, std::string head_activation, size_t num_actions)
      : activation_(std::move(activation)), head_activation_(std::move(head_activation)), num_actions_(num_actions) {}

  void apply(const rlinks::WeightsUpdate& update) {
    const uint64_t seq_no = update.weights.seq_no;
    if (network_ && seq_no != 0 && seq_no < seq_no_) return;  // older than what we run (section 8)
    network_ = rlinks::Network::from_weights(update.weights, activation_, head_activation_, num_actions_);
    seq_no_ = seq_no;
  }

  rlinks::Network& network() { return *network_; }
  uint64_t seq_no() const { return seq_no_; }

 private:
  std::string activation_, head_activation_;
  size_t num_actions_;
  std::optional<rlinks::Network> network_;
  uint64_t seq_no_ = 0;
};

struct Summary {
  uint64_t steps = 0;
  uint64_t episodes = 0;
  std::deque<double> returns;  // the last 20 episodes'
  uint64_t weights_seq_no = 0;
  double local_seconds = 0.0;  // stepping, inference and recording; no waiting for the learner

  void print(const rlinks::ClientStats& stats) const {
    const double mean = returns.empty() ? std::nan("")
                                        : std::accumulate(returns.begin(), returns.end(), 0.0) / double(returns.size());
    std::printf("summary: steps=%llu episodes=%llu mean_return_last_20=%.1f weights_seq_no=%llu reconnects=%llu "
                "batches_resent=%llu steps_sent=%llu steps_acked=%llu local_steps_per_s=%.0f\n",
                (unsigned long long)steps, (unsigned long long)episodes, mean, (unsigned long long)weights_seq_no,
                (unsigned long long)stats.reconnects, (unsigned long long)stats.batches_resent,
                (unsigned long long)stats.steps_sent, (unsigned long long)stats.steps_acked,
                local_seconds > 0 ? double(steps) / local_seconds : 0.0);
    std::fflush(stdout);
  }
};

void run(const Args& args, rlinks::Client& client, Summary& summary) {
  const uint64_t seed = args.seed ? *args.seed : std::random_device{}();
  CartPole env(seed);
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);

  // What the runner expects from us. rlinks' runner describes it in plain
  // msgpack; RLlib's own server only offers a pickle: then the command line says.
  uint64_t fragment = args.fragment_steps;
  std::string activation = args.activation, head_activation = "relu";
  bool on_policy = true;
  if (const std::optional<rlinks::RunnerConfig> config = client.get_config()) {
    if (config->discrete_actions.value_or(0) != 2 || config->observation_shape != std::vector<uint64_t>{4}) {
      throw rlinks::UsageError("the learner is not set up for CartPole (Box(4) observations, Discrete(2) actions)");
    }
    fragment = config->rollout_fragment_length;
    activation = config->fcnet_activation;
    head_activation = config->head_fcnet_activation;
    on_policy = config->on_policy;
  }

  // The first weights, and how many steps the runner wants from us.
  Policy policy(activation, head_activation, 2);
  rlinks::WeightsUpdate update = client.get_state();
  policy.apply(update);
  uint64_t want = update.want_steps.value_or(fragment);
  std::cerr << "cartpole: connected to " << client.address().str() << " ("
            << (client.plain_rllib() ? "plain RLlink" : client.server_agent()) << "); sending "
            << (on_policy ? "on-policy" : "off-policy") << " batches" << std::endl;

  rlinks::EpisodeBuilder builder(4, {{"action_dist_inputs", 2}, {"action_logp", 0}});
  CartPole::Observation observation = env.reset();
  builder.reset(observation.data());
  double episode_return = 0.0;
  auto local_start = rlinks::Clock::now();
  const auto add_local_time = [&] {
    summary.local_seconds += std::chrono::duration<double>(rlinks::Clock::now() - local_start).count();
  };

  while (summary.steps < args.max_steps && !stop_requested) {
    // want == 0: the runner has all it needs for this update; ask again with
    // nothing, and the answer comes with the next weights.
    if (want > 0) {
      const std::vector<float>& logits = policy.network().logits(observation.data());
      const rlinks::SampledAction sampled = rlinks::sample_categorical(logits.data(), logits.size(), rng);
      const CartPole::Step step = env.step(sampled.action);
      builder.step(sampled.action, step.reward, step.observation.data(), step.terminated, step.truncated,
                   {logits.data(), &sampled.logp});
      observation = step.observation;
      ++summary.steps;
      episode_return += step.reward;
      if (step.terminated || step.truncated) {
        summary.returns.push_back(episode_return);
        if (summary.returns.size() > 20) summary.returns.pop_front();
        ++summary.episodes;
        episode_return = 0.0;
        observation = env.reset();
        builder.reset(observation.data());
      }
      if (builder.num_steps() < want) continue;
    }
    std::vector<rlinks::Value> chunks = builder.take_chunks();
    add_local_time();
    if (on_policy) {
      update = client.send_episodes_and_get_state(std::move(chunks));
    } else {
      client.send_episodes(std::move(chunks));
      update = client.get_state();
    }
    policy.apply(update);
    summary.weights_seq_no = policy.seq_no();
    want = update.want_steps.value_or(fragment);
    local_start = rlinks::Clock::now();
  }
  add_local_time();
  summary.weights_seq_no = policy.seq_no();
  // The runner acknowledges a batch when RLlib takes it, which can be after
  // the weights it answered with (steps beyond an update's share, a batch
  // resent after a reconnect): wait for those ACKs (bounded by --timeout)
  // rather than close with batches the runner has but we never heard of.
  // Told to stop, an on-policy run stops now, as before.
  if (!on_policy || !stop_requested) client.flush();
}

// The learner must be set up for CartPole; rlinks' runner says how (RLlib's
// own server serves no actions, so it never gets this far).
void check_cartpole_config(rlinks::Client& client) {
  if (const std::optional<rlinks::RunnerConfig> config = client.get_config()) {
    if (config->discrete_actions.value_or(0) != 2 || config->observation_shape != std::vector<uint64_t>{4}) {
      throw rlinks::UsageError("the learner is not set up for CartPole (Box(4) observations, Discrete(2) actions)");
    }
  }
}

// Served actions (section 10.5): N CartPoles, all stepped with one ACT per tick.
//
// Each env's row reports where its last action led: the observation now and
// the reward. An episode that ended gets its ending row (terminated or
// truncated, with the final observation; no action is wanted for it) and,
// in the same ACT, a start row with the first observation after the reset.
// The ACTIONS hold one action per row that wants one, in row order.
void run_served(const Args& args, rlinks::Client& client, Summary& summary) {
  const uint64_t seed = args.seed ? *args.seed : std::random_device{}();
  client.connect();
  if (!client.agreed(rlinks::extension::served_actions)) {
    throw rlinks::NotAgreed(client.address().str() + " did not agree to served_actions (" +
                            (client.plain_rllib() ? std::string("plain RLlink") : client.server_agent()) + ")");
  }
  check_cartpole_config(client);
  std::cerr << "cartpole: connected to " << client.address().str() << " (" << client.server_agent() << "); "
            << args.envs << " env(s), actions served by the learner" << std::endl;

  // What each env did since its last row: the result of the action it took.
  struct Env {
    CartPole cartpole;
    CartPole::Observation observation{};
    std::optional<CartPole::Step> result;  // the last action's, not yet reported
    double episode_return = 0.0;
  };
  std::vector<Env> envs;
  rlinks::ActBuilder rows(4);
  for (uint64_t i = 0; i < args.envs; ++i) {
    envs.push_back(Env{CartPole(seed + i), {}, std::nullopt, 0.0});
    envs[i].observation = envs[i].cartpole.reset();
    rows.start(uint32_t(i), envs[i].observation.data());
  }
  auto local_start = rlinks::Clock::now();
  const auto add_local_time = [&] {
    summary.local_seconds += std::chrono::duration<double>(rlinks::Clock::now() - local_start).count();
  };
  const auto end_episode = [&](Env& env) {
    summary.returns.push_back(env.episode_return);
    if (summary.returns.size() > 20) summary.returns.pop_front();
    ++summary.episodes;
    env.episode_return = 0.0;
  };

  while (summary.steps < args.max_steps && !stop_requested) {
    // Every env that acted reports what came of it.
    for (uint64_t i = 0; i < args.envs; ++i) {
      Env& env = envs[i];
      if (!env.result) continue;
      const CartPole::Step step = *env.result;
      env.result.reset();
      rows.step(uint32_t(i), step.observation.data(), step.reward, step.terminated, step.truncated);
      if (step.terminated || step.truncated) {
        end_episode(env);
        env.observation = env.cartpole.reset();
        rows.start(uint32_t(i), env.observation.data());
      }
    }
    add_local_time();
    const rlinks::ActionsReply reply = client.act(rows.take());
    local_start = rlinks::Clock::now();
    summary.weights_seq_no = reply.weights_seq_no;
    if (!reply.interrupted.empty()) {
      // The connection dropped and the runner closed these envs' episodes; the
      // library started them again from where the envs are (see Client::act).
      std::cerr << "cartpole: " << reply.interrupted.size()
                << " episode(s) interrupted by the lost connection; the runner records them from here on" << std::endl;
    }
    for (size_t j = 0; j < reply.size() && summary.steps < args.max_steps; ++j) {
      const int64_t action = reply.discrete(j);
      if (action != 0 && action != 1) {
        throw rlinks::ProtocolError(rlinks::ErrorCode::invalid_message,
                                    "ACTIONS: action " + std::to_string(action) + " for env " +
                                        std::to_string(reply.env[j]) + " is not in CartPole's Discrete(2)");
      }
      Env& env = envs.at(reply.env[j]);
      env.result = env.cartpole.step(action);
      env.observation = env.result->observation;
      env.episode_return += env.result->reward;
      ++summary.steps;
    }
  }
  add_local_time();
  // Done: report the last actions' results and end the open episodes there
  // (truncated: the run stops), so that the runner keeps those steps too.
  for (uint64_t i = 0; i < args.envs; ++i) {
    const std::optional<CartPole::Step>& step = envs[i].result;
    if (!step) continue;
    rows.step(uint32_t(i), step->observation.data(), step->reward, step->terminated, !step->terminated);
    if (step->terminated || step->truncated) end_episode(envs[i]);
  }
  if (!rows.empty()) client.act(rows.take());
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  std::signal(SIGTERM, request_stop);
  std::signal(SIGINT, request_stop);

  Summary summary;
  int status = 0;
  try {
    rlinks::ClientOptions options;
    options.timeout_s = args.timeout_s;
    options.retry_attempts = args.retry_attempts;
    options.reliable = args.reliable;
    options.secret = rlinks::load_secret(args.secret_file);
    options.tls = {args.ca_file, args.cert_file, args.key_file, ""};
    if (args.served_actions) options.extensions.push_back(std::string(rlinks::extension::served_actions));
    rlinks::Client client(args.address, options);
    try {
      if (args.served_actions) {
        run_served(args, client, summary);
      } else {
        run(args, client, summary);
      }
    } catch (const rlinks::ServerError& error) {
      if (error.code() != "shutting_down") throw;
      std::cerr << "cartpole: the learner stopped; done" << std::endl;  // the normal end of a training run
    }
    summary.print(client.stats());
    client.close();
    return 0;
  } catch (const rlinks::NotAgreed& error) {
    std::cerr << "cartpole: the learner does not serve actions: " << error.what()
              << "; run without --served-actions" << std::endl;
    summary.print(rlinks::ClientStats{});
    return 3;
  } catch (const rlinks::ServerError& error) {
    std::cerr << "cartpole: the learner refused us: " << error.code() << ": " << error.text() << std::endl;
    status = 1;
  } catch (const rlinks::ProtocolError& error) {
    std::cerr << "cartpole: protocol error (" << rlinks::to_string(error.code()) << "): " << error.what() << std::endl;
    status = 1;
  } catch (const rlinks::Error& error) {
    std::cerr << "cartpole: " << error.what() << std::endl;
    status = 1;
  }
  summary.print(rlinks::ClientStats{});
  return status;
}
