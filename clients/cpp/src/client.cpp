#include "rlinks/client.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "rlinks/auth.hpp"
#include "rlinks/episode_builder.hpp"
#include "rlinks/stop_signal.hpp"

namespace rlinks {
namespace {

constexpr size_t kReadChunk = 64 * 1024;
constexpr int kMaxDrainReads = 64;
constexpr size_t kMaxServerCodeChars = 64;
constexpr size_t kMaxServerTextChars = 4096;
constexpr double kErrorReportSeconds = 1.0;
constexpr std::string_view kShuttingDown = "shutting_down";
constexpr std::string_view kDirectoryRole = "directory";

ServerError server_error(const Value& message) {
  return ServerError(message.find("code")->as_str().substr(0, kMaxServerCodeChars),
                     message.find("message")->as_str().substr(0, kMaxServerTextChars));
}

std::string random_hex(std::mt19937_64& rng, size_t digits) {
  static const char* hex = "0123456789abcdef";
  std::string text;
  while (text.size() < digits) {
    const uint64_t bits = rng();
    for (int i = 0; i < 16 && text.size() < digits; ++i) text += hex[(bits >> (4 * i)) & 15];
  }
  return text;
}

// The connect wait when the options leave it to the environment: $RLINKS_CONNECT_WAIT_S, else 60 s.
double default_connect_wait_s() {
  const char* text = std::getenv("RLINKS_CONNECT_WAIT_S");
  if (text == nullptr || *text == '\0') return 60.0;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || !std::isfinite(seconds) || seconds < 0) {
    throw UsageError(std::string("$RLINKS_CONNECT_WAIT_S must be a non-negative number of seconds, got '") + text + "'");
  }
  return seconds;
}

}  // namespace

Client::Client(std::string_view address, ClientOptions options)
    : options_(std::move(options)), given_(parse_address(address)), address_(given_),
      rng_(std::random_device{}()), decoder_(options_.max_frame_bytes), read_buffer_(kReadChunk) {
  if (!(options_.timeout_s > 0) || !(options_.connect_timeout_s > 0)) throw UsageError("timeouts must be positive");
  if (options_.retry_attempts < 1) throw UsageError("retry_attempts must be at least 1");
  if (std::isnan(options_.connect_wait_s)) throw UsageError("connect_wait_s must be a number of seconds");
  if (options_.connect_wait_s < 0) options_.connect_wait_s = default_connect_wait_s();
  if (options_.max_unacked < 1) throw UsageError("max_unacked must be at least 1");
  for (const std::string& name : options_.extensions) {
    if (name != extension::want_steps && name != extension::ack && name != extension::endpoints &&
        name != extension::served_actions && name != extension::served_taken && name != extension::takeover) {
      throw UsageError("unknown extension '" + name +
                       "' (known: want_steps, ack, endpoints, served_actions, served_taken, takeover; auth is offered "
                       "when there is a secret)");
    }
  }
  if (!options_.secret.empty()) {
    if (!auth_available()) {
      throw NotAvailable("a shared secret was given, but authentication needs OpenSSL, which this build of rlinks "
                         "leaves out: configure it with -DRLINKS_WITH_OPENSSL=ON");
    }
    options_.secret = normalize_secret(options_.secret);
  }
  if (given_.tls && !tls_available()) {
    throw NotAvailable(given_.str() + " asks for TLS, but this build of rlinks has no OpenSSL: "
                       "configure it with -DRLINKS_WITH_OPENSSL=ON");
  }
  client_id_ = random_hex(rng_, 32);
}

Client::~Client() {
  try {
    close();
  } catch (...) {
  }
}

bool Client::agreed(std::string_view extension) const {
  return std::find(agreed_.begin(), agreed_.end(), extension) != agreed_.end();
}

ClientStats Client::stats() const {
  ClientStats stats = counters_;
  stats.unacked = pending_.size();
  return stats;
}

void Client::warn(const std::string& text) const {
  if (options_.warn) {
    options_.warn(text);
  } else {
    std::cerr << "rlinks: " << text << std::endl;
  }
}

