// A simulator that trains with RLlib over RLlink, in C++: the template to copy.
//
// CartPole (gymnasium's CartPole-v1 dynamics, written out below) stands in for
// your simulator. Its loop calls two things of rlinks::EnvClient:
//   act(obs)   -> the action (the policy runs here, from the learner's
//                 weights; with --served-actions the learner computes it);
//   report(reward, next_obs, terminated, truncated) -> what came of it.
// EnvClient does the rest: it connects (to the learner's directory, which
// names a runner, or to a runner), records the episodes, sends them (on-policy:
// waits for the weights trained on them, when the runner's share is in),
// takes new weights, reconnects (--reliable) and closes. --envs N steps N
// CartPoles together (served: one ACT per tick). With --teacher a scripted
// controller takes over when the pole is about to fall: those steps go with
// take_over(obs, action) instead of act(obs), marked as taken over.
//
// Run a learner first (rlinks learner --config configs/ppo_cartpole.yaml),
// then one or more copies of this:
//   cartpole --address 127.0.0.1:5555
//   cartpole --address 127.0.0.1:5555 --served-actions --envs 8

#include <array>
#include <atomic>
#include <chrono>
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
#include "rlinks/env_client.hpp"
#include "rlinks/errors.hpp"

namespace {

constexpr const char* kUsage = R"(usage: cartpole [options]

CartPole-v1 training with an RLlib learner over RLlink.

  --address HOST:PORT    runner or directory to connect to (default 127.0.0.1:5556;
                         tls://HOST:PORT for TLS)
  --port PORT            shorthand for --address 127.0.0.1:PORT
  --max-steps N          stop after N env steps (whole ticks of --envs; default 100000)
  --seed S               seed of the envs and the action sampling
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
  --off-policy           send batches without waiting for new weights
  --envs N               CartPoles stepped together (default 1)
  --teacher              a scripted controller takes over when the pole is about to fall
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
  bool off_policy = false;
  bool teacher = false;
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
    } else if (flag == "--off-policy") {
      args.off_policy = true;
    } else if (flag == "--teacher") {
      args.teacher = true;
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
  return args;
}

rlinks::EnvClientOptions client_options(const Args& args, uint64_t seed) {
  rlinks::EnvClientOptions options;
  options.connection.timeout_s = args.timeout_s;
  options.connection.retry_attempts = args.retry_attempts;
  options.connection.reliable = args.reliable;
  options.connection.secret = rlinks::load_secret(args.secret_file);
  options.connection.tls = {args.ca_file, args.cert_file, args.key_file, ""};
  options.inference = args.served_actions ? rlinks::Inference::served : rlinks::Inference::automatic;
  if (args.off_policy) options.on_policy = false;
  options.num_envs = uint32_t(args.envs);
  options.seed = seed ^ 0x9e3779b97f4a7c15ull;
  // RLlib's own server describes itself only in a pickle: then these say what it runs.
  options.action_space = rlinks::ActionSpace::discrete(2);
  options.rollout_fragment_length = args.fragment_steps;
  options.fcnet_activation = args.activation;
  return options;
}

// The teacher: when the pole leans (or falls) past 0.1 rad, push the cart under it; else nothing (-1).
int64_t teacher_action(const float* obs) {
  const float lean = obs[2] + 0.1f * obs[3];
  return std::fabs(lean) > 0.1f ? int64_t(lean > 0) : -1;
}

// The actions for every env: the teacher's where it takes over (sent with take_over), the policy's elsewhere.
std::vector<rlinks::Action> act(rlinks::EnvClient& client, const std::vector<float>& obs, bool teacher) {
  const std::vector<uint32_t> all = client.all_envs();
  if (!teacher) return client.act(all, obs);
  std::vector<rlinks::Action> actions(all.size());
  std::vector<uint32_t> taught, left;
  std::vector<float> taught_obs, left_obs;
  std::vector<rlinks::Action> taught_actions;
  for (uint32_t env : all) {
    const float* row = obs.data() + 4 * env;
    const int64_t action = teacher_action(row);
    if (action < 0) {
      left.push_back(env);
      left_obs.insert(left_obs.end(), row, row + 4);
    } else {
      taught.push_back(env);
      taught_obs.insert(taught_obs.end(), row, row + 4);
      taught_actions.push_back(actions[env] = rlinks::Action::of_index(action));
    }
  }
  if (!taught.empty()) client.take_over(taught, taught_obs, taught_actions);
  if (!left.empty()) {
    const std::vector<rlinks::Action> chosen = client.act(left, left_obs);
    for (size_t i = 0; i < left.size(); ++i) actions[left[i]] = chosen[i];
  }
  return actions;
}

std::atomic<rlinks::EnvClient*> running_client{nullptr};

void request_stop(int) {
  if (rlinks::EnvClient* client = running_client.load()) client->stop();  // async-signal-safe
}

// The last 20 episodes' returns and the summary line the tests read.
struct Summary {
  uint64_t steps = 0;
  uint64_t episodes = 0;
  std::deque<double> returns;

  void episode_ended(double episode_return) {
    ++episodes;
    returns.push_back(episode_return);
    if (returns.size() > 20) returns.pop_front();
  }

