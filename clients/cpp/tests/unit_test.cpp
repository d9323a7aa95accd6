// Unit tests of the codec, framing, offer, weights, policy (Discrete and Box), episode builder,
// served-actions rows, and what EnvClient does without a server (its options, stop(), close()).
// Prints "N passed, M failed" and exits non-zero on any failure.

#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "rlinks/action_space.hpp"
#include "rlinks/address.hpp"
#include "rlinks/client.hpp"
#include "rlinks/env_client.hpp"
#include "rlinks/episode_builder.hpp"
#include "rlinks/framing.hpp"
#include "rlinks/messages.hpp"
#include "rlinks/mlp.hpp"
#include "rlinks/runner_config.hpp"
#include "rlinks/msgpack.hpp"
#include "rlinks/offer.hpp"
#include "rlinks/policy.hpp"
#include "rlinks/sampling.hpp"
#include "rlinks/stop_signal.hpp"
#include "rlinks/served.hpp"
#include "rlinks/weights.hpp"

using namespace rlinks;

namespace {

int checks_failed = 0;

#define CHECK(condition)                                                                   \
  do {                                                                                     \
    if (!(condition)) {                                                                    \
      std::cout << "  " << __FILE__ << ":" << __LINE__ << ": CHECK(" #condition ") failed\n"; \
      ++checks_failed;                                                                     \
    }                                                                                      \
  } while (0)

// Runs `action`, which must throw ProtocolError with `code`.
void check_refused(ErrorCode code, const std::function<void()>& action, int line) {
  try {
    action();
    std::cout << "  line " << line << ": accepted, expected " << to_string(code) << "\n";
    ++checks_failed;
  } catch (const ProtocolError& error) {
    if (error.code() != code) {
      std::cout << "  line " << line << ": refused with " << to_string(error.code()) << ", expected " << to_string(code)
                << " (" << error.what() << ")\n";
      ++checks_failed;
    }
  }
}
#define CHECK_REFUSED(code, statement) check_refused(ErrorCode::code, [&] { statement; }, __LINE__)

template <class Exception>
bool throws(const std::function<void()>& action) {
  try {
    action();
  } catch (const Exception&) {
    return true;
  }
  return false;
}

Bytes bytes(std::initializer_list<int> values) {
  Bytes out;
  for (int value : values) out.push_back(uint8_t(value));
  return out;
}

Bytes concat(const Bytes& a, const Bytes& b) {
  Bytes out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

Value decode(const Bytes& body) { return msgpack::decode(body.data(), body.size()); }

void test_integers_use_the_shortest_form() {
  const std::vector<std::pair<Value, Bytes>> cases{
      {Value(0), bytes({0x00})},
      {Value(127), bytes({0x7f})},
      {Value(128), bytes({0xcc, 0x80})},
      {Value(255), bytes({0xcc, 0xff})},
      {Value(256), bytes({0xcd, 0x01, 0x00})},
      {Value(65535), bytes({0xcd, 0xff, 0xff})},
      {Value(65536), bytes({0xce, 0x00, 0x01, 0x00, 0x00})},
      {Value(uint64_t(4294967296ull)), bytes({0xcf, 0, 0, 0, 1, 0, 0, 0, 0})},
      {Value(uint64_t(18446744073709551615ull)), bytes({0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})},
      {Value(-1), bytes({0xff})},
      {Value(-32), bytes({0xe0})},
      {Value(-33), bytes({0xd0, 0xdf})},
      {Value(-128), bytes({0xd0, 0x80})},
      {Value(-129), bytes({0xd1, 0xff, 0x7f})},
      {Value(-32769), bytes({0xd2, 0xff, 0xff, 0x7f, 0xff})},
      {Value(int64_t(-2147483649ll)), bytes({0xd3, 0xff, 0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff})},
  };
  for (const auto& [value, wire] : cases) {
    CHECK(msgpack::encode(value) == wire);
    CHECK(decode(wire) == value);
  }
  // Wider forms than needed still decode to the same value.
  CHECK(decode(bytes({0xd3, 0, 0, 0, 0, 0, 0, 0, 5})) == Value(5));
  CHECK(decode(bytes({0xcd, 0x00, 0x07})) == Value(7));
  int64_t small;
  CHECK(Value(-7).get_int64(small) && small == -7);
  uint64_t count;
  CHECK(!Value(-7).get_uint64(count));
  CHECK(!Value(true).is_count());
}

void test_other_types() {
  CHECK(msgpack::encode(Value(1.5)) == bytes({0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0}));
  CHECK(decode(bytes({0xca, 0x3f, 0xc0, 0x00, 0x00})) == Value(1.5));  // float32 is accepted
  CHECK(msgpack::encode(Value()) == bytes({0xc0}));
  CHECK(msgpack::encode(Value(false)) == bytes({0xc2}));
  CHECK(msgpack::encode(Value(std::string(31, 'a')))[0] == 0xbf);
  CHECK(msgpack::encode(Value(std::string(32, 'a')))[0] == 0xd9);
  CHECK(msgpack::encode(Value(std::string(256, 'a')))[0] == 0xda);
  CHECK(msgpack::encode(Value(std::string(65536, 'a')))[0] == 0xdb);
  CHECK(msgpack::encode(Value(Bin{Bytes(255)}))[0] == 0xc4);
  CHECK(msgpack::encode(Value(Bin{Bytes(256)}))[0] == 0xc5);
  CHECK(msgpack::encode(Value(Array(15)))[0] == 0x9f);
  CHECK(msgpack::encode(Value(Array(16)))[0] == 0xdc);
  for (const Value& value : {Value(std::string(70000, 'x')), Value(Bin{Bytes(70000, 7)}), Value(Array(70000, Value(1)))}) {
    CHECK(decode(msgpack::encode(value)) == value);
  }
  Map many;
  for (int i = 0; i < 20; ++i) many.push_back({std::to_string(i), i});
  CHECK(msgpack::encode(Value(many))[0] == 0xde);
  CHECK(decode(msgpack::encode(Value(many))) == Value(many));
  // A repeated key: the last one counts, as in a Python dict.
  const Value repeated = decode(bytes({0x82, 0xa1, 'k', 0x01, 0xa1, 'k', 0x02}));
  CHECK(repeated.find("k") != nullptr && *repeated.find("k") == Value(2));
}

void test_refusals() {
  CHECK_REFUSED(bad_body, decode(bytes({0xc1})));
  CHECK_REFUSED(bad_body, decode(bytes({0xd4, 0x01, 0x00})));
  CHECK_REFUSED(bad_body, decode(bytes({0xc7, 0x01, 0xff, 0x00})));
  CHECK_REFUSED(bad_body, decode(bytes({0x01, 0x02})));
  CHECK_REFUSED(bad_body, decode(bytes({0x92, 0x01})));
  CHECK_REFUSED(bad_body, decode(bytes({0xdd, 0xff, 0xff, 0xff, 0xff})));
  CHECK_REFUSED(bad_body, decode(bytes({0xa2, 0xc3, 0x28})));        // invalid UTF-8
  CHECK_REFUSED(bad_body, decode(bytes({0xa3, 0xed, 0xa0, 0x80})));  // a UTF-16 surrogate
  CHECK_REFUSED(bad_body, decode(bytes({0x81, 0x90, 0x01})));        // a list as a map key
  Bytes deep(msgpack::kMaxDepth + 1, 0x91);
  deep.push_back(0x01);
  CHECK_REFUSED(bad_body, decode(deep));
  Bytes deep_enough(msgpack::kMaxDepth, 0x91);
  deep_enough.push_back(0x01);
  CHECK(decode(deep_enough).is_array());
}

Bytes array_map(const char* dtype, const Bytes& data, int dim, const Bytes& kind = {}) {
  Map entries{{Value(Bin{Bytes{'n', 'd'}}), true},
              {Value(Bin{Bytes{'t', 'y', 'p', 'e'}}), dtype},
              {Value(Bin{Bytes{'k', 'i', 'n', 'd'}}), Value(Bin{kind})},
              {Value(Bin{Bytes{'s', 'h', 'a', 'p', 'e'}}), Array{dim}},
              {Value(Bin{Bytes{'d', 'a', 't', 'a'}}), Value(Bin{data})}};
  return msgpack::encode(Value(entries));
}

void test_arrays() {
  // PROTOCOL.md section 4's example, np.array([1.5, -2.0], dtype="<f4").
  const Bytes example = bytes({0x85, 0xc4, 0x02, 'n', 'd', 0xc3, 0xc4, 0x04, 't', 'y', 'p', 'e', 0xa3, '<', 'f', '4',
                               0xc4, 0x04, 'k', 'i', 'n', 'd', 0xc4, 0x00, 0xc4, 0x05, 's', 'h', 'a', 'p', 'e', 0x91, 0x02,
                               0xc4, 0x04, 'd', 'a', 't', 'a', 0xc4, 0x08, 0x00, 0x00, 0xc0, 0x3f, 0x00, 0x00, 0x00, 0xc0});
  const Value array = decode(example);
  CHECK(array.is_ndarray() && array.as_ndarray().dtype().str() == "<f4");
  CHECK(array.as_ndarray().number(0) == 1.5 && array.as_ndarray().number(1) == -2.0);
  const float values[2] = {1.5f, -2.0f};
  CHECK(msgpack::encode(Value(NdArray::from_float32({2}, values))) == example);
  // np.int64(-7), a scalar.
  const Bytes scalar = bytes({0x83, 0xc4, 0x02, 'n', 'd', 0xc2, 0xc4, 0x04, 't', 'y', 'p', 'e', 0xa3, '<', 'i', '8',
                              0xc4, 0x04, 'd', 'a', 't', 'a', 0xc4, 0x08, 0xf9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff});
  CHECK(decode(scalar).as_ndarray().is_scalar() && decode(scalar).as_ndarray().signed_at(0) == -7);
  CHECK(msgpack::encode(decode(scalar)) == scalar);

  CHECK(decode(array_map(">i2", bytes({0xff, 0xfe}), 1)).as_ndarray().signed_at(0) == -2);
  CHECK_REFUSED(unsafe_payload, decode(array_map("|O", Bytes(8), 1, Bytes{'O'})));
  CHECK_REFUSED(unsafe_payload, decode(array_map("|O8", Bytes(8), 1)));
  CHECK_REFUSED(unsafe_payload, decode(array_map("<m8", Bytes(8), 1)));
  CHECK_REFUSED(bad_body, decode(array_map("<f4", Bytes(8), 3)));
  CHECK_REFUSED(bad_body, decode(array_map("<f3", Bytes(3), 1)));
  CHECK_REFUSED(bad_body, decode(array_map("f", Bytes(4), 1)));
  CHECK_REFUSED(bad_body, decode(array_map("<f4", Bytes(4), 1, Bytes{'X'})));

  CHECK(DType::parse("|f4").str() == "<f4");
  CHECK(DType::parse(">u1").str() == "|u1");
  CHECK(DType::parse(">U3").str() == ">U3" && DType::parse(">U3").item_size == 12);
  CHECK(DType::parse("|S5").str() == "|S5");
  for (double value : {0.0, -0.0, 0.5, -2.0, 65504.0, 0.25, 1e-7, 6.1e-5, 3.14159}) {
    const double back = float16_value(float16_bits(value));
    CHECK(std::fabs(back - value) <= std::fabs(value) * 1e-3 + 6e-8);
  }
  CHECK(float16_bits(65520.0) == 0x7c00);  // rounds up to infinity
  CHECK(float16_bits(1.0 + 1.0 / 2048) == 0x3c00);  // a tie rounds to even
}

Bytes frame_of(const Value& message) { return encode_frame(message); }

void test_framing_split_everywhere() {
  const Value ping = make_message(MessageType::ping);
  CHECK(frame_of(ping) == concat(Bytes{'0', '0', '0', '0', '0', '0', '1', '1'},
                                 bytes({0x81, 0xa4, 't', 'y', 'p', 'e', 0xa4, 'P', 'I', 'N', 'G'})));
  const float weights[3] = {1, 2, 3};
  const Value state = make_message(
      MessageType::set_state, {{"state", Map{{"rl_module", Map{{"w", NdArray::from_float32({3}, weights)}}},
                                             {"weights_seq_no", 4}}},
                               {"want_steps", 100}});
  const Value ack = make_message(MessageType::ack, {{"seq", 9}});
  const Bytes stream = concat(concat(frame_of(ping), frame_of(state)), frame_of(ack));
  const std::vector<Value> expected{ping, state, ack};

  for (size_t chunk = 1; chunk <= stream.size(); ++chunk) {
    FrameDecoder decoder;
    std::vector<Value> got;
    for (size_t start = 0; start < stream.size(); start += chunk) {
      decoder.feed(stream.data() + start, std::min(chunk, stream.size() - start), got);
    }
    decoder.eof();
    CHECK(got == expected);
  }
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    for (size_t second = cut; second <= stream.size(); second += 7) {
      FrameDecoder decoder;
      std::vector<Value> got;
      decoder.feed(stream.data(), cut, got);
      decoder.feed(stream.data() + cut, second - cut, got);
      decoder.feed(stream.data() + second, stream.size() - second, got);
      CHECK(got == expected);
    }
  }
  // Reading bodies straight into the decoder's buffer gives the same messages.
  FrameDecoder decoder;
  std::vector<Value> got;
  size_t pos = 0;
  while (pos < stream.size()) {
    size_t space = 0;
    if (uint8_t* body = decoder.body_space(space)) {
      const size_t take = std::min<size_t>(space, 5);
      std::copy(stream.begin() + long(pos), stream.begin() + long(pos + take), body);
      decoder.body_filled(take, got);
      pos += take;
    } else {
      decoder.feed(stream.data() + pos, 3 < stream.size() - pos ? 3 : stream.size() - pos, got);
      pos += std::min<size_t>(3, stream.size() - pos);
    }
  }
  CHECK(got == expected);
}

void feed_all(FrameDecoder& decoder, const std::string& text, std::vector<Value>& got) {
  decoder.feed(reinterpret_cast<const uint8_t*>(text.data()), text.size(), got);
}

void test_framing_refusals() {
  std::vector<Value> got;
  for (const std::string header : {" 0000011", "+0000011", "0000_011", "0000001a", "00000000"}) {
    FrameDecoder decoder;
    CHECK_REFUSED(bad_frame, feed_all(decoder, header, got));
    CHECK_REFUSED(bad_frame, feed_all(decoder, "00000001", got));  // spent: the same error again
  }
  FrameDecoder small(16);
  CHECK_REFUSED(frame_too_large, feed_all(small, "00000017", got));
  FrameDecoder truncated;
  feed_all(truncated, "0000001", got);
  CHECK_REFUSED(bad_frame, truncated.eof());
  FrameDecoder clean;
  clean.eof();
  CHECK(throws<UsageError>([] { encode_frame(Value(Map{{"type", "GET_ACTION"}})); }));
  CHECK(throws<UsageError>([] { encode_frame(make_message(MessageType::ack, {{"seq", -1}})); }));
}

void test_messages() {
  CHECK(validate_message(make_message(MessageType::episodes_and_get_state, {{"episodes", Array{}}, {"seq", 3}})) ==
        MessageType::episodes_and_get_state);
  CHECK_REFUSED(invalid_message, validate_message(Value(Array{})));
  CHECK_REFUSED(invalid_message, validate_message(Value(Map{{"type", 5}})));
  CHECK_REFUSED(unsupported_message, validate_message(Value(Map{{"type", "LOG_RETURNS"}})));
  CHECK_REFUSED(unsupported_message, validate_message(Value(Map{{"type", "HELLO"}})));
  CHECK_REFUSED(invalid_message, validate_message(make_message(MessageType::set_state)));
  CHECK_REFUSED(invalid_message, validate_message(make_message(MessageType::set_state, {{"state", Map{}}, {"want_steps", true}})));
  CHECK_REFUSED(invalid_message, validate_message(make_message(MessageType::episodes, {{"episodes", Array{1}}})));
  CHECK_REFUSED(invalid_message, validate_message(make_message(MessageType::auth, {{"proof", "text"}})));
}

void test_offer_and_address() {
  const Value ping = make_message(MessageType::ping, {{"rlinks", make_offer({"want_steps", "ack"}, "me/1", {{"client_id", "abc"}})}});
  const auto offer = parse_offer(ping);
  CHECK(offer && offer->version == 1 && offer->names("ack") && offer->names("want_steps") && offer->agent == "me/1");
  CHECK(offer->get("client_id") != nullptr && offer->get("client_id")->as_str() == "abc");
  CHECK(ping.find("rlinks")->find("extensions")->as_array()[0] == Value("ack"));  // sorted
  CHECK(!parse_offer(make_message(MessageType::pong)));
  CHECK_REFUSED(invalid_message, parse_offer(make_message(MessageType::pong, {{"rlinks", Map{{"version", 0}}}})));
  CHECK_REFUSED(invalid_message, parse_offer(make_message(MessageType::pong, {{"rlinks", Map{{"version", 1}, {"extensions", Array{2}}}}})));
  Value deep = Array{};
  for (int i = 0; i < 9; ++i) deep = Array{deep};
  CHECK_REFUSED(invalid_message, parse_offer(make_message(MessageType::pong, {{"rlinks", Map{{"version", 1}, {"x", deep}}}})));

  const Address plain = parse_address("127.0.0.1:5555");
  CHECK(plain.host == "127.0.0.1" && plain.port == 5555 && !plain.tls);
  const Address secure = parse_address("tls://learner.example:443");
  CHECK(secure.tls && secure.host == "learner.example" && secure.str() == "tls://learner.example:443");
  CHECK(parse_address("[::1]:9").host == "::1");
  CHECK(parse_address("tcp://h:1").port == 1);
  for (const char* bad : {"nohost", "h:0", "h:65536", "h:x", ":5", "udp://h:5", "::1:5"}) {
    CHECK(throws<UsageError>([&] { parse_address(bad); }));
  }
}

WeightSet tiny_weights() {
  // encoder: 2 -> 2, identity weights; pi head: 2 -> 3.
  const float identity[4] = {1, 0, 0, 1};
  const float zero2[2] = {0, 0};
  const float head[6] = {1, 0, 0, 1, 1, 1};
  const float head_bias[3] = {0, 0, 0.5f};
  const float clip[1] = {20};
  const Value state = Map{{"rl_module", Map{{"default_policy", Map{
                                                {"encoder.actor_encoder.net.mlp.0.weight", NdArray::from_float32({2, 2}, identity)},
                                                {"encoder.actor_encoder.net.mlp.0.bias", NdArray::from_float32({2}, zero2)},
                                                {"pi.net.mlp.0.weight", NdArray::from_float32({3, 2}, head)},
                                                {"pi.net.mlp.0.bias", NdArray::from_float32({3}, head_bias)},
                                                {"pi.log_std_clip_param_const", NdArray::from_float32({1}, clip)},
                                                {"vf.net.mlp.0.weight", NdArray::from_float32({1, 2}, zero2)},
                                            }}}},
                          {"weights_seq_no", 3}};
  return read_weight_set(state);
}

void test_weights_and_network() {
  const WeightSet weights = tiny_weights();
  CHECK(weights.seq_no == 3 && weights.find("pi.net.mlp.0.bias") != nullptr);
  CHECK_REFUSED(invalid_message, read_weight_set(Value(Map{{"rl_module", Map{}}})));
  CHECK_REFUSED(invalid_message, read_weight_set(Value(Map{{"rl_module", Map{{"w", 1}}}, {"weights_seq_no", 0}})));

  Network network = Network::from_weights(weights, "tanh", "relu", 3);
  CHECK(network.observation_size() == 2 && network.num_outputs() == 3);
  const float observation[2] = {0.5f, -1.0f};
  const std::vector<float> logits = network.logits(observation);
  const float a = std::tanh(0.5f), b = std::tanh(-1.0f);
  CHECK(std::fabs(logits[0] - a) < 1e-6 && std::fabs(logits[1] - b) < 1e-6 && std::fabs(logits[2] - (a + b + 0.5f)) < 1e-6);
  CHECK(std::fabs(Network::from_weights(weights, "relu", "relu", 3).logits(observation)[1]) < 1e-9);
  CHECK(throws<UnsupportedModel>([&] { Network::from_weights(weights, "tanh", "relu", 2); }));
  CHECK(throws<UnsupportedModel>([&] { Network::from_weights(weights, "gelu", "relu", 3); }));

  std::mt19937_64 rng(7);
  const float logits3[3] = {0.0f, std::log(2.0f), std::log(7.0f)};
  std::map<int64_t, int> counts;
  for (int i = 0; i < 10000; ++i) {
    const SampledAction sampled = sample_categorical(logits3, 3, rng);
    ++counts[sampled.action];
    const double expected = std::log(std::vector<double>{0.1, 0.2, 0.7}[size_t(sampled.action)]);
    CHECK(std::fabs(sampled.logp - expected) < 1e-5);
  }
  CHECK(counts[0] > 850 && counts[0] < 1150 && counts[2] > 6700 && counts[2] < 7300);
}

void test_episode_builder() {
  EpisodeBuilder builder(2, {{"action_dist_inputs", 2}, {"action_logp", 0}}, 4);
  const float logits[2] = {0.1f, 0.2f};
  const float logp = -0.5f;
  float observation[2] = {0, 0};
  const std::string first_id = builder.reset(observation);
  for (int t = 1; t <= 3; ++t) {
    observation[0] = float(t);
    builder.step(t % 2, 1.0, observation, false, false, {logits, &logp});
  }
  CHECK(builder.num_steps() == 3);
  std::vector<Value> chunks = builder.take_chunks();
  CHECK(chunks.size() == 1 && episode_steps(chunks[0]) == 3);
  const Value& chunk = chunks[0];
  CHECK(*chunk.find("id_") == Value(first_id) && *chunk.find("t_started") == Value(0) && *chunk.find("t") == Value(3));
  const NdArray& observations = chunk.find("observations")->find("data")->as_ndarray();
  CHECK((observations.shape() == std::vector<uint64_t>{4, 2}) && observations.number(6) == 3.0);
  CHECK((chunk.find("extra_model_outputs")->find("action_dist_inputs")->find("data")->as_ndarray().shape() ==
         std::vector<uint64_t>{3, 2}));
  CHECK(chunk.find("actions")->find("data")->as_ndarray().dtype().str() == "<i8");
  CHECK(chunk.find("infos")->find("data")->as_array().size() == 4);
  CHECK(*chunk.find("infos")->find("finalized") == Value(false));

  // The next chunk continues the episode: same id, t_started 3, the last observation first.
  for (int t = 4; t <= 9; ++t) {
    observation[0] = float(t);
    builder.step(0, 1.0, observation, t == 9, false, {logits, &logp});
  }
  chunks = builder.take_chunks();
  CHECK(chunks.size() == 2);  // cut at 4 steps on its own, then finished
  CHECK(*chunks[0].find("id_") == Value(first_id) && *chunks[0].find("t_started") == Value(3) &&
        *chunks[0].find("t") == Value(7));
  CHECK(chunks[0].find("observations")->find("data")->as_ndarray().number(0) == 3.0);
  CHECK(*chunks[1].find("t_started") == Value(7) && *chunks[1].find("t") == Value(9));
  CHECK(*chunks[1].find("is_terminated") == Value(true) && *chunks[0].find("is_terminated") == Value(false));
  CHECK(!builder.running() && builder.take_chunks().empty());
  // Every chunk goes on the wire as a valid message.
  const Bytes frame = encode_frame(make_message(MessageType::episodes, {{"episodes", Array(chunks.begin(), chunks.end())}}));
  CHECK(frame.size() > kHeaderBytes);

  // A reset in the middle of an episode ends it as truncated; a new id follows.
  const std::string second_id = builder.reset(observation);
  builder.step(1, 1.0, observation, false, false, {logits, &logp});
  CHECK(builder.reset(observation) != second_id);
  chunks = builder.take_chunks();
  CHECK(chunks.size() == 1 && *chunks[0].find("is_truncated") == Value(true));
  CHECK(throws<UsageError>([&] { builder.step(0, std::nan(""), observation, false, false, {logits, &logp}); }));
  CHECK(throws<UsageError>([&] { builder.step(0, 1.0, observation, false, false, {logits}); }));
}

Value round_trip(const Value& message) {
  const Bytes frame = encode_frame(message);
  return decode(Bytes(frame.begin() + kHeaderBytes, frame.end()));
}

void test_served_rows() {
  ActBuilder builder(2);
  const float a[2] = {0.5f, -1.0f}, b[2] = {2.0f, 3.0f};
  builder.start(4, a);
  builder.step(9, b, 1.0, true, false);  // ends env 9's episode ...
  builder.start(9, a);                   // ... and starts the next in the same ACT
  builder.step(2, b, -0.25);
  CHECK(builder.size() == 4);
  const ActRows rows = builder.take();
  CHECK(builder.empty() && rows.size() == 4);
  CHECK((rows.wanting_actions() == std::vector<uint32_t>{4, 9, 2}));

  // The wire form: env a list of ints, obs <f4 (k, 2), reward <f4, flags |b1.
  const Value act = round_trip(make_act(rows));
  CHECK(validate_message(act) == MessageType::act);
  CHECK((act.find("env")->as_array() == Array{4, 9, 9, 2}));
  const NdArray& obs = act.find("obs")->as_ndarray();
  CHECK(obs.dtype().str() == "<f4" && (obs.shape() == std::vector<uint64_t>{4, 2}) && obs.number(2) == 2.0 &&
        obs.number(7) == 3.0);
  const NdArray& reward = act.find("reward")->as_ndarray();
  CHECK(reward.dtype().str() == "<f4" && reward.number(1) == 1.0 && reward.number(3) == -0.25 && reward.number(0) == 0);
  const NdArray& start = act.find("start")->as_ndarray();
  CHECK(start.dtype().str() == "|b1" && start.number(0) == 1 && start.number(1) == 0 && start.number(2) == 1);
  CHECK(act.find("terminated")->as_ndarray().number(1) == 1 && act.find("truncated")->as_ndarray().number(1) == 0);

  // Rows chosen and restarted (what a reconnect does with them).
  const ActRows kept = rows.select({2, 3}, {true, true});
  CHECK((kept.env == std::vector<uint32_t>{9, 2}) && kept.start[1] && !kept.ends(0));
  CHECK((kept.obs.shape() == std::vector<uint64_t>{2, 2}) && kept.obs.number(0) == 0.5 && kept.obs.number(2) == 2.0);

  // The caller's mistakes are UsageErrors.
  ActRows bad = rows;
  bad.terminated[0] = true;  // a start row that also ends
  CHECK(throws<UsageError>([&] { bad.check(); }));
  bad = rows;
  bad.reward.pop_back();
  CHECK(throws<UsageError>([&] { make_act(bad); }));
  bad = rows;
  bad.reward[3] = std::nan("");
  CHECK(throws<UsageError>([&] { bad.check(); }));
  bad = rows;
  bad.obs = NdArray::from_float32({3, 2}, std::vector<float>(6).data());
  CHECK(throws<UsageError>([&] { bad.check(); }));
  CHECK(throws<UsageError>([&] { ActRows{}.check(); }));
  CHECK(throws<UsageError>([&] { builder.start(kMaxEnvId + 1, a); }));
  CHECK(throws<UsageError>([&] { builder.step(1, a, 1e39); }));  // not a finite float32

  // A client checks, before connecting, that each env's episode was started.
  ClientOptions options;
  options.extensions.push_back("served_actions");
  options.retry_attempts = 1;
  Client client("127.0.0.1:9", options);
  ActBuilder orphan(2);
  orphan.step(3, a, 1.0);
  CHECK(throws<UsageError>([&] { client.act(orphan.take()); }));
  CHECK(throws<UsageError>([&] { Client("127.0.0.1:9").act(rows); }));  // served_actions not offered
}

void test_served_actions_reply() {
  const std::vector<uint32_t> asked{4, 9, 2};
  const int64_t values[3] = {1, 0, 1};
  const auto actions_message = [](Value env, Value actions) {
    return round_trip(make_message(MessageType::actions, {{"env", std::move(env)}, {"actions", std::move(actions)},
                                                          {"weights_seq_no", 12}}));
  };
  const ActionsReply reply = read_actions(actions_message(Array{4, 9, 2}, NdArray::from_int64({3}, values)), asked);
  CHECK((reply.env == asked) && reply.weights_seq_no == 12 && reply.size() == 3);
  CHECK(reply.discrete(0) == 1 && reply.discrete(1) == 0 && reply.discrete(2) == 1);
  const ActionsReply listed = read_actions(actions_message(Array{4, 9, 2}, Array{1, 0, 1}), asked);
  CHECK(listed.actions.dtype().str() == "<i8" && listed.discrete(2) == 1);
  CHECK(read_actions(actions_message(Array{4, 9, 2}, Array{1, 0.5, 1}), asked).actions.dtype().str() == "<f8");
  CHECK(read_actions(actions_message(Array{}, Array{}), {}).size() == 0);
  const float box[6] = {0, 1, 2, 3, 4, 5};
  const ActionsReply boxed = read_actions(actions_message(Array{4, 9, 2}, NdArray::from_float32({3, 2}, box)), asked);
  CHECK((boxed.actions.shape() == std::vector<uint64_t>{3, 2}));
  CHECK_REFUSED(invalid_message, boxed.discrete(0));  // not a Discrete space's form

  // Not the envs asked, not in their order, not one action each: invalid_message.
  CHECK_REFUSED(invalid_message, read_actions(actions_message(Array{9, 4, 2}, NdArray::from_int64({3}, values)), asked));
  CHECK_REFUSED(invalid_message, read_actions(actions_message(Array{4, 9}, NdArray::from_int64({2}, values)), asked));
  CHECK_REFUSED(invalid_message, read_actions(actions_message(Array{4, 9, 2}, NdArray::from_int64({2}, values)), asked));
  CHECK_REFUSED(invalid_message, read_actions(actions_message(Array{4, 9, "2"}, Array{1, 0, 1}), asked));
  CHECK_REFUSED(invalid_message, read_actions(actions_message(Array{4, 9, -2}, Array{1, 0, 1}), asked));
  CHECK_REFUSED(invalid_message, read_actions(actions_message(Array{4, 9, 2}, Array{1, "left", 1}), asked));
  CHECK_REFUSED(invalid_message, read_actions(make_message(MessageType::actions, {{"env", Array{4, 9, 2}}, {"actions", 1},
                                                                                 {"weights_seq_no", 1}}), asked));
  CHECK_REFUSED(invalid_message, read_actions(make_message(MessageType::actions, {{"env", Array{}}, {"actions", Array{}}}), {}));
  try {
    read_actions(actions_message(Array{9, 4, 2}, NdArray::from_int64({3}, values)), asked);
  } catch (const ProtocolError& error) {
    CHECK(std::string(error.what()) ==
          "ACTIONS: for envs [9, 4, 2], but actions were asked for [4, 9, 2] (the rows that wanted one, in row order)");
  }
  CHECK_REFUSED(invalid_message, validate_message(make_message(MessageType::act, {{"env", Array{1}}})));
}

WeightSet box_weights(uint64_t seq_no, float log_std_bias) {
  // encoder: 2 -> 2, identity; pi head: 2 -> 2, the mean = x0 and the log-std = x1 + log_std_bias.
  const float identity[4] = {1, 0, 0, 1};
  const float zero2[2] = {0, 0};
  const float head_bias[2] = {0, log_std_bias};
  const float clip[1] = {2};
  const Value state = Map{{"rl_module", Map{
                                            {"encoder.encoder.net.mlp.0.weight", NdArray::from_float32({2, 2}, identity)},
                                            {"encoder.encoder.net.mlp.0.bias", NdArray::from_float32({2}, zero2)},
                                            {"pi.net.mlp.0.weight", NdArray::from_float32({2, 2}, identity)},
                                            {"pi.net.mlp.0.bias", NdArray::from_float32({2}, head_bias)},
                                            {"pi.log_std_clip_param_const", NdArray::from_float32({1}, clip)},
                                        }},
                          {"weights_seq_no", seq_no}};
  return read_weight_set(state);
}

void test_box_sampling() {
  // A Gaussian of mean 0.5 and std exp(-1): the draws have its moments, and each logp is that of its draw.
  const float inputs[2] = {0.5f, -1.0f};
  std::mt19937_64 rng(11);
  double sum = 0, squares = 0;
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) {
    float action = 0;
    const float logp = sample_gaussian(inputs, 1, rng, &action);
    CHECK(logp == gaussian_logp(inputs, 1, &action));
    const double z = (action - 0.5) / std::exp(-1.0);
    CHECK(std::fabs(logp - (-0.5 * z * z + 1.0 - 0.5 * std::log(2 * M_PI))) < 1e-5);
    sum += action;
    squares += (action - 0.5) * (action - 0.5);
  }
  CHECK(std::fabs(sum / draws - 0.5) < 0.01);
  CHECK(std::fabs(std::sqrt(squares / draws) - std::exp(-1.0)) < 0.01);
  const float bad[2] = {std::nanf(""), 0.0f};
  float ignored = 0;
  CHECK(throws<UsageError>([&] { sample_gaussian(bad, 1, rng, &ignored); }));