// ---------------------------------------------------------------------------
// Retry and reconnection

// Runs `operation` on a live connection; when reliable, reconnects and runs it
// again after a drop, so `operation` must check what the reconnection resent.
// When the drop was the learner's shutting_down and no reconnection works
// (the learner stopped for good), that ERROR is what the call throws.
template <class Operation>
auto Client::run(const char* what, Operation operation) {
  if (closed_) throw UsageError("this client was closed; make a new one");
  if (options_.stop && options_.stop->raised()) throw ClientClosed(std::string(what) + ": stopped");
  int recoveries = 0;
  std::optional<ServerError> shut_down;  // the last drop, when it was the learner's shutting_down
  while (true) {
    try {
      if (transport_ == nullptr) connect_with_retries();
      return operation();
    } catch (const ConnectionLost& error) {
      discard_connection();
      if (!options_.reliable) throw;
      shut_down.reset();
      recover(what, error.what(), recoveries);
    } catch (const ServerError& error) {
      discard_connection();
      if (!options_.reliable || error.code() != kShuttingDown || recoveries >= options_.retry_attempts) throw;
      shut_down = error;
      recover(what, error.what(), recoveries);
    } catch (const ConnectFailed& error) {
      discard_connection();
      if (!shut_down) throw;
      throw ServerError(shut_down->code(), shut_down->text() + " (and " + address_.str() +
                                               " could not be reached again: " + error.what() + ")");
    } catch (...) {
      discard_connection();
      throw;
    }
  }
}

// ---------------------------------------------------------------------------
// Calls

void Client::connect() {
  run("connect", [] {});
}

std::optional<RunnerConfig> Client::get_config() {
  const Value reply = run("get_config", [&] {
    drain();
    send_message(make_message(MessageType::get_config), "GET_CONFIG");
    return await(MessageType::set_config, "SET_CONFIG (after GET_CONFIG)");
  });
  return read_runner_config(reply);
}

WeightsUpdate Client::get_state() {
  const Value reply = run("get_state", [&] {
    drain();
    send_message(make_message(MessageType::get_state), "GET_STATE");
    return await(MessageType::set_state, "SET_STATE (after GET_STATE)");
  });
  return weights_update(reply);
}

std::optional<uint64_t> Client::send_episodes(std::vector<Value> episodes) {
  run("send_episodes", [&] { make_room(); });
  const std::shared_ptr<Batch> batch = enqueue(MessageType::episodes, std::move(episodes));
  run("send_episodes", [&] {
    drain();
    if (batch->sent_on != generation_) send_batch(*batch);
  });
  return batch->seq;
}

WeightsUpdate Client::send_episodes_and_get_state(std::vector<Value> episodes) {
  const char* what = "send_episodes_and_get_state";
  run(what, [&] { make_room(); });
  const std::shared_ptr<Batch> batch = enqueue(MessageType::episodes_and_get_state, std::move(episodes));
  awaiting_state_ = batch.get();
  struct Clear {
    const Batch*& awaiting;
    ~Clear() { awaiting = nullptr; }
  } clear{awaiting_state_};
  const Value reply = run(what, [&] {
    // Sent on this connection already (a reconnect's resend_pending sent it again): its SET_STATE may be
    // here by now, and drain() would take it for a reply to nothing. await() takes ACKs and ERRORs too.
    if (batch->sent_on != generation_) drain();
    if (batch->sent_on != generation_) {
      if (batch->sent_on != 0 && !batch->seq) {
        // Written in full on a connection that then dropped, and nothing says
        // whether it arrived: asking for the weights can't train on it twice.
        send_message(make_message(MessageType::get_state), "GET_STATE");
      } else if (batch->acked) {
        // Taken by RLlib before the connection dropped (section 10.2): never
        // again; an empty batch without seq gets the weights of the next update.
        send_message(make_message(MessageType::episodes_and_get_state, {{"episodes", Array{}}, {"timesteps", 0}}),
                     "EPISODES_AND_GET_STATE (empty)");
      } else {
        send_batch(*batch);
      }
    }
    return await(MessageType::set_state, "SET_STATE (after our on-policy batch)",
                 "; on-policy, this includes the learner's training step: raise the timeout if it takes longer");
  });
  return weights_update(reply);
}

