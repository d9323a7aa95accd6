#include "rlinks/runner_config.hpp"

#include "rlinks/errors.hpp"

namespace rlinks {
namespace {

ProtocolError malformed(const std::string& why) {
  return ProtocolError(ErrorCode::invalid_message, "malformed SET_CONFIG description: " + why);
}

std::vector<uint64_t> read_shape(const Value* shape, const char* what) {
  if (shape == nullptr || !shape->is_array()) throw malformed(std::string(what) + " needs 'shape', a list of ints >= 0");
  std::vector<uint64_t> dims;
  for (const Value& dim : shape->as_array()) {
    uint64_t size;
    if (!dim.get_uint64(size)) throw malformed(std::string(what) + " needs 'shape', a list of ints >= 0");
    dims.push_back(size);
  }
  return dims;
}

// Checks a space description; returns its kind.
std::string check_space(const Value* space, const char* what) {
  if (space == nullptr || !space->is_map()) throw malformed(std::string(what) + " must be a map");
  const Value* kind = space->find("kind");
  const std::string name = kind != nullptr && kind->is_str() ? kind->as_str() : "";
  if (name == "discrete") {
    uint64_t n;
    const Value* size = space->find("n");
    if (size == nullptr || !size->get_uint64(n) || n < 1) throw malformed(std::string(what) + ": discrete needs an int n >= 1");
    const Value* start = space->find("start");
    if (start != nullptr && !start->is_integer()) throw malformed(std::string(what) + ": discrete 'start' must be an int");
  } else if (name == "box") {
    const std::vector<uint64_t> shape = read_shape(space->find("shape"), what);
    const Value* dtype = space->find("dtype");
    if (dtype == nullptr || !dtype->is_str()) throw malformed(std::string(what) + ": box needs a str 'dtype'");
    try {
      DType::parse(dtype->as_str());
    } catch (const ProtocolError&) {
      throw malformed(std::string(what) + ": box has a bad dtype '" + dtype->as_str().substr(0, 32) + "'");
    }
    for (const char* bound : {"low", "high"}) {
      const Value* array = space->find(bound);
      const bool fits = array != nullptr && array->is_ndarray() &&
                        (array->as_ndarray().shape() == shape || array->as_ndarray().shape().empty());
      if (!fits) throw malformed(std::string(what) + ": box '" + bound + "' must be an array of its shape");
    }
  } else if (name == "multi_discrete") {
    const Value* nvec = space->find("nvec");
    if (nvec == nullptr || !nvec->is_ndarray()) throw malformed(std::string(what) + ": multi_discrete needs an int array 'nvec'");
  } else {
    throw malformed(std::string(what) + ": unknown space kind '" + name.substr(0, 32) + "'");
  }
  return name;
}

std::string activation(const Value& model_config, const char* key, const char* fallback) {
  const Value* name = model_config.find(key);
  if (name == nullptr) return fallback;
  if (name->is_nil()) return "linear";
  if (!name->is_str()) throw malformed(std::string("model_config '") + key + "' must be a str");
  return name->as_str();
}

}  // namespace

std::optional<RunnerConfig> read_runner_config(const Value& set_config) {
  const Value* description = set_config.find("config");
  if (description == nullptr || !description->is_map()) description = set_config.find("rlinks_config");
  if (description == nullptr || description->is_nil()) return std::nullopt;
  if (!description->is_map()) throw malformed("it must be a map");

  RunnerConfig config;
  const Value* algorithm = description->find("algorithm");
  const Value* fragment = description->find("rollout_fragment_length");
  const Value* on_policy = description->find("on_policy");
  const Value* model_config = description->find("model_config");
  if (algorithm == nullptr || !algorithm->is_str()) throw malformed("needs a str 'algorithm'");
  if (fragment == nullptr || !fragment->get_uint64(config.rollout_fragment_length)) {
    throw malformed("needs an int 'rollout_fragment_length'");
  }
  if (on_policy == nullptr || !on_policy->is_bool()) throw malformed("needs a bool 'on_policy'");
  if (model_config == nullptr || !model_config->is_map()) throw malformed("needs a map 'model_config'");
  const Value* observation_space = description->find("observation_space");
  const Value* action_space = description->find("action_space");
  if (check_space(observation_space, "observation_space") == "box") {
    config.observation_shape = read_shape(observation_space->find("shape"), "observation_space");
  }
  if (check_space(action_space, "action_space") == "discrete") {
    const Value* start = action_space->find("start");
    int64_t offset = 0;
    if (start == nullptr || (start->get_int64(offset) && offset == 0)) {
      uint64_t n;
      action_space->find("n")->get_uint64(n);
      config.discrete_actions = n;
    }
  }
  if (const Value* paced = description->find("paced_in_flight"); paced != nullptr) {
    uint64_t batches = 0;
    if (paced->get_uint64(batches) && batches >= 1) config.paced_in_flight = batches;
  }
  config.algorithm = algorithm->as_str();
  config.on_policy = on_policy->as_bool();
  config.fcnet_activation = activation(*model_config, "fcnet_activation", "tanh");
  config.head_fcnet_activation = activation(*model_config, "head_fcnet_activation", "relu");
  config.description = *description;
  return config;
}

}  // namespace rlinks