  const float logits[3] = {0.5f, 2.0f, 2.0f};
  CHECK(greedy_categorical(logits, 3).action == 1 && greedy_categorical(logits, 3).logp == 0.0f);
  const double total = std::exp(0.5) + 2 * std::exp(2.0);
  CHECK(std::fabs(categorical_logp(logits, 3, 0) - (0.5 - std::log(total))) < 1e-6);
  CHECK(throws<UsageError>([&] { categorical_logp(logits, 3, 3); }));
}

void test_action_spaces() {
  const ActionSpace pendulum = ActionSpace::box({1}, {-2.0f}, {2.0f});
  CHECK(pendulum.size() == 1 && pendulum.dist_inputs() == 2 && pendulum.str() == "Box(-2, 2, (1,))");
  CHECK(ActionSpace::box({2, 3}, {}, {}).str() == "Box(-inf, inf, (2, 3))");
  CHECK(ActionSpace::discrete(4).str() == "Discrete(4)" && ActionSpace::discrete(4).dist_inputs() == 4);
  CHECK(throws<UsageError>([] { ActionSpace::box({2}, {1.0f}, {0.0f}); }));
  CHECK(throws<UsageError>([] { ActionSpace::box({2}, {0, 0, 0}, {1.0f}); }));
  CHECK(throws<UsageError>([] { ActionSpace::box({}, {}, {}); }));
  CHECK(throws<UsageError>([] { ActionSpace::discrete(0); }));

  // From a SET_CONFIG description: bounds of any float dtype, or one number for all.
  const double low[2] = {-1.0, -3.0};
  const Value box = Map{{"kind", "box"}, {"shape", Array{2}}, {"dtype", "<f4"},
                        {"low", NdArray(DType{'<', 'f', 8}, {2}, Bytes(reinterpret_cast<const uint8_t*>(low),
                                                                        reinterpret_cast<const uint8_t*>(low) + 16))},
                        {"high", NdArray::scalar(DType::float32(), Bytes{0, 0, 128, 63})}};  // 1.0f
  const ActionSpace read = read_action_space(box);
  CHECK(read.is_box() && (read.low == std::vector<float>{-1, -3}) && (read.high == std::vector<float>{1, 1}));
  CHECK(read_action_space(Value(Map{{"kind", "discrete"}, {"n", 3}, {"start", 0}})).n == 3);
  CHECK(throws<UnsupportedModel>([] { read_action_space(Value(Map{{"kind", "discrete"}, {"n", 3}, {"start", 1}})); }));
  CHECK(throws<UnsupportedModel>([] { read_action_space(Value(Map{{"kind", "multi_discrete"}})); }));

  // What the env applies: unsquashed from [-1, 1] and clipped, clipped only, or as sampled.
  const float sampled[1] = {0.25f};
  CHECK(action_for_env(pendulum, sampled, true, false) == std::vector<float>{0.5f});
  const float far[1] = {3.0f};
  CHECK(action_for_env(pendulum, far, true, false) == std::vector<float>{2.0f});
  CHECK(action_for_env(pendulum, far, false, true) == std::vector<float>{2.0f});
  CHECK(action_for_env(pendulum, far, false, false) == std::vector<float>{3.0f});
  CHECK(action_for_env(ActionSpace::box({1}, {}, {}), far, true, true) == std::vector<float>{3.0f});  // unbounded
  Action discrete;
  discrete.index = 1;
  CHECK(discrete.discrete() == 1 && throws<UsageError>([&] { discrete.box(); }));
}

