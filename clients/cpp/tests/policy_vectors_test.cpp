// Holds the local policy to tests/vectors/policy/ (made by its make_policy_vectors.py from rlinks'
// Python client): the MLP's forward pass, the log-probability of given actions, and the action a
// simulator applies.
//
// Usage: policy_vectors_test VECTORS_DIR/policy   (prints "N passed, M failed")

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "json.hpp"
#include "rlinks/action_space.hpp"
#include "rlinks/errors.hpp"
#include "rlinks/mlp.hpp"
#include "rlinks/sampling.hpp"

namespace fs = std::filesystem;
using testjson::Json;

namespace {

std::vector<float> floats(const Json& list) {
  std::vector<float> out;
  for (const Json& item : list.items) {
    out.push_back(item.kind == Json::Kind::null ? INFINITY : float(std::strtod(item.text.c_str(), nullptr)));
  }
  return out;
}

uint64_t count(const Json& number) { return std::strtoull(number.text.c_str(), nullptr, 10); }

// Bounds come as floats with null for an infinite one: low's nulls are -inf.
rlinks::ActionSpace space_of(const Json& spec) {
  if (spec.get("kind")->text == "discrete") return rlinks::ActionSpace::discrete(count(*spec.get("n")));
  std::vector<uint64_t> shape;
  for (const Json& dim : spec.get("shape")->items) shape.push_back(count(dim));
  std::vector<float> low = floats(*spec.get("low"));
  for (float& x : low) x = std::isinf(x) ? -INFINITY : x;
  return rlinks::ActionSpace::box(shape, low, floats(*spec.get("high")));
}

rlinks::WeightSet weights_of(const Json& params, const std::vector<std::string>& drop = {}) {
  rlinks::WeightSet weights;
  for (const auto& [name, spec] : params.members) {
    if (std::find(drop.begin(), drop.end(), name) != drop.end()) continue;
    std::vector<uint64_t> shape;
    for (const Json& dim : spec.get("shape")->items) shape.push_back(count(dim));
    const std::vector<float> data = floats(*spec.get("data"));
    weights.params.emplace_back(name, rlinks::NdArray::from_float32(shape, data.data()));
  }
  return weights;
}

bool close_enough(double expected, double actual, double relative, double absolute) {
  return std::fabs(expected - actual) <= absolute + relative * std::fabs(expected);
}

std::string describe(const std::vector<float>& values) {
  std::ostringstream text;
  text.precision(9);
  for (float x : values) text << x << " ";
  return text.str();
}

// Each check returns "" when the case passes, else why not.

std::string check_network(const Json& spec) {
  rlinks::Network network = rlinks::Network::from_weights(weights_of(*spec.get("params")),
                                                          spec.get("fcnet_activation")->text,
                                                          spec.get("head_fcnet_activation")->text,
                                                          space_of(*spec.get("action_space")));
  const Json& observations = *spec.get("observations");
  const Json& expected = *spec.get("dist_inputs");
  for (size_t i = 0; i < observations.items.size(); ++i) {
    const std::vector<float> observation = floats(observations.items[i]);
    const std::vector<float> want = floats(expected.items[i]);
    const std::vector<float>& got = network.logits(observation.data());
    if (got.size() != want.size()) return "row " + std::to_string(i) + ": " + std::to_string(got.size()) + " outputs";
    for (size_t j = 0; j < want.size(); ++j) {
      // float32 sums in another order than numpy's: a few ulps apart.
      if (!close_enough(want[j], got[j], 1e-5, 1e-6)) {
        return "row " + std::to_string(i) + ": got " + describe(got) + "expected " + describe(want);
      }
    }
  }
  return "";
}

std::string check_refused(const Json& spec, const Json& cases) {
  const Json* source = nullptr;
  for (const Json& candidate : cases.items) {
    if (candidate.get("name")->text == spec.get("params_of")->text) source = &candidate;
  }
  std::vector<std::string> drop;
  for (const Json& name : spec.get("drop")->items) drop.push_back(name.text);
  try {
    rlinks::Network::from_weights(weights_of(*source->get("params"), drop), source->get("fcnet_activation")->text,
                                  source->get("head_fcnet_activation")->text, space_of(*spec.get("action_space")));
  } catch (const rlinks::UnsupportedModel&) {
    return "";
  }
  return "taken, but the Python client refuses it";
}

std::string check_logp(const Json& spec) {
  const rlinks::ActionSpace space = space_of(*spec.get("action_space"));
  const std::vector<float> inputs = floats(*spec.get("dist_inputs"));
  const double want = std::strtod(spec.get("logp")->text.c_str(), nullptr);
  const float got = space.is_box()
                        ? rlinks::gaussian_logp(inputs.data(), space.size(), floats(*spec.get("action")).data())
                        : rlinks::categorical_logp(inputs.data(), inputs.size(), int64_t(count(*spec.get("action"))));
  return close_enough(want, got, 1e-6, 1e-6) ? "" : "logp " + std::to_string(got) + ", expected " + spec.get("logp")->text;
}

std::string check_action_for_env(const Json& spec) {
  const rlinks::ActionSpace space = space_of(*spec.get("action_space"));
  const std::vector<float> sampled = floats(*spec.get("sampled"));
  std::vector<float> want = floats(*spec.get("for_env"));
  const std::vector<float> got =
      rlinks::action_for_env(space, sampled.data(), spec.get("normalize")->boolean, spec.get("clip")->boolean);
  // The same float32 operations in the same order: the same bits.
  if (got.size() != want.size() || std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) != 0) {
    return "got " + describe(got) + "expected " + describe(want);
  }
  return "";
}

Json load(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return testjson::parse(text.str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: policy_vectors_test VECTORS_DIR/policy\n";
    return 2;
  }
  const fs::path dir = argv[1];
  int passed = 0, failed = 0;
  const auto run = [&](const std::string& name, const auto& check) {
    std::string why;
    try {
      why = check();
    } catch (const std::exception& error) {
      why = std::string("exception: ") + error.what();
    }
    if (why.empty()) {
      ++passed;
    } else {
      ++failed;
      std::cout << "FAIL " << name << ": " << why << "\n";
    }
  };
  try {
    const Json mlp = load(dir / "mlp.json");
    for (const Json& spec : mlp.get("cases")->items) {
      run("mlp " + spec.get("name")->text, [&] { return check_network(spec); });
    }
    for (const Json& spec : mlp.get("refused")->items) {
      run("mlp refused " + spec.get("name")->text, [&] { return check_refused(spec, *mlp.get("cases")); });
    }
    const Json logp = load(dir / "logp.json");
    for (size_t i = 0; i < logp.get("cases")->items.size(); ++i) {
      run("logp " + std::to_string(i), [&] { return check_logp(logp.get("cases")->items[i]); });
    }
    const Json for_env = load(dir / "action_for_env.json");
    for (size_t i = 0; i < for_env.get("cases")->items.size(); ++i) {
      run("action_for_env " + std::to_string(i), [&] { return check_action_for_env(for_env.get("cases")->items[i]); });
    }
  } catch (const std::exception& error) {
    std::cout << "cannot read the vectors in " << dir << ": " << error.what() << "\n";
    ++failed;
  }
  std::cout << passed << " passed, " << failed << " failed\n";
  return failed == 0 && passed > 0 ? 0 : 1;
}
