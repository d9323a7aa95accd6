#include "rlinks/weights.hpp"

#include "rlinks/errors.hpp"

namespace rlinks {
namespace {

ProtocolError malformed(const std::string& why) {
  return ProtocolError(ErrorCode::invalid_message, "malformed weight set: " + why);
}

}  // namespace

const NdArray* WeightSet::find(std::string_view name) const {
  for (const auto& [param, array] : params) {
    if (param == name) return &array;
  }
  return nullptr;
}

WeightSet read_weight_set(const Value& state) {
  if (!state.is_map()) throw malformed(std::string("expected a map, got ") + state.type_name());
  const Value* module = state.find("rl_module");
  const Value* seq_no = state.find("weights_seq_no");
  if (module == nullptr) throw malformed("no 'rl_module'");
  if (seq_no == nullptr) throw malformed("no 'weights_seq_no'");
  if (!module->is_map()) throw malformed("'rl_module' must map parameter names to arrays");
  if (const Value* single = module->find("default_policy")) {
    if (module->as_map().size() != 1) {
      throw malformed("it holds modules other than 'default_policy'; only single-agent modules are supported");
    }
    module = single;
    if (!module->is_map()) throw malformed("'default_policy' must map parameter names to arrays");
  }
  WeightSet weights;
  if (!seq_no->get_uint64(weights.seq_no)) throw malformed("'weights_seq_no' must be an int >= 0");
  for (const MapEntry& entry : module->as_map()) {
    if (!entry.key.is_str() || entry.key.as_str().empty()) throw malformed("a parameter name must be a non-empty str");
    const std::string& name = entry.key.as_str();
    if (!entry.value.is_ndarray() || !entry.value.as_ndarray().dtype().is_numeric()) {
      throw malformed("parameter '" + name.substr(0, 80) + "' must be a numeric array, got " + entry.value.type_name());
    }
    const NdArray& array = entry.value.as_ndarray();
    if (array.is_scalar()) {
      weights.params.emplace_back(name, NdArray(array.dtype(), {}, Bytes(array.data(), array.data() + array.nbytes())));
    } else {
      weights.params.emplace_back(name, array);
    }
  }
  return weights;
}

}  // namespace rlinks