void test_box_policy() {
  const ActionSpace space = ActionSpace::box({1}, {-2.0f}, {2.0f});
  LocalPolicy policy(box_weights(5, 0.0f), space, "linear", "relu");
  CHECK(policy.observation_size() == 2 && policy.seq_no() == 5);
  std::mt19937_64 rng(3);
  const float obs[2] = {0.25f, -1.0f};  // mean 0.25, log-std -1
  const PolicyOutput out = policy.compute(obs, rng);
  CHECK((out.dist_inputs == std::vector<float>{0.25f, -1.0f}) && out.sampled.size() == 1);
  CHECK(out.logp == gaussian_logp(out.dist_inputs.data(), 1, out.sampled.data()));
  CHECK(out.for_env.box() == action_for_env(space, out.sampled.data(), true, false));
  // The log-std is clamped to the module's log_std_clip_param (2 here).
  const float wide[2] = {0.0f, 7.0f};
  CHECK(policy.compute(wide, rng).dist_inputs[1] == 2.0f);

  LocalPolicy greedy(box_weights(5, 0.0f), space, "linear", "relu", PolicyOptions{false, true, false});
  const PolicyOutput mean = greedy.compute(obs, rng);
  CHECK(mean.sampled == std::vector<float>{0.25f} && mean.logp == 0.0f && mean.for_env.box() == std::vector<float>{0.5f});

  // Older weights are ignored (PROTOCOL.md 8); newer ones run; weights of another module are refused.
  policy.set_weights(box_weights(4, 1.0f));
  CHECK(policy.seq_no() == 5 && policy.compute(obs, rng).dist_inputs[1] == -1.0f);
  policy.set_weights(box_weights(6, 1.0f));
  CHECK(policy.seq_no() == 6 && policy.compute(obs, rng).dist_inputs[1] == 0.0f);
  CHECK(throws<UnsupportedModel>([&] { LocalPolicy(tiny_weights(), space, "tanh", "relu"); }));  // 3 outputs
  CHECK(throws<UnsupportedModel>([] { LocalPolicy(box_weights(1, 0), ActionSpace::discrete(3), "tanh", "relu"); }));
  const float nan_obs[2] = {std::nanf(""), 0.0f};
  CHECK(throws<UsageError>([&] { policy.compute(nan_obs, rng); }));
}