ActionsReply Client::act(std::vector<uint32_t> env, NdArray obs, std::vector<double> reward, std::vector<bool> start,
                         std::vector<bool> terminated, std::vector<bool> truncated) {
  ActRows rows;
  rows.env = std::move(env);
  rows.obs = std::move(obs);
  rows.reward = std::move(reward);
  rows.start = std::move(start);
  rows.terminated = std::move(terminated);
  rows.truncated = std::move(truncated);
  return act(rows);
}

ActionsReply Client::act(const ActRows& rows) {
  if (closed_) throw UsageError("this client was closed; make a new one");
  if (std::find(options_.extensions.begin(), options_.extensions.end(), extension::served_actions) ==
      options_.extensions.end()) {
    throw UsageError("act() needs the served_actions extension: add \"served_actions\" to ClientOptions::extensions");
  }
  rows.check();
  const auto offered = [&](std::string_view name) {
    return std::find(options_.extensions.begin(), options_.extensions.end(), name) != options_.extensions.end();
  };
  if (rows.has_served_taken() && !offered(extension::served_taken)) {
    throw UsageError("act() with taken actions or untrained episodes needs the served_taken extension: add "
                     "\"served_taken\" to ClientOptions::extensions");
  }
  if (!rows.takeover.empty() && !offered(extension::takeover)) {
    throw UsageError("act() with take-overs needs the takeover extension: add \"takeover\" to ClientOptions::extensions");
  }
  // The caller's mistakes are found here, before anything is sent: a reconnect
  // only moves envs from open to lost, which the plan treats alike but for
  // the rewriting.
  plan_act(rows, open_envs_, lost_envs_);
  return run("act", [&] {
    drain();
    if (!agreed(extension::served_actions)) throw not_agreed(extension::served_actions);
    if (rows.has_served_taken() && !agreed(extension::served_taken)) throw not_agreed(extension::served_taken);
    if (!rows.takeover.empty() && !agreed(extension::takeover)) throw not_agreed(extension::takeover);
    if (open_generation_ != generation_) {
      // A new connection: the runner closed every episode open on the old one.
      lost_envs_.insert(open_envs_.begin(), open_envs_.end());
      open_envs_.clear();
      open_generation_ = generation_;
    }
    ActPlan plan = plan_act(rows, open_envs_, lost_envs_);
    ActionsReply reply;
    if (plan.rows) {
      send_message(make_act(*plan.rows), "ACT");
      const Value message = await(MessageType::actions, "ACTIONS (after our ACT)",
                                  "; on-policy, once the runner has its share of the update this includes the "
                                  "learner's training step: raise the timeout if it takes longer");
      try {
        reply = read_actions(message, plan.wanting);
      } catch (const ProtocolError& error) {
        throw ProtocolError(error.code(), address_.str() + " answered our ACT wrongly: " + error.what());
      }
      ++counters_.acts_sent;
      counters_.act_rows_sent += plan.rows->size();
      actions_seq_no_ = reply.weights_seq_no;
    } else {
      reply.weights_seq_no = actions_seq_no_;
    }
    reply.interrupted = std::move(plan.interrupted);
    counters_.episodes_interrupted += reply.interrupted.size();
    open_envs_ = std::move(plan.open_after);
    lost_envs_ = std::move(plan.lost_after);
    return reply;
  });
}

