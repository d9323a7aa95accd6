// Short EnvClient scenarios for tests/test_cpp_client.py, run against its scripted runners (CartPole's
// spaces but for taken_box): the caller's mistakes and what each error says, explicit episode starts and
// ends, actions the simulator takes itself (log_action, take_over) and episodes not trained on.
//
// Usage: env_client_scenarios ADDRESS misuse|episodes|taken|taken_box|served_only [served]
// Prints one "error: MESSAGE" line per refused call, then "done"; exits 1 on an unexpected outcome, 3
// (after a "not agreed: MESSAGE" line) when the runner did not agree to what a call needs.

#include <cmath>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "rlinks/env_client.hpp"
#include "rlinks/errors.hpp"

namespace {

const std::vector<float> kObsA{0.01f, 0.02f, 0.03f, 0.04f}, kObsB{0.1f, 0.2f, 0.3f, 0.4f}, kObsC{-0.1f, 0.0f, 0.1f, 0.0f};

bool all_refused = true;

// Runs a call that must throw `Refusal`, and prints "LABEL: MESSAGE".
template <class Refusal>
void expect(const char* label, const std::function<void()>& call) {
  try {
    call();
    std::cout << "accepted (expected " << label << ")" << std::endl;
    all_refused = false;
  } catch (const Refusal& error) {
    std::cout << label << ": " << error.what() << std::endl;
  }
}

void refused(const std::function<void()>& call) { expect<rlinks::UsageError>("error", call); }
void not_agreed(const std::function<void()>& call) { expect<rlinks::NotAgreed>("not agreed", call); }

void misuse(rlinks::EnvClient& client) {
  refused([&] { client.act(kObsA); });  // one-env call with two envs
  client.act(0, kObsA);
  refused([&] { client.act(0, kObsA); });                     // acted, not reported
  refused([&] { client.report(1, 1.0, kObsB); });             // reported, never acted
  refused([&] { client.report(0, std::nan(""), kObsB); });    // a reward that is not a number
  refused([&] { client.report(0, 1.0, std::vector<float>{0, 1, 2}); });  // 3 floats for 4
  client.report(0, 1.0, kObsB);
  refused([&] { client.act(0, kObsC); });         // not the observation just reported
  refused([&] { client.act(5, kObsB); });         // no such env
  refused([&] { client.act({1, 1}, std::vector<float>(8, 0.0f)); });  // one env twice
  refused([&] { client.act({0, 1}, kObsB); });    // one row for two envs
  client.act(0, kObsB);                           // goes on where it was
}

void episodes(rlinks::EnvClient& client) {
  // Env 0: started explicitly, one step, then cut where it stands (truncated).
  client.start_episode(0, kObsA);
  client.act(0, kObsA);
  client.report(0, 1.0, kObsB);
  client.end_episode(0);
  // Env 1: started by its first act(), ended by its second report (terminated).
  client.act(1, kObsA);
  client.report(1, 0.5, kObsB);
  client.act(1, kObsB);
  client.report(1, 0.5, kObsC, true);
  // Env 0 again from a new start, until the runner's share is complete and sent.
  std::vector<float> obs = kObsC;
  for (int step = 0; client.stats().delivery.batches_sent == 0; ++step) {
    client.act(0, obs);
    obs[0] = 0.001f * float(step);
    client.report(0, 1.0, obs);
  }
  const rlinks::EnvClientStats stats = client.stats();
  std::cout << "episodes=" << stats.episodes << " mean_return=" << stats.mean_return << std::endl;
}

// Served, by a runner that records only the actions it computes: each call that needs more is refused,
// changing nothing: the client goes on with the policy's actions.
void served_only(rlinks::EnvClient& client) {
  using rlinks::Action;
  not_agreed([&] { client.start_episode(1, kObsA, false); });
  not_agreed([&] { client.log_action(0, kObsA, Action::of_index(1)); });
  not_agreed([&] { client.take_over(0, kObsA, Action::of_index(1)); });
  client.act({0, 1}, std::vector<float>(8, 0.0f));
  client.report({0, 1}, {1.0, 1.0}, std::vector<float>(8, 0.5f), {false, false}, {false, false});
}

// Env 1 plays an episode that is never trained on; env 0 logs an action of its own, takes over once and
// lets the policy act, ending its episode (1 of 3 steps taken over), then goes on with the policy until the
// runner's share is sent (local) or for 10 more steps (served).
void taken(rlinks::EnvClient& client) {
  using rlinks::Action;
  client.start_episode(1, kObsA, false);
  client.act(1, kObsA);
  client.report(1, 1.0, kObsB);
  client.act(1, kObsB);
  client.report(1, 1.0, kObsC, true);
  client.log_action(0, kObsA, Action::of_index(1));
  client.report(0, 0.5, kObsB);
  client.take_over(0, kObsB, Action::of_index(0));
  client.report(0, 0.5, kObsC);
  refused([&] { client.log_action(0, kObsC, Action::of_index(2)); });         // not an action of Discrete(2)
  refused([&] { client.log_action(0, kObsC, Action::of_box({0.5f})); });      // a Box action for a Discrete space
  refused([&] { client.log_action(std::vector<uint32_t>{0}, kObsC, std::vector<rlinks::Action>{}); });  // none
  client.act(0, kObsC);
  client.report(0, 0.5, kObsA, true);
  const bool local = client.mode() == rlinks::Inference::local;
  std::vector<float> obs = kObsB;
  for (int step = 0; local ? client.stats().delivery.batches_sent == 0 : step < 10; ++step) {
    client.act(0, obs);
    obs[0] = 0.001f * float(step);
    client.report(0, 1.0, obs);
  }
  const rlinks::EnvClientStats stats = client.stats();
  std::cout << "episodes=" << stats.episodes << " takeover_steps=" << stats.takeover_steps
            << " takeover_rate=" << stats.takeover_rate << std::endl;
}

// Against a runner with a Box(-2, 2, (1,)) action space and 3-number observations: env 0's simulator
// takes every first and second action of three itself (1.5, and 3.0, past the bound), the policy the third;
// env 1 plays an episode that is never trained on. Local: until the runner's share is sent; served: until
// the learner ends the run.
void taken_box(rlinks::EnvClient& client) {
  const bool local = client.mode() == rlinks::Inference::local;
  std::vector<float> obs{1.0f, 0.0f, 0.5f}, other{0.0f, 1.0f, 0.0f};
  client.run([&] {
    client.start_episode(1, other, false);
    for (int step = 0; local ? client.stats().delivery.batches_sent == 0 : step < 100000; ++step) {
      if (step % 3 == 2) {
        client.act(0, obs);
      } else {
        client.log_action(0, obs, rlinks::Action::of_box({step % 3 == 0 ? 1.5f : 3.0f}));
      }
      client.act(1, other);
      obs[2] += 0.01f;
      client.report(0, -1.0, obs);
      client.report(1, 0.0, other);
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && !(argc == 4 && std::string(argv[3]) == "served")) {
    std::cerr << "usage: env_client_scenarios ADDRESS misuse|episodes|taken|taken_box|served_only [served]\n";
    return 2;
  }
  const std::string scenario = argv[2];
  rlinks::EnvClientOptions options;
  options.num_envs = 2;
  options.connection.timeout_s = 10;
  options.connection.reliable = false;
  options.inference = argc == 4 ? rlinks::Inference::served : rlinks::Inference::local;
  options.seed = 3;
  try {
    rlinks::EnvClient client(argv[1], options);
    if (scenario == "misuse") {
      misuse(client);
    } else if (scenario == "episodes") {
      episodes(client);
    } else if (scenario == "taken") {
      taken(client);
    } else if (scenario == "served_only") {
      served_only(client);
    } else if (scenario == "taken_box") {
      taken_box(client);
    } else {
      std::cerr << "unknown scenario " << scenario << "\n";
      return 2;
    }
    client.close();
  } catch (const rlinks::NotAgreed& error) {
    std::cout << "not agreed: " << error.what() << std::endl;
    return 3;
  } catch (const rlinks::Error& error) {
    std::cout << "failed: " << error.what() << std::endl;
    return 1;
  }
  std::cout << "done" << std::endl;
  return all_refused ? 0 : 1;
}