void test_episode_builder_box_actions() {
  EpisodeBuilder builder(2, {{"action_dist_inputs", 2}, {"action_logp", 0}}, 65536, {1});
  const float observation[2] = {0, 1}, inputs[2] = {0.1f, -0.5f}, logp = -1.0f;
  builder.reset(observation);
  const float actions[3] = {0.5f, -0.25f, 1.5f};
  for (const float& action : actions) builder.step_box(&action, 1.0, observation, false, false, {inputs, &logp});
  CHECK(throws<UsageError>([&] { builder.step(0, 1.0, observation, false, false, {inputs, &logp}); }));
  builder.truncate();  // ends it where it stands
  CHECK(!builder.running());
  const std::vector<Value> chunks = builder.take_chunks();
  CHECK(chunks.size() == 1 && *chunks[0].find("is_truncated") == Value(true));
  const NdArray& recorded = chunks[0].find("actions")->find("data")->as_ndarray();
  CHECK(recorded.dtype().str() == "<f4" && (recorded.shape() == std::vector<uint64_t>{3, 1}) && recorded.number(2) == 1.5);
  builder.reset(observation);
  builder.truncate();  // no steps: dropped
  CHECK(builder.take_chunks().empty());
  EpisodeBuilder discrete(2, {});
  discrete.reset(observation);
  CHECK(throws<UsageError>([&] { discrete.step_box(actions, 1.0, observation, false, false, {}); }));
}