NotAgreed Client::not_agreed(std::string_view extension) const {
  const std::string who = plain_ ? std::string("plain RLlink") : "agent '" + server_agent_ + "'";
  if (extension == extension::takeover) {
    return NotAgreed(address_.str() + " did not agree to takeover (" + who + "): it can't keep taken-over steps out "
                     "of on-policy updates; use log_action to record them as the policy's own");
  }
  if (extension == extension::served_taken) {
    return NotAgreed(address_.str() + " did not agree to served_taken: it records only the actions it computes (" +
                     who + "); run the policy locally to log your own actions");
  }
  return NotAgreed(address_.str() + " did not agree to " + std::string(extension) + ": it does not compute actions "
                   "for its clients (" + who + "); run the policy locally and send episodes instead");
}

// What to send for `rows` when the runner has episodes open for `open` and
// closed those of `lost` when a connection dropped (section 10.5: a row for an
// env with no open episode must be a start row).
Client::ActPlan Client::plan_act(const ActRows& rows, const std::unordered_set<uint32_t>& open,
                                 const std::unordered_set<uint32_t>& lost) const {
  ActPlan plan;
  plan.open_after = open;
  plan.lost_after = lost;
  std::vector<size_t> kept;
  std::vector<bool> kept_start;
  for (size_t row = 0; row < rows.size(); ++row) {
    const uint32_t env = rows.env[row];
    bool start = rows.start[row];
    if (plan.lost_after.erase(env) > 0) {
      // Its episode was closed when a connection dropped: start it again
      // here, or leave out the row that would have ended it.
      plan.interrupted.push_back(env);
      if (!start && rows.ends(row)) continue;
      start = true;
    } else if (!start && plan.open_after.count(env) == 0) {
      throw UsageError("ACT row " + std::to_string(row) + ": env " + std::to_string(env) +
                       " has no open episode (its first row, and its first row after one that ends its episode, "
                       "must be a start row)");
    }
    if (start) plan.open_after.insert(env);
    if (rows.ends(row)) {
      plan.open_after.erase(env);
    } else {
      plan.wanting.push_back(env);
    }
    kept.push_back(row);
    kept_start.push_back(start);
  }
  if (kept.size() == rows.size() && plan.interrupted.empty()) {
    plan.rows = rows;
  } else if (!kept.empty()) {
    plan.rows = rows.select(kept, kept_start);
  }
  return plan;
}

void Client::flush() {
  if (closed_) throw UsageError("this client was closed");
  if (pending_.empty()) return;
  run("flush", [&] {
    drain();
    while (!pending_.empty()) await_ack("ACK (" + std::to_string(pending_.size()) + " batch(es) unacknowledged)");
  });
}

void Client::close() {
  if (closed_) return;
  closed_ = true;
  if (!pending_.empty()) {
    warn("closing the connection to " + address_.str() + " with " + std::to_string(pending_.size()) +
         " batch(es) not acknowledged; call flush() first to wait for them");
    pending_.clear();
  }
  discard_connection();
}

// ---------------------------------------------------------------------------
// Connecting

void Client::recover(const char* what, const std::string& error, int& recoveries) {
  if (recoveries >= options_.retry_attempts) {
    throw ConnectionLost(std::string(what) + ": the connection to " + address_.str() + " kept dropping; gave up after " +
                         std::to_string(recoveries) + " reconnection(s). Last error: " + error);
  }
  if (!warned_no_ack_ && !agreed(extension::ack)) {
    warned_no_ack_ = true;
    warn(address_.str() + " does not acknowledge batches (plain RLlink): a batch in flight when the connection dropped may be lost");
  }
  warn("connection to " + address_.str() + " lost during " + what + " (" + error + "); reconnecting");
  sleep_backoff(recoveries);
  ++recoveries;
}

