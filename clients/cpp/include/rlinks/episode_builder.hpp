// Steps of one simulator, recorded into episode chunks ready to send (PROTOCOL.md section 7).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "rlinks/value.hpp"

namespace rlinks {

// The takeover extension's per-step marker (PROTOCOL.md section 10.8): an
// extra model output, bool (T,), true at the steps a person or a scripted
// controller took over; only chunks with such a step carry it.
constexpr const char* kTakeoverOutput = "rlinks_takeover";

// A per-step model output to record with each step, such as action_logp
// (width 0: one number) or action_dist_inputs (width: the number of logits).
struct ExtraOutput {
  std::string name;
  size_t width = 0;
};

// Records reset/step calls of one environment with a flat float observation
// and a Discrete or Box action, and hands out the chunks in the stacked form:
// one array per column (observations <f4 [T+1, size], actions <i8 [T] or
// <f4 [T, *box_shape], rewards <f4 [T], each extra output <f4 [T] or
// [T, width]) and T+1 empty infos.
//
// An episode still running when take_chunks() is called is cut as RLlib's
// SingleAgentEpisode.cut() does: the next chunk keeps its id_, starts at
// t_started = the steps so far, and begins with the last observation.
class EpisodeBuilder {
 public:
  // Chunks are also cut on their own every `max_chunk_steps` steps, so none
  // breaks a server's per-chunk limit (65,536 by default, section 12).
  // `box_action_shape`: the shape of a Box action; empty: Discrete actions.
  EpisodeBuilder(size_t observation_size, std::vector<ExtraOutput> extras, size_t max_chunk_steps = 65536,
                 std::vector<uint64_t> box_action_shape = {});

  // Starts an episode at `observation` (observation_size floats) and returns
  // its id. A running episode that took steps ends first, as truncated.
  const std::string& reset(const float* observation);

  // Records one step: `action` taken, then `reward` and `observation` seen.
  // `extra_values` holds one pointer per declared extra output, to its
  // width floats (one for width 0). `takeover`: a person or a scripted
  // controller chose the action (marked with kTakeoverOutput). Throws
  // UsageError outside an episode, for a non-finite reward, or for the wrong
  // number of extra values.
  void step(int64_t action, double reward, const float* observation, bool terminated, bool truncated,
            std::initializer_list<const float*> extra_values, bool takeover = false);
  // The same for a Box action: prod(box_action_shape) floats, as RLlib trains
  // on them (the Gaussian's sample, not what the env applied). UsageError for
  // a Discrete builder (and step() for a Box one).
  void step_box(const float* action, double reward, const float* observation, bool terminated, bool truncated,
                std::initializer_list<const float*> extra_values, bool takeover = false);

  // Ends the running episode at its last step, as truncated (its env went
  // away); one that took no steps since it started or was last cut is
  // dropped. No-op between episodes.
  void truncate();

  // Env steps recorded and not yet taken.
  size_t num_steps() const { return finished_steps_ + steps_; }
  bool running() const { return running_; }

  // The states of every chunk since the last call: finished episodes in the
  // order they ended, then the running episode's chunk, cut.
  std::vector<Value> take_chunks();

 private:
  void emit(bool terminated, bool truncated);
  void finish(bool terminated, bool truncated);
  void cut();
  void check_step(double reward, std::initializer_list<const float*> extra_values) const;
  void record(double reward, const float* observation, bool terminated, bool truncated,
              std::initializer_list<const float*> extra_values, bool takeover);
  NdArray actions(uint64_t steps) const;
  std::string new_id();

  size_t observation_size_;
  std::vector<ExtraOutput> extras_;
  size_t max_chunk_steps_;
  std::mt19937_64 id_source_;

  bool running_ = false;
  std::string id_;
  uint64_t t_started_ = 0;
  size_t steps_ = 0;  // of the current chunk
  std::vector<float> observations_;
  std::vector<uint64_t> box_shape_;  // empty: Discrete
  size_t box_size_ = 0;
  std::vector<int64_t> actions_;
  std::vector<float> box_actions_;
  std::vector<float> rewards_;
  std::vector<std::vector<float>> extra_values_;
  std::vector<bool> takeovers_;  // of the current chunk's steps; empty while none was taken over
  std::optional<double> start_time_, last_step_time_;

  std::vector<Value> finished_;
  size_t finished_steps_ = 0;
};

// Env steps in an episode state: its rewards, less the lookback.
// Throws UsageError when the state has no readable rewards buffer.
uint64_t episode_steps(const Value& state);

}  // namespace rlinks