  // `local_seconds`: stepping, inference and recording; no waiting for the learner.
  void print(const rlinks::EnvClientStats& stats, double local_seconds) const {
    const double mean = returns.empty() ? std::nan("")
                                        : std::accumulate(returns.begin(), returns.end(), 0.0) / double(returns.size());
    const rlinks::ClientStats& delivery = stats.delivery;
    std::printf("summary: steps=%llu episodes=%llu mean_return_last_20=%.1f weights_seq_no=%llu reconnects=%llu "
                "batches_resent=%llu steps_sent=%llu steps_acked=%llu local_steps_per_s=%.0f takeover_rate=%.3f\n",
                (unsigned long long)steps, (unsigned long long)episodes, mean, (unsigned long long)stats.weights_seq_no,
                (unsigned long long)delivery.reconnects, (unsigned long long)delivery.batches_resent,
                (unsigned long long)delivery.steps_sent, (unsigned long long)delivery.steps_acked,
                local_seconds > 0 ? double(steps) / local_seconds : 0.0, stats.takeover_rate);
    std::fflush(stdout);
  }
};

// Connects and trains until --max-steps, SIGTERM or the learner's end.
void train(const Args& args, Summary& summary) {
  const uint64_t seed = args.seed ? *args.seed : std::random_device{}();
  rlinks::EnvClient client(args.address, client_options(args, seed));
  running_client = &client;
  struct Forget {
    ~Forget() { running_client = nullptr; }
  } forget;
  std::signal(SIGTERM, request_stop);
  std::signal(SIGINT, request_stop);

  // Connecting reads the runner's setup, which must be CartPole's (RLlib's
  // own server doesn't say: nullopt), and picks the mode.
  client.connect();
  if (const std::optional<rlinks::RunnerConfig>& config = client.config()) {
    const std::optional<rlinks::ActionSpace> actions = client.action_space();
    if (config->observation_shape != std::vector<uint64_t>{4} || !actions || actions->str() != "Discrete(2)") {
      throw rlinks::UsageError("the learner is not set up for CartPole (Box(4) observations, Discrete(2) actions)");
    }
  }
  const bool served = client.mode() == rlinks::Inference::served;
  std::cerr << "cartpole: connected to " << client.address().str() << " ("
            << (client.plain_rllib() ? "plain RLlink" : client.server_agent()) << "); " << args.envs << " env(s), "
            << (served ? "actions served by the learner" : client.on_policy() ? "on-policy batches" : "off-policy batches")
            << std::endl;

  // The simulators, and what each did last. `obs` holds every env's observation, one row of 4 after another.
  const uint64_t n = args.envs;
  std::vector<CartPole> envs;
  std::vector<float> obs(4 * n);
  for (uint64_t i = 0; i < n; ++i) {
    envs.emplace_back(seed + i);
    const CartPole::Observation first = envs[i].reset();
    std::copy(first.begin(), first.end(), obs.begin() + std::ptrdiff_t(4 * i));
  }
  std::vector<double> reward(n), episode_return(n, 0.0);
  std::vector<bool> terminated(n), truncated(n);
  const std::vector<uint32_t> all = client.all_envs();
  if (args.teacher) std::cerr << "cartpole: the teacher takes over when the pole is about to fall" << std::endl;

  const auto started = std::chrono::steady_clock::now();
  const double waited_before = client.stats().wait_s;
  const rlinks::Ending ending = client.run([&] {
    while (summary.steps < args.max_steps) {
      const std::vector<rlinks::Action> actions = act(client, obs, args.teacher);
      for (uint64_t i = 0; i < n; ++i) {
        const CartPole::Step step = envs[i].step(actions[i].discrete());
        std::copy(step.observation.begin(), step.observation.end(), obs.begin() + std::ptrdiff_t(4 * i));
        reward[i] = step.reward;
        terminated[i] = step.terminated;
        truncated[i] = step.truncated;
        episode_return[i] += step.reward;
      }
      summary.steps += n;
      client.report(all, reward, obs, terminated, truncated);
      for (uint64_t i = 0; i < n; ++i) {
        if (!terminated[i] && !truncated[i]) continue;
        // That episode ended; the env's next act() starts the next one from its reset.
        summary.episode_ended(episode_return[i]);
        episode_return[i] = 0.0;
        const CartPole::Observation first = envs[i].reset();
        std::copy(first.begin(), first.end(), obs.begin() + std::ptrdiff_t(4 * i));
      }
    }
  });  // then closes: what is due is delivered and acknowledged first (bounded by --timeout)
  if (ending == rlinks::Ending::training_ended) std::cerr << "cartpole: the learner stopped; done" << std::endl;
  if (ending == rlinks::Ending::stopped) std::cerr << "cartpole: stopped" << std::endl;

  const rlinks::EnvClientStats stats = client.stats();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  summary.print(stats, elapsed - (stats.wait_s - waited_before));
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  Summary summary;
  try {
    train(args, summary);
    return 0;
  } catch (const rlinks::NotAgreed& error) {
    if (args.served_actions) {
      std::cerr << "cartpole: the learner does not serve actions: " << error.what() << "; run without --served-actions"
                << std::endl;
    } else {
      std::cerr << "cartpole: " << error.what() << std::endl;
    }
    summary.print({}, 0);
    return 3;
  } catch (const rlinks::ServerError& error) {
    std::cerr << "cartpole: the learner refused us: " << error.code() << ": " << error.text() << std::endl;
  } catch (const rlinks::ProtocolError& error) {
    std::cerr << "cartpole: protocol error (" << rlinks::to_string(error.code()) << "): " << error.what() << std::endl;
  } catch (const rlinks::Error& error) {
    std::cerr << "cartpole: " << error.what() << std::endl;
  }
  summary.print({}, 0);
  return 1;
}