void Client::sleep_backoff(int failures, double most_s) {
  const double ceiling = std::min(options_.backoff_cap_s, options_.backoff_initial_s * double(uint64_t(1) << std::min(failures, 62)));
  const double seconds = std::min(most_s, std::uniform_real_distribution<double>(0.0, ceiling)(rng_));
  if (options_.stop) return options_.stop->sleep_until(deadline_after(seconds));
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

void Client::connect_with_retries() {
  std::string last_error;
  std::optional<Address> lost;
  if (uses_directory_ && (address_.host != given_.host || address_.port != given_.port)) lost = address_;
  // A client that never reached its learner waits for one that is not up yet (connect_wait_s).
  const bool first = !handshaken_;
  const auto wait_until = std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.connect_wait_s);
  const auto wait_left = [&] {
    return std::max(0.0, std::chrono::duration<double>(wait_until - std::chrono::steady_clock::now()).count());
  };
  bool waiting = false;
  int attempt = 0;
  for (; attempt < options_.retry_attempts || (waiting && wait_left() > 0); ++attempt) {
    // Past retry_attempts only the wait keeps us here: one last try at its end.
    if (attempt > 0) sleep_backoff(attempt - 1, attempt >= options_.retry_attempts ? wait_left() : 1e300);
    if (uses_directory_) address_ = given_;
    try {
      open();
      handshake();
      follow_directory(lost);
      if (handshaken_) ++counters_.reconnects;
      handshaken_ = true;
      resend_pending();
      return;
    } catch (const ServerError& error) {
      if (error.code() != kShuttingDown) throw;
      last_error = error.what();
    } catch (const ConnectionLost& error) {
      last_error = error.what();
      if (first && !waiting && options_.connect_wait_s > 0) {
        waiting = true;
        char seconds[32];
        std::snprintf(seconds, sizeof seconds, "%g", options_.connect_wait_s);
        warn("waiting up to " + std::string(seconds) + " s for the learner at " + given_.str() +
             " to listen (connect_wait_s, $RLINKS_CONNECT_WAIT_S): " + last_error);
      }
    }
    discard_connection();
  }
  throw ConnectFailed("could not connect to " + address_.str() + " after " + std::to_string(attempt) +
                      " attempt(s)" + (waiting ? " and the connect wait" : "") + ": " + last_error +
                      "; is the learner running and is the port right?");
}

void Client::open() {
  transport_ = open_transport(address_, options_.connect_timeout_s, options_.tls, options_.stop ? options_.stop->fd() : -1);
  decoder_ = FrameDecoder(options_.max_frame_bytes);
  inbox_.clear();
  agreed_.clear();
  ++generation_;
}

void Client::handshake() {
  std::vector<std::string> offered = options_.extensions;
  Map extra{{"client_id", client_id_}};
  Bytes client_nonce;
  if (!options_.secret.empty()) {
    offered.push_back(std::string(extension::auth));
    client_nonce = random_nonce();
    extra.push_back({"auth_nonce", Bin{client_nonce}});
  }
  send_message(make_message(MessageType::ping, {{"rlinks", make_offer(offered, options_.agent, std::move(extra))}}),
               "PING");
  const Value reply = await(MessageType::pong, "PONG (the handshake)",
                            "; the server took the connection but did not answer. RLlib's own server serves "
                            "one client at a time: is another client connected to it?");
  const std::optional<Offer> offer = parse_offer(reply);
  plain_ = !offer;
  server_agent_ = offer ? offer->agent : "";
  agreed_.clear();
  if (offer) {
    for (const std::string& name : offer->extensions) {
      if (std::find(offered.begin(), offered.end(), name) != offered.end() && !agreed(name)) agreed_.push_back(name);
    }
  }
  const Value* role = offer ? offer->get("role") : nullptr;
  is_directory_ = role != nullptr && role->is_str() && role->as_str() == kDirectoryRole;
  // A directory with the secret proves it like a runner (PROTOCOL.md 10.4).
  if (!options_.secret.empty()) authenticate(client_nonce, offer);
}