// Actions the simulator took itself: squashed back as RLlib trains on them, with the policy's logp; the
// take-over marker on the chunks that hold one; the served_taken and takeover columns of an ACT.
void test_taken_actions() {
  const ActionSpace pendulum = ActionSpace::box({1}, {-2.0f}, {2.0f});
  CHECK(action_from_env(pendulum, {1.0f}, true) == std::vector<float>{0.5f});
  CHECK(action_from_env(pendulum, {3.0f}, true) == std::vector<float>{1.5f});  // not clipped: as Python records it
  CHECK(action_from_env(pendulum, {3.0f}, false) == std::vector<float>{3.0f});
  CHECK(action_from_env(ActionSpace::box({1}, {}, {}), {3.0f}, true) == std::vector<float>{3.0f});  // unbounded
  CHECK(throws<UsageError>([&] { action_from_env(pendulum, {1.0f, 2.0f}, true); }));
  CHECK(throws<UsageError>([&] { action_from_env(pendulum, {std::nanf("")}, true); }));
  for (float x : {-0.75f, 0.0f, 0.3f}) {
    const float applied = action_for_env(pendulum, &x, true, false)[0];
    CHECK(std::fabs(action_from_env(pendulum, {applied}, true)[0] - x) < 1e-6f);  // one undoes the other
  }

  LocalPolicy policy(box_weights(5, 0.0f), pendulum, "linear", "relu");
  const float obs[2] = {0.25f, -1.0f};
  PolicyOutput out;
  policy.output_for(obs, Action::of_box({3.0f}), out);
  CHECK(out.sampled == std::vector<float>{1.5f} && out.for_env.box() == std::vector<float>{2.0f});
  CHECK(out.logp == gaussian_logp(out.dist_inputs.data(), 1, out.sampled.data()));
  CHECK(throws<UsageError>([&] { policy.output_for(obs, Action::of_index(1), out); }));
  LocalPolicy discrete(tiny_weights(), ActionSpace::discrete(3), "tanh", "relu");
  const float three[2] = {0.5f, -0.5f};
  discrete.output_for(three, Action::of_index(2), out);
  CHECK(out.for_env.discrete() == 2 && out.sampled.empty() &&
        out.logp == categorical_logp(out.dist_inputs.data(), 3, 2));
  CHECK(throws<UsageError>([&] { discrete.output_for(three, Action::of_index(3), out); }));

  EpisodeBuilder builder(2, {{"action_logp", 0}}, 65536);
  const float observation[2] = {0, 1}, logp = -1.0f;
  builder.reset(observation);
  builder.step(0, 1.0, observation, false, false, {&logp});
  builder.step(1, 1.0, observation, false, false, {&logp}, true);
  builder.step(0, 1.0, observation, false, false, {&logp});
  std::vector<Value> chunks = builder.take_chunks();  // cut: the marker stays with the chunk that holds the step
  builder.step(0, 1.0, observation, true, false, {&logp});
  for (Value& chunk : builder.take_chunks()) chunks.push_back(std::move(chunk));
  CHECK(chunks.size() == 2);
  const NdArray& marker = chunks[0].find("extra_model_outputs")->find(kTakeoverOutput)->find("data")->as_ndarray();
  CHECK(marker.dtype().str() == "|b1" && marker.size() == 3 && marker.number(0) == 0 && marker.number(1) == 1);
  CHECK(chunks[1].find("extra_model_outputs")->find(kTakeoverOutput) == nullptr);

  ActBuilder rows_builder(2);
  rows_builder.step(1, observation, 1.0, true);
  rows_builder.start(1, observation);
  rows_builder.start(2, observation);
  ActRows rows = rows_builder.take();
  rows.taken_mask = {false, true, false};
  const int64_t taken[3] = {0, 1, 0};
  rows.taken = NdArray::from_int64({3}, taken);
  rows.train = {true, false, true};
  rows.takeover = {false, true, false};
  const Value act = round_trip(make_act(rows));
  CHECK(validate_message(act) == MessageType::act);
  CHECK(act.find("taken_mask")->as_ndarray().number(1) == 1 && act.find("taken")->as_ndarray().signed_at(1) == 1);
  CHECK(act.find("train")->as_ndarray().number(1) == 0 && act.find("takeover")->as_ndarray().number(1) == 1);
  const ActRows kept = rows.select({1, 2}, {true, true});  // a reconnect keeps each row's columns
  CHECK((kept.taken_mask == std::vector<bool>{true, false}) && kept.taken.signed_at(0) == 1);
  CHECK((kept.train == std::vector<bool>{false, true}) && (kept.takeover == std::vector<bool>{true, false}));
  ActRows bad = rows;
  bad.taken_mask[0] = true;  // on a row that ends its episode
  CHECK(throws<UsageError>([&] { bad.check(); }));
  bad = rows;
  bad.takeover = {false, false, true};  // outside taken_mask
  CHECK(throws<UsageError>([&] { bad.check(); }));
  bad = rows;
  bad.train.pop_back();
  CHECK(throws<UsageError>([&] { bad.check(); }));
  bad = rows;
  bad.taken = NdArray::from_int64({2}, taken);
  CHECK(throws<UsageError>([&] { bad.check(); }));
  // A client that did not offer served_taken refuses these columns before connecting.
  ClientOptions options;
  options.extensions.push_back("served_actions");
  options.retry_attempts = 1;
  CHECK(throws<UsageError>([&] { Client("127.0.0.1:9", options).act(rows); }));
}

