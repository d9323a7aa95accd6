// The weight set a SET_STATE carries (PROTOCOL.md section 8).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rlinks/value.hpp"

namespace rlinks {

struct WeightSet {
  std::vector<std::pair<std::string, NdArray>> params;  // torch's dotted names, in wire order
  uint64_t seq_no = 0;  // 0: "no number yet, apply anyway"

  const NdArray* find(std::string_view name) const;
};

// Reads a SET_STATE's `state`: `rl_module` (or its one `default_policy`
// entry) maps names to numeric arrays, `weights_seq_no` is an int >= 0;
// other keys are ignored. Throws ProtocolError invalid_message.
WeightSet read_weight_set(const Value& state);

}  // namespace rlinks