void Client::authenticate(const Bytes& client_nonce, const std::optional<Offer>& server_offer) {
  if (!server_offer || !server_offer->names(extension::auth)) {
    throw ProtocolError(ErrorCode::auth_failed, address_.str() + " did not agree to authenticate; this client has a "
                                                                 "secret and talks only to a server that proves it knows it (is the server's auth on?)");
  }
  const Value* nonce = server_offer->get("auth_nonce");
  if (nonce == nullptr || !nonce->is_bin() || nonce->as_bin().size() != kNonceBytes) {
    throw ProtocolError(ErrorCode::auth_failed, address_.str() + " sent no 32-byte 'auth_nonce' (msgpack bin)");
  }
  const Bytes& server_nonce = nonce->as_bin();
  send_message(make_message(MessageType::auth, {{"proof", Bin{auth_proof(options_.secret, "client", client_nonce, server_nonce)}}}),
               "AUTH");
  const Value reply = await(MessageType::auth_ok, "AUTH_OK (authentication)");
  if (!same_proof(auth_proof(options_.secret, "server", client_nonce, server_nonce), reply.find("proof")->as_bin())) {
    throw ProtocolError(ErrorCode::auth_failed,
                        address_.str() + " did not prove it knows the shared secret; is it the learner you meant?");
  }
}

void Client::follow_directory(const std::optional<Address>& lost) {
  if (!is_directory_) return;
  uses_directory_ = true;
  const Address directory = address_;
  send_message(make_message(MessageType::get_endpoints), "GET_ENDPOINTS");
  const Value reply = await(MessageType::endpoints, "ENDPOINTS (from the directory)");
  discard_connection();
  // Least-loaded first, as the directory sent them, but the runner we just lost last: the directory
  // learns that a runner is cut off only after the learner's next iteration, and a connection to it
  // would take the whole connect timeout to fail.
  std::vector<Address> runners;
  for (const Value& entry : reply.find("endpoints")->as_array()) {
    const Value* host = entry.find("host");
    const Value* port = entry.find("port");
    uint64_t number = 0;
    if (host == nullptr || !host->is_str() || port == nullptr || !port->get_uint64(number) || number < 1 || number > 65535) {
      continue;
    }
    runners.push_back(Address{host->as_str(), uint16_t(number), given_.tls});
  }
  if (lost) {
    std::stable_partition(runners.begin(), runners.end(), [&](const Address& runner) {
      return runner.host != lost->host || runner.port != lost->port;
    });
  }
  std::string tried;
  for (const Address& runner : runners) {
    address_ = runner;
    try {
      open();
      handshake();
      if (is_directory_) throw ConnectionLost("it is a directory too");
      return;
    } catch (const ConnectionLost& error) {
      tried += "; " + address_.str() + " (" + error.what() + ")";
    } catch (const ServerError& error) {
      tried += "; " + address_.str() + " (" + error.what() + ")";
    } catch (const Timeout& error) {
      tried += "; " + address_.str() + " (" + error.what() + ")";
    } catch (const ProtocolError& error) {
      tried += "; " + address_.str() + " (" + error.what() + ")";
    }
    discard_connection();
  }
  address_ = directory;
  throw ConnectionLost("the directory at " + directory.str() + " lists no runner that answers" +
                       (tried.empty() ? std::string(" yet") : ":" + tried.substr(1)));
}

void Client::resend_pending() {
  if (pending_.empty()) return;
  if (!agreed(extension::ack)) {
    warn(address_.str() + " no longer acknowledges batches; " + std::to_string(pending_.size()) +
         " unacknowledged batch(es) may be lost");
    pending_.clear();
    return;
  }
  // A copy: an ACK read while a SET_STATE is awaited below takes its batch out of pending_.
  const std::vector<std::shared_ptr<Batch>> batches(pending_.begin(), pending_.end());
  for (const std::shared_ptr<Batch>& batch : batches) {
    if (batch->acked) continue;  // confirmed while an earlier one's weights were awaited
    send_batch(*batch);
    if (batch->type == MessageType::episodes_and_get_state && batch.get() != awaiting_state_) {
      // Sent again, an on-policy batch is owed a SET_STATE before anything
      // else; its weights went to the call that sent it first: read and drop.
      await(MessageType::set_state, "SET_STATE (owed for on-policy batch " + std::to_string(batch->seq.value_or(0)) +
                                        ", sent again)");
    }
  }
}