// A TCP port that takes connections (the kernel completes the handshake) and never answers.
class SilentListener {
 public:
  SilentListener() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    ::bind(fd_, reinterpret_cast<sockaddr*>(&address), length);
    ::listen(fd_, 8);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
  }
  ~SilentListener() { ::close(fd_); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_;
  uint16_t port_ = 0;
};

EnvClient* signalled_client = nullptr;
void stop_signalled_client(int) { signalled_client->stop(); }

// Seconds until connect() gives up, when `stop` is called (on another thread) after 0.2 s; the
// listener never answers the handshake, so only the stop ends the wait before its 30 s timeout.
double seconds_to_stop(EnvClient& client, const std::function<void()>& stop) {
  const auto started = std::chrono::steady_clock::now();
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    stop();
  });
  const bool closed = throws<ClientClosed>([&] { client.connect(); });
  stopper.join();
  CHECK(closed && client.stopped() && !client.running());
  CHECK(throws<ClientClosed>([&] { client.act(0, std::vector<float>{0, 0, 0, 0}); }));  // and every later call
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
}

// connect_wait_s: a client that never connected keeps trying past retry_attempts, saying so once.
void test_connect_wait() {
  std::vector<std::string> said;
  ClientOptions options;
  options.retry_attempts = 1;
  options.backoff_initial_s = 0.05;
  options.backoff_cap_s = 0.1;
  options.warn = [&](const std::string& line) { said.push_back(line); };
  options.connect_wait_s = 0.6;
  const auto started = std::chrono::steady_clock::now();
  std::string error;
  try {
    Client("127.0.0.1:9", options).connect();  // the discard port: refused
  } catch (const ConnectFailed& failed) {
    error = failed.what();
  }
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() >= 0.55);
  CHECK(error.find("and the connect wait") != std::string::npos);
  CHECK(said.size() == 1 && said[0].rfind("waiting up to 0.6 s for the learner at 127.0.0.1:9 to listen", 0) == 0);
  said.clear();
  options.connect_wait_s = 0;  // as before: retry_attempts and no more, nothing said
  CHECK(throws<ConnectFailed>([&] { Client("127.0.0.1:9", options).connect(); }));
  CHECK(said.empty());
}

