// What a simulator's loop calls to train with an RLlib learner: act, report, and the rest is done for you.
//
// The C++ side of rlinks_rllib.client.EnvClient (docs/SIMULATOR.md), with the
// same calls and meaning:
//
//   rlinks::EnvClient client("127.0.0.1:5555");
//   auto obs = sim.reset();
//   client.run([&] {
//     while (true) {
//       const rlinks::Action action = client.act(obs);        // local: runs the policy; served: asks the runner
//       const auto step = sim.step(action.discrete());        // or action.box() for a Box
//       client.report(step.reward, step.obs, step.terminated, step.truncated);
//       obs = step.terminated || step.truncated ? sim.reset() : step.obs;
//     }
//   });  // returns when the learner ends the run or stop() was called
//
// One object per connection. It owns the mode (the policy run here, or the
// runner computing the actions), the episode recording, the weights,
// sending, pacing, reconnects and shutdown.
#pragma once

#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rlinks/action_space.hpp"
#include "rlinks/client.hpp"
#include "rlinks/runner_config.hpp"

namespace rlinks {

class Engine;
class SharedClient;

// Where the actions come from: "automatic" runs the policy here when this
// client can run the runner's module (RLlib's default MLP on a vector
// observation, a Discrete or Box action space) and asks the runner otherwise.
enum class Inference { automatic, local, served };

// "automatic", "local", "served".
const char* to_string(Inference inference);

struct EnvClientOptions {
  EnvClientOptions();  // connection: reliable, timeout_s 120

  // Timeouts, retries, reliable reconnects (on by default here), secret, TLS,
  // where warnings go. Its `stop` is replaced by the client's own.
  ClientOptions connection;
  Inference inference = Inference::automatic;
  uint32_t num_envs = 1;          // env ids 0..num_envs-1
  std::optional<bool> on_policy;  // nullopt: as the runner's algorithm says (PPO yes, APPO no)
  bool explore = true;            // local: sample (false: the greedy action, logp 0)
  std::optional<uint64_t> seed;   // local: seeds the sampling
  double weights_every_s = 1.0;   // off-policy: least seconds between two weight fetches
  size_t send_queue_batches = 4;  // off-policy: batches waiting for the sender thread, at most
  // How a Box action from the local policy becomes the one the env applies
  // (RLlib's env_runners(normalize_actions=..., clip_actions=...)).
  bool normalize_actions = true;
  bool clip_actions = false;
  // Only for RLlib's own server, which describes itself only as a pickle
  // (never read here): the action space, the steps per batch, the activation.
  std::optional<ActionSpace> action_space;
  uint64_t rollout_fragment_length = 500;
  std::string fcnet_activation = "tanh";
};

// A view of floats the caller owns: one observation, or one row per env.
class Floats {
 public:
  Floats(const float* data, size_t size) : data_(data), size_(size) {}
  Floats(const std::vector<float>& values) : data_(values.data()), size_(values.size()) {}  // NOLINT: implicit
  template <size_t N>
  Floats(const std::array<float, N>& values) : data_(values.data()), size_(N) {}  // NOLINT: implicit
  const float* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const float* data_;
  size_t size_;
};

// A snapshot of what the loop did and what the connection delivered.
struct EnvClientStats {
  uint64_t steps = 0;            // outcomes reported (env steps)
  uint64_t episodes = 0;         // episodes ended (by a report or end_episode())
  double mean_return = NAN;      // of the last 100 episodes; NaN before the first
  uint64_t weights_seq_no = 0;   // the weights the last actions came from
  double wait_s = 0.0;           // seconds the loop's calls spent talking to the runner (on-policy: the training step too)
  ClientStats delivery;          // batches sent and confirmed, reconnects, ACTs
  uint64_t takeover_steps = 0;   // steps reported after take_over() (a person or a script acted)
  double takeover_rate = NAN;    // of the steps of the last 100 episodes, the part taken over; NaN before the first
};

// How run() ended.
enum class Ending { finished, training_ended, stopped };

// Errors, from any call that talks to the runner: TrainingEnded (the learner
// ended the run: the normal end), ClientClosed (after stop() or close()),
// ConnectFailed, ConnectionLost, Timeout, ServerError, ProtocolError,
// NotAgreed (inference served and a runner that does not serve actions),
// UnsupportedModel (inference local and a module this client can't run; the
// message says why), TlsFailed, NotAvailable; UsageError for calls out of
// order or of the wrong size (the message says what to change). Not
// thread-safe but for stop() and stats(): one thread runs the loop.
class EnvClient {
 public:
  // Throws UsageError for bad options (and as Client's constructor). Connects on the first call.
  explicit EnvClient(std::string_view address, EnvClientOptions options = {});
  ~EnvClient();  // closes without flushing
  EnvClient(const EnvClient&) = delete;
  EnvClient& operator=(const EnvClient&) = delete;