void Client::discard_connection() {
  transport_.reset();
  inbox_.clear();
  if (!pending_.empty() && !options_.reliable) {
    warn("connection to " + address_.str() + " closed with " + std::to_string(pending_.size()) +
         " batch(es) not acknowledged; they may be lost (reliable mode resends them)");
    pending_.clear();
  }
}

// ---------------------------------------------------------------------------
// Batches

std::shared_ptr<Client::Batch> Client::enqueue(MessageType type, std::vector<Value> episodes) {
  auto batch = std::make_shared<Batch>();
  batch->type = type;
  for (const Value& episode : episodes) {
    if (!episode.is_map()) throw UsageError("an episode state must be a map");
    batch->steps += episode_steps(episode);
  }
  Map fields{{"episodes", Array(std::make_move_iterator(episodes.begin()), std::make_move_iterator(episodes.end()))},
             {"timesteps", batch->steps}};
  const bool acknowledged = agreed(extension::ack);
  if (acknowledged) {
    batch->seq = next_seq_++;
    fields.push_back({"seq", *batch->seq});
  }
  batch->frame = encode_frame(make_message(type, std::move(fields)));
  if (acknowledged) pending_.push_back(batch);
  return batch;
}

void Client::make_room() {
  drain();
  while (pending_.size() >= options_.max_unacked) {
    await_ack("ACK (" + std::to_string(pending_.size()) + " batches unacknowledged, max_unacked=" +
              std::to_string(options_.max_unacked) + ")");
  }
}

void Client::send_batch(Batch& batch) {
  send_frame(batch.frame, to_string(batch.type));
  batch.sent_on = generation_;
  if (++batch.sends == 1) {
    ++counters_.batches_sent;
    counters_.steps_sent += batch.steps;
  } else {
    ++counters_.batches_resent;
  }
  if (!options_.reliable) batch.frame = Bytes();  // never sent again
}

void Client::on_ack(uint64_t seq) {
  for (auto batch = pending_.begin(); batch != pending_.end(); ++batch) {
    if ((*batch)->seq == seq) {
      (*batch)->acked = true;
      ++counters_.batches_acked;
      counters_.steps_acked += (*batch)->steps;
      pending_.erase(batch);
      return;
    }
  }
  if (seq > 0 && seq < next_seq_) return;  // confirmed before; a resend gets a second ACK
  throw ProtocolError(ErrorCode::unexpected_message, address_.str() + " acknowledged seq " + std::to_string(seq) +
                                                         ", which was never sent (last sent: " +
                                                         std::to_string(next_seq_ - 1) + ")");
}

WeightsUpdate Client::weights_update(const Value& set_state) const {
  WeightsUpdate update{read_weight_set(*set_state.find("state")), std::nullopt};
  uint64_t want = 0;
  const Value* want_steps = set_state.find("want_steps");
  if (agreed(extension::want_steps) && want_steps != nullptr && want_steps->get_uint64(want)) update.want_steps = want;
  return update;
}

// ---------------------------------------------------------------------------
// Frames

void Client::send_message(const Value& message, const std::string& what) { send_frame(encode_frame(message), what); }

void Client::send_frame(const Bytes& frame, const std::string& what) {
  if (transport_ == nullptr) throw ConnectionLost("not connected to " + address_.str());
  try {
    transport_->write_all(frame.data(), frame.size(), deadline_after(options_.timeout_s));
  } catch (const ConnectionLost& error) {
    // A server that refuses a frame says why, then closes without reading the
    // rest; its ERROR tells more than "connection reset".
    try {
      for (int i = 0; i < kMaxDrainReads && pump(Clock::now(), what); ++i) {
      }
    } catch (const ServerError&) {
      throw;
    } catch (const Error&) {
    }
    for (const Value& message : inbox_) {
      if (validate_message(message) == MessageType::error) throw server_error(message);
    }
    throw ConnectionLost("connection to " + address_.str() + " lost while sending " + what + ": " + error.what());
  } catch (const Timeout&) {
    throw Timeout(address_.str() + " did not take our " + what + " within " + std::to_string(options_.timeout_s) +
                  " s (it stopped reading)");
  }
}

