#include "rlinks/action_space.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "rlinks/errors.hpp"

namespace rlinks {
namespace {

std::vector<float> bound(std::vector<float> values, size_t size, float fallback, const char* which) {
  if (values.empty()) values.assign(1, fallback);
  if (values.size() == 1) values.assign(size, values[0]);
  if (values.size() != size) {
    throw UsageError(std::string("a Box's ") + which + " needs 1 or " + std::to_string(size) + " values, got " +
                     std::to_string(values.size()));
  }
  return values;
}

bool all_finite(const std::vector<float>& values) {
  return std::all_of(values.begin(), values.end(), [](float x) { return std::isfinite(x); });
}

std::vector<float> floats_of(const Value& array, size_t size) {
  const NdArray& values = array.as_ndarray();
  std::vector<float> out;
  for (size_t i = 0; i < values.size(); ++i) out.push_back(float(values.number(i)));
  return out.size() == 1 ? std::vector<float>(size, out[0]) : out;
}

}  // namespace

ActionSpace ActionSpace::discrete(uint64_t n) {
  if (n < 1) throw UsageError("a Discrete action space needs n >= 1");
  ActionSpace space;
  space.n = n;
  return space;
}

ActionSpace ActionSpace::box(std::vector<uint64_t> shape, std::vector<float> low, std::vector<float> high) {
  if (shape.empty() || std::any_of(shape.begin(), shape.end(), [](uint64_t d) { return d < 1 || d > (1u << 24); })) {
    throw UsageError("a Box action space needs a shape of sizes 1 to 2^24");
  }
  ActionSpace space;
  space.kind = Kind::box;
  space.shape = std::move(shape);
  const size_t size = space.size();
  if (size > (1u << 24)) throw UsageError("a Box action space of more than 2^24 numbers");
  space.low = bound(std::move(low), size, -INFINITY, "low");
  space.high = bound(std::move(high), size, INFINITY, "high");
  for (size_t i = 0; i < size; ++i) {
    if (!(space.low[i] <= space.high[i])) throw UsageError("a Box action space has low > high (or NaN) at " + std::to_string(i));
  }
  return space;
}

size_t ActionSpace::size() const {
  if (!is_box()) return 1;
  size_t size = 1;
  for (uint64_t d : shape) size *= size_t(d);
  return size;
}

std::string ActionSpace::str() const {
  if (!is_box()) return "Discrete(" + std::to_string(n) + ")";
  std::ostringstream text;
  const bool uniform = std::all_of(low.begin(), low.end(), [&](float x) { return x == low[0]; }) &&
                       std::all_of(high.begin(), high.end(), [&](float x) { return x == high[0]; });
  if (uniform) {
    text << "Box(" << low[0] << ", " << high[0] << ", ";
  } else {
    text << "Box(low, high, ";
  }
  text << shape_str(shape) << ")";
  return text.str();
}

std::string shape_str(const std::vector<uint64_t>& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + (shape.size() == 1 ? ",)" : ")");
}

int64_t Action::discrete() const {
  if (is_box()) throw UsageError("this action is a Box action of " + std::to_string(values.size()) + " numbers: read box()");
  return index;
}

const std::vector<float>& Action::box() const {
  if (!is_box()) throw UsageError("this action is a Discrete action: read discrete()");
  return values;
}

ActionSpace read_action_space(const Value& description) {
  const Value* kind = description.find("kind");
  const std::string name = kind != nullptr && kind->is_str() ? kind->as_str() : "";
  if (name == "discrete") {
    const Value* start = description.find("start");
    int64_t offset = 0;
    if (start != nullptr && !(start->get_int64(offset) && offset == 0)) {
      throw UnsupportedModel("the action space is a Discrete that does not start at 0; RLlib's categorical "
                             "draws 0..n-1, so shift the action in the simulator and describe it as starting at 0");
    }
    uint64_t n = 0;
    const Value* size = description.find("n");
    if (size == nullptr || !size->get_uint64(n) || n < 1) throw UnsupportedModel("a Discrete action space without n >= 1");
    return ActionSpace::discrete(n);
  }
  if (name == "box") {
    const Value* shape = description.find("shape");
    const Value* low = description.find("low");
    const Value* high = description.find("high");
    std::vector<uint64_t> dims;
    if (shape != nullptr && shape->is_array()) {
      for (const Value& dim : shape->as_array()) {
        uint64_t d = 0;
        if (dim.get_uint64(d)) dims.push_back(d);
      }
    }
    if (low == nullptr || high == nullptr || !low->is_ndarray() || !high->is_ndarray() ||
        !low->as_ndarray().dtype().is_numeric() || !high->as_ndarray().dtype().is_numeric()) {
      throw UnsupportedModel("a Box action space without numeric 'low' and 'high' arrays");
    }
    try {
      ActionSpace space = ActionSpace::box(dims, {}, {});
      space.low = floats_of(*low, space.size());
      space.high = floats_of(*high, space.size());
      return ActionSpace::box(space.shape, space.low, space.high);
    } catch (const UsageError& error) {
      throw UnsupportedModel(std::string("the runner's action space: ") + error.what());
    }
  }
  throw UnsupportedModel("the action space is '" + name.substr(0, 32) +
                         "'; this client acts in Discrete and Box spaces only (the Python client, or served "
                         "actions, for others)");
}

std::vector<float> action_for_env(const ActionSpace& space, const float* sampled, bool normalize, bool clip) {
  const size_t size = space.size();
  std::vector<float> action(sampled, sampled + size);
  if (normalize) {
    if (!all_finite(space.low) || !all_finite(space.high)) return action;
    for (size_t i = 0; i < size; ++i) {
      const float low = space.low[i], high = space.high[i];
      action[i] = std::clamp(low + (action[i] + 1.0f) * (high - low) / 2.0f, low, high);
    }
  } else if (clip) {
    for (size_t i = 0; i < size; ++i) action[i] = std::clamp(action[i], space.low[i], space.high[i]);
  }
  return action;
}

std::vector<float> action_from_env(const ActionSpace& space, const std::vector<float>& taken, bool normalize) {
  if (!space.is_box()) throw UsageError("action_from_env: " + space.str() + " is not a Box");
  if (taken.size() != space.size()) {
    throw UsageError("a Box action of " + std::to_string(taken.size()) + " number(s), but " + space.str() + " takes " +
                     std::to_string(space.size()));
  }
  if (!all_finite(taken)) throw UsageError("a Box action holds a NaN or an infinity");
  std::vector<float> action = taken;
  if (!normalize || !all_finite(space.low) || !all_finite(space.high)) return action;
  for (size_t i = 0; i < action.size(); ++i) {
    action[i] = 2.0f * (action[i] - space.low[i]) / (space.high[i] - space.low[i]) - 1.0f;
  }
  return action;
}

}  // namespace rlinks