  // Connects, reads the runner's config and weights and picks the mode; other calls do it when needed.
  void connect();

  // Runs `loop` (the simulator's loop, calling act() and report()) and
  // closes: with a flush when it returned, without when it threw. Returns
  // quietly when the learner ended the run (TrainingEnded) or stop() was
  // called (ClientClosed); anything else propagates, the client closed first.
  Ending run(const std::function<void()>& loop);

  // The action for one env's observation (num_envs 1; its episode starts on
  // the first act(), and after one that ended). Otherwise `obs` must be what
  // the last report() gave as next_obs: UsageError if not.
  Action act(Floats obs);
  Action act(uint32_t env, Floats obs);
  // One action per env of `envs` (distinct ids), `obs` holding their
  // observations one after another (envs.size() rows). In served mode, one ACT.
  std::vector<Action> act(const std::vector<uint32_t>& envs, Floats obs);

  // Like act(), but the simulator chose `action` itself (a person, a script,
  // a safety stop; RLlib's old PolicyClient.log_action): the step is recorded
  // with that action, back in the form RLlib trains on (a Box action squashed
  // back into [-1, 1] when normalize_actions), and the policy's
  // log-probability of it. Report its outcome as usual. Served, the runner
  // records it so (served_taken, PROTOCOL.md 10.5.1). UsageError for an
  // action that is not one of the space; NotAgreed, served, from a runner
  // that records only its own actions.
  void log_action(Floats obs, const Action& action);
  void log_action(uint32_t env, Floats obs, const Action& action);
  void log_action(const std::vector<uint32_t>& envs, Floats obs, const std::vector<Action>& actions);

  // Like log_action(), but a person or a scripted controller acted instead of
  // the policy (the takeover extension, PROTOCOL.md 10.8): the step is marked.
  // Off-policy learners (APPO, IMPALA, SAC, DQN) train on it like any other,
  // on-policy ones (PPO) never do (the runner asks for as many more steps of
  // the policy's own), and it is counted: stats().takeover_steps and
  // takeover_rate here, the take-over rate in the learner's live line and
  // RLlib's metrics. NotAgreed when the runner does not speak takeover
  // (RLlib's own server, a multi-agent runner): use log_action() there.
  void take_over(Floats obs, const Action& action);
  void take_over(uint32_t env, Floats obs, const Action& action);
  void take_over(const std::vector<uint32_t>& envs, Floats obs, const std::vector<Action>& actions);

  // The outcome of an env's last action: its reward, the observation now,
  // whether the episode ended there. An ending report closes the episode; the
  // env's next act() starts a new one at its observation. On-policy, the
  // report that completes the runner's share sends it and waits for the
  // weights trained on it.
  void report(double reward, Floats next_obs, bool terminated = false, bool truncated = false);
  void report(uint32_t env, double reward, Floats next_obs, bool terminated = false, bool truncated = false);
  void report(const std::vector<uint32_t>& envs, const std::vector<double>& rewards, Floats next_obs,
              const std::vector<bool>& terminated, const std::vector<bool>& truncated);