void test_env_client_without_a_server() {
  EnvClientOptions bad;
  bad.num_envs = 0;
  CHECK(throws<UsageError>([&] { EnvClient("127.0.0.1:9", bad); }));
  CHECK(throws<UsageError>([] { EnvClient("no port here"); }));
  CHECK(EnvClientOptions().connection.reliable);  // reliable by default, as the Python EnvClient

  EnvClientOptions options;
  options.connection.timeout_s = 30;
  options.connection.retry_attempts = 1;
  options.num_envs = 3;
  CHECK((EnvClient("127.0.0.1:9", options).all_envs() == std::vector<uint32_t>{0, 1, 2}));

  // stop() from another thread, and from a signal handler: a wait under way ends at once.
  SilentListener silent;
  EnvClient threaded(silent.address(), options);
  CHECK(seconds_to_stop(threaded, [&] { threaded.stop(); }) < 5);
  EnvClient signalled(silent.address(), options);
  signalled_client = &signalled;
  const auto previous = std::signal(SIGUSR1, stop_signalled_client);
  CHECK(seconds_to_stop(signalled, [] { std::raise(SIGUSR1); }) < 5);
  std::signal(SIGUSR1, previous);
  // run() ends quietly on a stop.
  CHECK(signalled.run([&] { signalled.act(1, std::vector<float>{0, 0, 0, 0}); }) == Ending::stopped);

  // Closed, a client takes no more calls; a stop before any call ends the first one.
  EnvClient closed("127.0.0.1:9", options);
  closed.close();
  CHECK(throws<ClientClosed>([&] { closed.connect(); }) && !closed.running() && !closed.stopped());
  EnvClient early("127.0.0.1:9", options);
  early.stop();
  CHECK(throws<ClientClosed>([&] { early.connect(); }));
  CHECK(std::isnan(early.stats().mean_return) && early.stats().steps == 0);
}

}  // namespace

