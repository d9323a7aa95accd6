// Continuous actions: a Pendulum that trains with an RLlib learner over RLlink, in C++.
//
// The same loop as cartpole.cpp, for a Box action: act() gives the torque in
// the env's bounds (the policy's Gaussian sample unsquashed from [-1, 1] to
// [-2, 2], as RLlib's normalize_actions does); EnvClient records the sample
// itself, which is what RLlib trains on. With --teacher a scripted controller
// brakes when the pendulum swings up too fast: take_over(obs, action) sends its
// torque, marked as taken over (recorded squashed back into [-1, 1]).
//
//   rlinks learner --config configs/ppo_pendulum.yaml     # then:
//   pendulum --address 127.0.0.1:5565
//
// Options: --address HOST:PORT, --max-steps N, --seed S, --served-actions, --teacher, --timeout SECONDS.

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <random>
#include <string>

#include "rlinks/env_client.hpp"
#include "rlinks/errors.hpp"

namespace {

// gymnasium's Pendulum-v1: a pole swung up by a torque in [-2, 2]; 200 steps an episode.
class Pendulum {
 public:
  using Observation = std::array<float, 3>;  // cos(theta), sin(theta), theta_dot

  explicit Pendulum(uint64_t seed) : rng_(seed) {}

  Observation reset() {
    theta_ = std::uniform_real_distribution<double>(-kPi, kPi)(rng_);
    theta_dot_ = std::uniform_real_distribution<double>(-1.0, 1.0)(rng_);
    steps_ = 0;
    return observation();
  }

  // The reward of applying `torque`; the observation is then observation().
  double step(float torque) {
    const double u = std::clamp(double(torque), -kMaxTorque, kMaxTorque);
    const double angle = std::remainder(theta_, 2 * kPi);  // in [-pi, pi]
    const double cost = angle * angle + 0.1 * theta_dot_ * theta_dot_ + 0.001 * u * u;
    theta_dot_ = std::clamp(theta_dot_ + (3 * kGravity / 2 * std::sin(theta_) + 3.0 * u) * kDt, -kMaxSpeed, kMaxSpeed);
    theta_ += theta_dot_ * kDt;
    ++steps_;
    return -cost;
  }

  Observation observation() const { return {float(std::cos(theta_)), float(std::sin(theta_)), float(theta_dot_)}; }
  bool truncated() const { return steps_ >= 200; }

 private:
  static constexpr double kPi = 3.14159265358979323846;
  static constexpr double kMaxTorque = 2.0, kMaxSpeed = 8.0, kDt = 0.05, kGravity = 10.0;

  std::mt19937_64 rng_;
  double theta_ = 0.0, theta_dot_ = 0.0;
  int steps_ = 0;
};

// The teacher: near the top (cos > 0.8) and too fast (|theta_dot| > 2), a PD torque that brakes; else none.
std::optional<float> teacher_torque(const Pendulum::Observation& obs) {
  if (!(obs[0] > 0.8f && std::fabs(obs[2]) > 2.0f)) return std::nullopt;
  return float(std::clamp(-10.0 * std::atan2(double(obs[1]), double(obs[0])) - double(obs[2]), -2.0, 2.0));
}

std::atomic<rlinks::EnvClient*> running_client{nullptr};

void request_stop(int) {
  if (rlinks::EnvClient* client = running_client.load()) client->stop();
}

}  // namespace

int main(int argc, char** argv) {
  std::string address = "127.0.0.1:5565";
  uint64_t max_steps = 100000, seed = std::random_device{}();
  bool teacher = false;
  rlinks::EnvClientOptions options;
  options.connection.reliable = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--served-actions") {
      options.inference = rlinks::Inference::served;
      continue;
    }
    if (flag == "--teacher") {
      teacher = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::cerr << "pendulum: " << flag << " needs a value (see the top of examples/pendulum.cpp)\n";
      return 2;
    }
    const std::string value = argv[++i];
    if (flag == "--address") {
      address = value;
    } else if (flag == "--max-steps") {
      max_steps = std::strtoull(value.c_str(), nullptr, 10);
    } else if (flag == "--seed") {
      seed = std::strtoull(value.c_str(), nullptr, 10);
    } else if (flag == "--timeout") {
      options.connection.timeout_s = std::strtod(value.c_str(), nullptr);
    } else {
      std::cerr << "pendulum: unknown option " << flag << " (see the top of examples/pendulum.cpp)\n";
      return 2;
    }
  }
  options.seed = seed;

  uint64_t steps = 0, episodes = 0;
  double episode_return = 0.0, last_return = std::nan("");
  try {
    rlinks::EnvClient client(address, options);
    running_client = &client;
    struct Forget {
      ~Forget() { running_client = nullptr; }
    } forget;
    std::signal(SIGTERM, request_stop);
    client.connect();
    std::cerr << "pendulum: connected to " << client.address().str() << "; actions in "
              << (client.action_space() ? client.action_space()->str() : "the runner's space") << ", "
              << rlinks::to_string(client.mode()) << std::endl;

    Pendulum env(seed);
    Pendulum::Observation obs = env.reset();
    const rlinks::Ending ending = client.run([&] {
      while (steps < max_steps) {
        const std::optional<float> torque = teacher ? teacher_torque(obs) : std::nullopt;
        float applied;
        if (torque) {
          client.take_over(obs, rlinks::Action::of_box({*torque}));
          applied = *torque;
        } else {
          applied = client.act(obs).box()[0];
        }
        const double reward = env.step(applied);
        obs = env.observation();
        ++steps;
        episode_return += reward;
        client.report(reward, obs, false, env.truncated());
        if (env.truncated()) {
          ++episodes;
          last_return = episode_return;
          episode_return = 0.0;
          obs = env.reset();
        }
      }
    });
    if (ending == rlinks::Ending::training_ended) std::cerr << "pendulum: the learner stopped; done" << std::endl;
    if (ending == rlinks::Ending::stopped) std::cerr << "pendulum: stopped" << std::endl;
    std::printf("summary: steps=%llu episodes=%llu last_return=%.1f weights_seq_no=%llu takeover_rate=%.3f\n",
                (unsigned long long)steps, (unsigned long long)episodes, last_return,
                (unsigned long long)client.stats().weights_seq_no, client.stats().takeover_rate);
    return 0;
  } catch (const rlinks::Error& error) {
    std::cerr << "pendulum: " << error.what() << std::endl;
    return 1;
  }
}