  // Starts a new episode at `obs` (a running one ends as truncated); optional before act().
  // `train` false (RLlib's old training_enabled=False): the episode is played
  // with the policy and never trained on (an evaluation, a demo): nothing of
  // it is sent, or served, recorded by the runner (NotAgreed, and nothing
  // changed, from a served runner that does not speak served_taken).
  void start_episode(Floats obs, bool train = true);
  void start_episode(uint32_t env, Floats obs, bool train = true);
  // Ends the running episode where it stands (truncated), e.g. when the game is abandoned.
  void end_episode();
  void end_episode(uint32_t env);

  // Ends the loop, from any thread or a signal handler (async-signal-safe):
  // the next call, or one waiting now, throws ClientClosed; run() returns Ending::stopped.
  void stop() noexcept;
  // Delivers what is due and waits for its ACKs (bounded by timeout_s), then
  // closes: off-policy, the steps recorded; on-policy, only whole shares were
  // ever sent; served, one last ACT ends the open episodes. After stop(), or
  // once the learner ended, it closes without sending anything. Idempotent.
  void close();

  // What the runner agreed to (connects first if needed).
  Inference mode();
  bool on_policy();
  size_t observation_size();
  const std::optional<RunnerConfig>& config();  // nullopt: RLlib's own server
  std::optional<ActionSpace> action_space();    // nullopt: served, and the runner did not say

  uint32_t num_envs() const { return options_.num_envs; }
  std::vector<uint32_t> all_envs() const;  // 0..num_envs-1
  bool running() const;                    // false once the learner ended the run, stop() was called, or closed
  bool stopped() const;
  // The runner connected to (a directory sends each connection to a live runner), and how it named itself.
  Address address() const;
  std::string server_agent() const;
  bool plain_rllib() const;
  // Any thread may call it.
  EnvClientStats stats() const;

 private:
  Engine& ready();
  std::unique_ptr<Engine> setup();
  std::unique_ptr<Engine> local_engine(const WeightsUpdate& update);
  std::unique_ptr<Engine> served_engine(bool serves);
  std::vector<Action> act_on(const char* call, const std::vector<uint32_t>& envs, Floats obs,
                             const std::vector<Action>* taken, bool takeover);
  void close(bool flush);
  // UsageError unless num_envs is 1: `call` is a one-env form, `instead` says which to call.
  void require_one_env(const char* call, const char* instead) const;
  // NotAgreed (saying what to do instead) unless the runner agreed to `extension`.
  void require_agreed(std::string_view extension) const;
  void check_envs(const char* call, const std::vector<uint32_t>& envs) const;
  void check_rows(const char* call, const std::vector<uint32_t>& envs, Floats rows) const;
  void finish_episode(uint32_t env);
  void warn(const std::string& text) const;
  template <class Fn>
  auto guarded(Fn&& fn);

  EnvClientOptions options_;
  std::unique_ptr<SharedClient> shared_;
  std::unique_ptr<Engine> engine_;
  std::atomic<const Engine*> live_engine_{nullptr};  // engine_, for stats() on another thread
  std::optional<RunnerConfig> config_;
  std::optional<ActionSpace> space_;
  Inference mode_ = Inference::automatic;
  size_t observation_size_ = 0;
  bool ended_ = false;
  bool closed_ = false;

  std::vector<std::vector<float>> last_obs_;  // per env: the observation last reported (empty: none)
  std::vector<double> episode_return_;
  // Take-overs: whether each env's pending action is one, and (taken over, steps) of each env's episode.
  std::vector<char> taking_over_;
  std::vector<std::pair<uint64_t, uint64_t>> episode_takeovers_;
  mutable std::mutex counters_mutex_;
  uint64_t steps_ = 0, episodes_ = 0, takeover_steps_ = 0;
  std::deque<double> returns_;
  std::deque<std::pair<uint64_t, uint64_t>> takeovers_kept_;  // of the last 100 episodes
};

}  // namespace rlinks
