// What EnvClient asks of its mode, local inference or served actions (private to the library).
#pragma once

#include <cstdint>
#include <vector>

#include "rlinks/action_space.hpp"

namespace rlinks {

// One connection's episodes and actions, for env ids 0..num_envs-1 and flat
// float observations of the size EnvClient checked. EnvClient keeps the
// order of calls legal (an act before each report, a running episode before
// an act); the engine records, sends and paces.
class Engine {
 public:
  virtual ~Engine() = default;

  // Whether `env` has an episode running.
  virtual bool is_open(uint32_t env) const = 0;
  // Whether `env` acted and its outcome was not reported yet.
  virtual bool awaiting_report(uint32_t env) const = 0;
  // Begins an episode for `env` at `obs` (a running one ends as truncated);
  // `train` false: it is played and never trained on (nothing of it is recorded).
  virtual void start(uint32_t env, const float* obs, bool train) = 0;
  // One action per env, `rows` holding their observations one after another.
  // `taken`: null, or the action each env's simulator chose itself (a person,
  // a script: log_action), recorded with the policy's log-probability of it
  // and returned as the env applies it; `takeover`: those steps are marked
  // taken over (PROTOCOL.md 10.8).
  virtual std::vector<Action> act(const std::vector<uint32_t>& envs, const float* rows,
                                  const std::vector<Action>* taken, bool takeover) = 0;
  // Records the outcome of `env`'s last action; returns whether its episode ended.
  virtual bool report(uint32_t env, double reward, const float* obs, bool terminated, bool truncated) = 0;
  // Sends what the reports of one call completed.
  virtual void after_report() = 0;
  // Cuts `env`'s running episode where it stands (truncated).
  virtual void end(uint32_t env) = 0;
  // With `flush`, delivers what is due and waits for its ACKs (bounded);
  // without, drops it. Either way nothing is sent afterwards.
  virtual void close(bool flush) = 0;

  // The weights the last actions came from (any thread may read it).
  virtual uint64_t weights_seq_no() const = 0;
  virtual bool on_policy() const = 0;
};

}  // namespace rlinks
