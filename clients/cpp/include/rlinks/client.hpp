// A simulator's connection to an RLlib learner over RLlink (PROTOCOL.md sections 6 and 10).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "rlinks/address.hpp"
#include "rlinks/errors.hpp"
#include "rlinks/framing.hpp"
#include "rlinks/messages.hpp"
#include "rlinks/offer.hpp"
#include "rlinks/runner_config.hpp"
#include "rlinks/served.hpp"
#include "rlinks/transport.hpp"
#include "rlinks/weights.hpp"

namespace rlinks {

class StopSignal;

struct ClientOptions {
  // Any one wait: a reply (on-policy: the learner's training step included),
  // the server taking a frame, room in the ack window.
  double timeout_s = 30.0;
  double connect_timeout_s = 10.0;  // one TCP (and TLS) connection attempt
  int retry_attempts = 5;           // connection attempts per connect, and reconnections per call
  double backoff_initial_s = 0.2;   // exponential backoff with full jitter between attempts
  double backoff_cap_s = 10.0;
  // A client that has never reached its learner keeps trying one that is not up yet (refused, or a
  // directory with no runner yet) for this long, past retry_attempts, with the backoff above; it says
  // so once through warn. Negative (the default): $RLINKS_CONNECT_WAIT_S if set, else 60 s, as the
  // Python and JavaScript clients. 0: retry_attempts attempts and no more.
  double connect_wait_s = -1.0;
  // Reconnect when the connection drops mid-call (or the server is shutting
  // down) and resend every unacknowledged batch. A call whose reconnections
  // all fail after the learner's shutting_down throws that ServerError (the
  // learner stopped for good), not ConnectFailed.
  bool reliable = false;
  size_t max_unacked = 16;  // batches awaiting an ACK at once (flow control)
  // Offered in the handshake. Add "served_actions" to call act() (section 10.5).
  std::vector<std::string> extensions{"want_steps", "ack", "endpoints"};
  uint32_t max_frame_bytes = kDefaultMaxFrameBytes;
  std::string secret;  // shared secret (normalize_secret); empty: no authentication
  TlsOptions tls;      // for tls:// addresses
  std::string agent = "rlinks-cpp/0.1.0";
  // Where warnings go (reconnects, batches that may be lost); default stderr.
  std::function<void(const std::string&)> warn;
  // Once raised, every call (and every wait inside one, reconnects included)
  // throws ClientClosed at once. EnvClient::stop() raises its own.
  std::shared_ptr<StopSignal> stop;
};

struct WeightsUpdate {
  WeightSet weights;
  std::optional<uint64_t> want_steps;  // steps wanted before the next on-policy batch, if agreed
};

struct ClientStats {
  uint64_t batches_sent = 0;  // written in full at least once
  uint64_t steps_sent = 0;
  uint64_t batches_acked = 0;
  uint64_t steps_acked = 0;
  uint64_t batches_resent = 0;
  uint64_t reconnects = 0;
  size_t unacked = 0;
  uint64_t acts_sent = 0;  // served_actions: ACTs answered, and their rows
  uint64_t act_rows_sent = 0;
  uint64_t episodes_interrupted = 0;  // open episodes the runner closed because the connection dropped
};

// One blocking connection to an rlinks runner (through its directory, if
// given the directory's address) or to RLlib's own server. Not thread-safe.
//
// Every call connects first if needed. Errors: ConnectFailed (no attempt
// worked), ConnectionLost, Timeout, ServerError (the server sent ERROR),
// ProtocolError (the server broke the protocol; unexpected_message for a
// reply out of turn, auth_failed when it can't prove it knows the secret),
// NotAvailable, NotAgreed (act() and a server without served_actions),
// TlsFailed, UsageError, ClientClosed (ClientOptions::stop was raised).
class Client {
 public:
  explicit Client(std::string_view address, ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  void connect();
  // The learner's setup; nullopt when it only offers RLlib's pickle.
  std::optional<RunnerConfig> get_config();
  WeightsUpdate get_state();
  // Off-policy: sends a batch of episode states and returns its seq (none
  // without `ack`) once written; its ACK is read by later calls or flush().
  std::optional<uint64_t> send_episodes(std::vector<Value> episodes);
  // On-policy: sends a batch and waits for the weights trained on it.
  WeightsUpdate send_episodes_and_get_state(std::vector<Value> episodes);
  // Served actions (section 10.5; offer "served_actions" in
  // ClientOptions::extensions, and "served_taken" and "takeover" for rows with
  // their columns, 10.5.1 and 10.8): sends one ACT with `rows` and returns the
  // ACTIONS for it, one action per row that wants one (neither terminated
  // nor truncated), for those rows' envs in row order. One ACT at a time:
  // the call returns when its ACTIONS arrived, and nothing else is sent
  // meanwhile. On-policy, an ACT that wants actions once the runner has its
  // share of the update is answered after the training step, with the new
  // policy's actions: timeout_s must cover that wait, as for
  // send_episodes_and_get_state.
  //
  // Episodes: an env's first row must be a start row, and so must its first
  // row after an ending one (UsageError otherwise). When the connection
  // drops, the runner closes every open episode of this client as truncated
  // at its last complete step. On the next connection (this call's retry
  // when reliable, or any later call) every env's episode starts again: the
  // first row of each env whose episode was open goes as a start row (a new
  // episode begins at that observation) and an ending row for it is left
  // out; the reply's `interrupted` names those envs. A reply can then have
  // no actions at all, without an ACT sent, if every row was left out.
  //
  // The runner also closes an env's episode when no row for it follows an
  // action within its served_report_timeout_s, and cuts off a client that
  // sends no ACT that long while it has open episodes: step every env often.
  //
  // Errors as for the other calls, and NotAgreed when the server did not
  // agree to served_actions (RLlib's own server, a runner that doesn't serve
  // actions), or to served_taken or takeover for rows with their columns; ProtocolError invalid_message when the ACTIONS are not for the
  // envs asked (wrong envs or order, or a different number of actions).
  ActionsReply act(const ActRows& rows);
  ActionsReply act(std::vector<uint32_t> env, NdArray obs, std::vector<double> reward, std::vector<bool> start,
                   std::vector<bool> terminated, std::vector<bool> truncated);
  // Waits until every batch sent is acknowledged (no-op without `ack`).
  void flush();
  // Closes for good; unacknowledged batches are given up, with a warning.
  void close();

  const std::string& client_id() const { return client_id_; }
  bool connected() const { return transport_ != nullptr; }
  const Address& address() const { return address_; }  // the runner, once the directory named one
  bool plain_rllib() const { return plain_; }            // the server answered a bare PONG
  bool agreed(std::string_view extension) const;
  // The error for a call that needs `extension` (served_actions, served_taken,
  // takeover) from a server that did not agree to it, saying what to do instead.
  NotAgreed not_agreed(std::string_view extension) const;
  const std::string& server_agent() const { return server_agent_; }
  ClientStats stats() const;

 private:
  struct Batch {
    std::optional<uint64_t> seq;
    MessageType type = MessageType::episodes;
    Bytes frame;  // kept for resending (reliable) until acknowledged
    uint64_t steps = 0;
    uint64_t sent_on = 0;  // generation of the connection it was last written on in full; 0: never
    int sends = 0;
    bool acked = false;
  };

  template <class Operation>
  auto run(const char* what, Operation operation);
  void recover(const char* what, const std::string& error, int& recoveries);
  void connect_with_retries();
  void open();
  void handshake();
  void authenticate(const Bytes& client_nonce, const std::optional<Offer>& server_offer);
  // `lost`: the runner whose connection just dropped; it is tried last (it may be cut off).
  void follow_directory(const std::optional<Address>& lost);
  void resend_pending();
  void discard_connection();

  struct ActPlan {
    std::optional<ActRows> rows;  // to send; none when every row was left out
    std::vector<uint32_t> wanting;
    std::vector<uint32_t> interrupted;
    std::unordered_set<uint32_t> open_after, lost_after;
  };
  ActPlan plan_act(const ActRows& rows, const std::unordered_set<uint32_t>& open,
                   const std::unordered_set<uint32_t>& lost) const;

  std::shared_ptr<Batch> enqueue(MessageType type, std::vector<Value> episodes);
  void make_room();
  void send_batch(Batch& batch);
  void on_ack(uint64_t seq);
  WeightsUpdate weights_update(const Value& set_state) const;

  void send_message(const Value& message, const std::string& what);
  void send_frame(const Bytes& frame, const std::string& what);
  Value await(MessageType expected, const std::string& what, const std::string& hint = "");
  void await_ack(const std::string& what);
  void handle_unsolicited(const Value& message, const std::string& what);
  void drain();
  bool pump(Deadline deadline, const std::string& what);
  void report_violation(const ProtocolError& error);
  void warn(const std::string& text) const;
  void sleep_backoff(int failures, double most_s = 1e300);

  ClientOptions options_;
  Address given_;    // as given; when it is a directory, every (re)connect asks it again
  Address address_;  // the one connected to
  bool uses_directory_ = false;
  std::string client_id_;
  std::mt19937_64 rng_;

  std::unique_ptr<Transport> transport_;
  FrameDecoder decoder_;
  std::deque<Value> inbox_;
  std::vector<uint8_t> read_buffer_;
  uint64_t generation_ = 0;
  bool handshaken_ = false;  // ever
  bool closed_ = false;
  bool plain_ = false;
  bool is_directory_ = false;
  bool warned_no_ack_ = false;
  std::vector<std::string> agreed_;
  std::string server_agent_;

  uint64_t next_seq_ = 1;
  std::deque<std::shared_ptr<Batch>> pending_;
  // The on-policy batch whose call waits for its SET_STATE now (resend_pending
  // leaves that answer to the call; any other resent on-policy batch's is dropped).
  const Batch* awaiting_state_ = nullptr;
  ClientStats counters_;

  // served_actions: the envs with an episode open on the runner, as of
  // connection `open_generation_`, and those whose open episode a dropped
  // connection closed (started again by their next row).
  std::unordered_set<uint32_t> open_envs_, lost_envs_;
  uint64_t open_generation_ = 0;
  uint64_t actions_seq_no_ = 0;
};

}  // namespace rlinks