void test_runner_config_paced_in_flight() {
  // A paced runner names how many batches an off-policy client keeps unconfirmed; anything but an int >= 1 is none.
  const auto read = [](std::optional<Value> paced) {
    const Value bound = NdArray::scalar(DType::float32(), Bytes{0, 0, 128, 63});
    Map description{{"algorithm", "DQN"}, {"rollout_fragment_length", 10}, {"on_policy", false},
                    {"model_config", Map{}},
                    {"observation_space", Map{{"kind", "box"}, {"shape", Array{4}}, {"dtype", "<f4"},
                                              {"low", bound}, {"high", bound}}},
                    {"action_space", Map{{"kind", "discrete"}, {"n", 2}}}};
    if (paced) description.push_back({"paced_in_flight", *paced});
    return read_runner_config(Value(Map{{"type", "SET_CONFIG"}, {"config", description}}))->paced_in_flight;
  };
  CHECK(!read(std::nullopt).has_value());
  CHECK(read(Value(1)) == std::optional<uint64_t>(1) && read(Value(3)) == std::optional<uint64_t>(3));
  for (const Value& odd : {Value(0), Value(-1), Value(1.5), Value(true), Value("1"), Value(nullptr)}) {
    CHECK(!read(odd).has_value());
  }
}

int main() {
  const std::vector<std::pair<const char*, void (*)()>> tests{
      {"integers use the shortest form", test_integers_use_the_shortest_form},
      {"other types", test_other_types},
      {"refusals", test_refusals},
      {"arrays", test_arrays},
      {"framing split everywhere", test_framing_split_everywhere},
      {"framing refusals", test_framing_refusals},
      {"messages", test_messages},
      {"offer and address", test_offer_and_address},
      {"weights and network", test_weights_and_network},
      {"episode builder", test_episode_builder},
      {"served rows", test_served_rows},
      {"served actions reply", test_served_actions_reply},
      {"box sampling", test_box_sampling},
      {"action spaces", test_action_spaces},
      {"box policy", test_box_policy},
      {"episode builder box actions", test_episode_builder_box_actions},
      {"env client without a server", test_env_client_without_a_server},
      {"connect wait", test_connect_wait},
      {"taken actions", test_taken_actions},
      {"runner config paced_in_flight", test_runner_config_paced_in_flight},
  };
  int passed = 0, failed = 0;
  for (const auto& [name, test] : tests) {
    const int before = checks_failed;
    try {
      test();
    } catch (const std::exception& error) {
      std::cout << "  exception: " << error.what() << "\n";
      ++checks_failed;
    }
    if (checks_failed == before) {
      ++passed;
    } else {
      ++failed;
      std::cout << "FAIL " << name << "\n";
    }
  }
  std::cout << passed << " passed, " << failed << " failed\n";
  return failed == 0 ? 0 : 1;
}