Value Client::await(MessageType expected, const std::string& what, const std::string& hint) {
  const Deadline deadline = deadline_after(options_.timeout_s);
  while (true) {
    while (inbox_.empty()) {
      if (!pump(deadline, what)) {
        throw Timeout("no " + what + " from " + address_.str() + " within " + std::to_string(int(options_.timeout_s)) +
                      " s" + hint);
      }
    }
    Value message = std::move(inbox_.front());
    inbox_.pop_front();
    if (validate_message(message) == expected) return message;
    handle_unsolicited(message, what);
  }
}

void Client::await_ack(const std::string& what) {
  const Deadline deadline = deadline_after(options_.timeout_s);
  while (inbox_.empty()) {
    if (!pump(deadline, what)) throw Timeout("no " + what + " from " + address_.str());
  }
  Value message = std::move(inbox_.front());
  inbox_.pop_front();
  handle_unsolicited(message, what);
}

void Client::handle_unsolicited(const Value& message, const std::string& what) {
  const MessageType type = validate_message(message);
  if (type == MessageType::ack && agreed(extension::ack)) {
    uint64_t seq = 0;
    message.find("seq")->get_uint64(seq);
    return on_ack(seq);
  }
  if (type == MessageType::error) throw server_error(message);
  throw ProtocolError(ErrorCode::unexpected_message,
                      address_.str() + " sent " + to_string(type) + " while we waited for " + what);
}

// Takes in whatever the server sent between calls (ACKs, an ERROR, EOF) without waiting.
void Client::drain() {
  const std::string what = "the next call";
  for (int reads = 0; reads <= kMaxDrainReads; ++reads) {
    while (!inbox_.empty()) {
      Value message = std::move(inbox_.front());
      inbox_.pop_front();
      handle_unsolicited(message, what);
    }
    if (reads == kMaxDrainReads || !pump(Clock::now(), what)) return;
  }
}

// One read into the decoder; false when nothing arrived by `deadline`.
bool Client::pump(Deadline deadline, const std::string& what) {
  if (transport_ == nullptr) throw ConnectionLost("not connected to " + address_.str());
  std::vector<Value> messages;
  std::optional<size_t> got;
  try {
    size_t space = 0;
    if (uint8_t* body = decoder_.body_space(space)) {
      got = transport_->read_some(body, space, deadline);
      if (got && *got > 0) decoder_.body_filled(*got, messages);
    } else {
      got = transport_->read_some(read_buffer_.data(), read_buffer_.size(), deadline);
      if (got && *got > 0) decoder_.feed(read_buffer_.data(), *got, messages);
    }
  } catch (const ProtocolError& error) {
    for (const Value& message : messages) {
      if (validate_message(message) == MessageType::error) throw server_error(message);
    }
    report_violation(error);
    throw ProtocolError(error.code(), address_.str() + " sent invalid RLlink: " + error.what() +
                                          (decoder_.frames() == 0 ? "; is it an RLlink learner's port?" : ""));
  }
  if (!got) return false;
  if (*got == 0) {
    try {
      decoder_.eof();
    } catch (const ProtocolError& error) {
      throw ConnectionLost(address_.str() + " closed the connection while we waited for " + what + ": " + error.what());
    }
    throw ConnectionLost(address_.str() + " closed the connection while we waited for " + what);
  }
  for (Value& message : messages) inbox_.push_back(std::move(message));
  return true;
}

// Best effort: tell the server why we are about to close (section 2).
void Client::report_violation(const ProtocolError& error) {
  try {
    const Bytes frame = encode_frame(make_message(
        MessageType::error, {{"code", to_string(error.code())}, {"message", std::string(error.what()).substr(0, 512)}}));
    transport_->write_all(frame.data(), frame.size(), deadline_after(kErrorReportSeconds));
  } catch (const Error&) {
  }
}

}  // namespace rlinks
