// Short EnvClient scenarios for tests/test_cpp_client.py, run against its scripted runners (CartPole's
// spaces): the caller's mistakes and what each error says, and explicit episode starts and ends.
//
// Usage: env_client_scenarios ADDRESS misuse|episodes
// Prints one "error: MESSAGE" line per refused call, then "done"; exits 1 on an unexpected outcome.

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

// Runs a call that must throw UsageError, and prints what it says.
void refused(const std::function<void()>& call) {
  try {
    call();
    std::cout << "accepted (expected a UsageError)" << std::endl;
    all_refused = false;
  } catch (const rlinks::UsageError& error) {
    std::cout << "error: " << error.what() << std::endl;
  }
}

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

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: env_client_scenarios ADDRESS misuse|episodes\n";
    return 2;
  }
  const std::string scenario = argv[2];
  rlinks::EnvClientOptions options;
  options.num_envs = 2;
  options.connection.timeout_s = 10;
  options.connection.reliable = false;
  try {
    rlinks::EnvClient client(argv[1], options);
    if (scenario == "misuse") {
      misuse(client);
    } else if (scenario == "episodes") {
      episodes(client);
    } else {
      std::cerr << "unknown scenario " << scenario << "\n";
      return 2;
    }
    client.close();
  } catch (const rlinks::Error& error) {
    std::cout << "failed: " << error.what() << std::endl;
    return 1;
  }
  std::cout << "done" << std::endl;
  return all_refused ? 0 : 1;
}
