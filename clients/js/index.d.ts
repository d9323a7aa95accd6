// Types of rlinks-client (the JavaScript RLlink client). Hand-written; `npm run typecheck` checks them
// against test/types.ts, which uses every call the README shows.

// ---------------------------------------------------------------------------
// Errors (docs/PROTOCOL.md section 11)

export declare const ErrorCode: Readonly<{
  PROTOCOL_ERROR: "protocol_error";
  BAD_FRAME: "bad_frame";
  FRAME_TOO_LARGE: "frame_too_large";
  BAD_BODY: "bad_body";
  UNSAFE_PAYLOAD: "unsafe_payload";
  INVALID_MESSAGE: "invalid_message";
  UNSUPPORTED_MESSAGE: "unsupported_message";
  AUTH_FAILED: "auth_failed";
  LIMIT_EXCEEDED: "limit_exceeded";
  BAD_EPISODE: "bad_episode";
  SERVER_ERROR: "server_error";
  SHUTTING_DOWN: "shutting_down";
  UNEXPECTED_MESSAGE: "unexpected_message";
}>;
export type ErrorCodeValue = (typeof ErrorCode)[keyof typeof ErrorCode];
export declare const ERROR_CODES: ReadonlySet<ErrorCodeValue>;

export declare class RLinksError extends Error {}
export declare class LocalProtocolError extends RLinksError {}
export declare class ProtocolError extends RLinksError {
  constructor(message: string, code?: string);
  readonly code: string;
}
export declare class FrameError extends ProtocolError {}
export declare class FrameTooLarge extends FrameError {}
export declare class DecodeError extends ProtocolError {}
export declare class UnsafePayload extends DecodeError {}
export declare class InvalidMessage extends ProtocolError {}
export declare class UnsupportedMessage extends InvalidMessage {}
export declare class UnexpectedMessage extends UnsupportedMessage {}
export declare class AuthFailed extends ProtocolError {}
export declare class ServerError extends RLinksError {
  constructor(code: string, text: string);
  readonly code: string;
  readonly text: string;
}
export declare class TrainingEnded extends ServerError {
  constructor(text: string);
}
export declare class ConnectionLost extends RLinksError {}
export declare class ConnectFailed extends RLinksError {}
export declare class Timeout extends RLinksError {}
export declare class ClientClosed extends RLinksError {}
export declare class UsageError extends RLinksError {}
export declare class NotAgreed extends RLinksError {}
export declare class UnsupportedModel extends RLinksError {}

// ---------------------------------------------------------------------------
// Values on the wire (sections 3 and 4)

export declare class DType {
  readonly str: string;
  readonly order: "<" | ">" | "|" | "=";
  readonly kind: "b" | "i" | "u" | "f" | "c" | "S" | "U";
  readonly itemsize: number;
  readonly bigEndian: boolean;
}
export type TypedArray =
  | Int8Array | Uint8Array | Uint8ClampedArray | Int16Array | Uint16Array | Int32Array | Uint32Array
  | Float32Array | Float64Array | BigInt64Array | BigUint64Array;

/** A numpy array (or numpy scalar) as msgpack-numpy sends it. */
export declare class NdArray {
  constructor(dtype: string, shape: readonly number[], bytes: Uint8Array, options?: { scalar?: boolean });
  static from(values: TypedArray, shape?: readonly number[]): NdArray;
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly bytes: Uint8Array;
  readonly scalar: boolean;
  readonly size: number;
  values(): TypedArray;
  toFloat32(): Float32Array;
  item(): number | bigint | boolean;
}
export declare class Complex {
  readonly real: number;
  readonly imag: number;
}
/** A number sent as a msgpack float64 even when whole. */
export declare class Float64 {
  constructor(value: number);
  readonly value: number;
}
export declare function float64(value: number): Float64;
export declare function encodeBody(value: unknown): Uint8Array;
export declare function decodeBody(body: Uint8Array): unknown;

// ---------------------------------------------------------------------------
// Framing and messages (sections 2 and 5)

export declare const HEADER_BYTES: 8;
export declare const MAX_BODY_BYTES: 99999999;
export declare const DEFAULT_MAX_FRAME_BYTES: number;

export declare const MessageType: Readonly<{
  PING: "PING"; EPISODES: "EPISODES"; GET_STATE: "GET_STATE"; GET_CONFIG: "GET_CONFIG";
  EPISODES_AND_GET_STATE: "EPISODES_AND_GET_STATE"; PONG: "PONG"; SET_STATE: "SET_STATE"; SET_CONFIG: "SET_CONFIG";
  ACTION_SPACE: "ACTION_SPACE"; OBSERVATION_SPACE: "OBSERVATION_SPACE"; GET_WORKER_ARGS: "GET_WORKER_ARGS";
  GET_WEIGHTS: "GET_WEIGHTS"; REPORT_SAMPLES: "REPORT_SAMPLES"; START_EPISODE: "START_EPISODE";
  GET_ACTION: "GET_ACTION"; LOG_ACTION: "LOG_ACTION"; LOG_RETURNS: "LOG_RETURNS"; END_EPISODE: "END_EPISODE";
  ERROR: "ERROR"; ACK: "ACK"; AUTH: "AUTH"; AUTH_OK: "AUTH_OK"; GET_ENDPOINTS: "GET_ENDPOINTS";
  ENDPOINTS: "ENDPOINTS"; ACT: "ACT"; ACTIONS: "ACTIONS"; GET_MODULES: "GET_MODULES"; MODULES: "MODULES";
  SAMPLES: "SAMPLES";
}>;
export type MessageTypeName = (typeof MessageType)[keyof typeof MessageType];
export declare const OLD_API_TYPES: ReadonlySet<string>;
export interface Message {
  type: MessageTypeName;
  [field: string]: unknown;
}
export declare function validateMessage(message: unknown): Message;
export declare function encodeMessageBody(message: Message): Uint8Array;
export declare function encodeMessage(message: Message): Uint8Array;
export declare function encodeFrame(body: Uint8Array): Uint8Array;
export declare function decodeMessage(body: Uint8Array, maxFrameBytes?: number): Message;
export declare class FrameDecoder {
  constructor(maxFrameBytes?: number);
  readonly maxFrameBytes: number;
  readonly frames: number;
  readonly beforeError: Message[];
  readonly inFrame: boolean;
  feed(data: Uint8Array): Message[];
  eof(): void;
}

// ---------------------------------------------------------------------------
// Extensions and auth (section 10)

export declare const Extension: Readonly<{
  WANT_STEPS: "want_steps"; ACK: "ack"; AUTH: "auth"; ENDPOINTS: "endpoints";
  SERVED_ACTIONS: "served_actions"; SERVED_TAKEN: "served_taken"; POLICY_GRAPH: "policy_graph"; MULTI_AGENT: "multi_agent";
  TAKEOVER: "takeover"; TIMESTEP: "timestep"; SAMPLES: "samples"; WEIGHTS_NOTICE: "weights_notice";
}>;
export type ExtensionName = (typeof Extension)[keyof typeof Extension];
export interface Offer {
  version: number;
  extensions: Set<string>;
  agent: string;
  extra: Record<string, unknown>;
}
export declare function makeOffer(extensions: Iterable<string>, agent?: string, extra?: Record<string, unknown>): Record<string, unknown>;
export declare function parseOffer(message: Message): Offer | null;
export declare const SECRET_ENV: "RLINKS_SECRET";
export declare function normalizeSecret(secret: string | Uint8Array): Uint8Array;

// ---------------------------------------------------------------------------
// Spaces, weights, episodes, policy (sections 7 to 9)

export declare class DiscreteSpace {
  constructor(n: number);
  readonly kind: "discrete";
  readonly n: number;
}
export declare class BoxSpace {
  constructor(shape: readonly number[], low?: ArrayLike<number | null> | NdArray, high?: ArrayLike<number | null> | NdArray);
  readonly kind: "box";
  readonly shape: readonly number[];
  readonly size: number;
  readonly low: Float32Array;
  readonly high: Float32Array;
}
export type ActionSpace = DiscreteSpace | BoxSpace;
export declare function readActionSpace(space: unknown, what?: string): ActionSpace | null;
export interface RunnerConfig {
  algorithm: string;
  rolloutFragmentLength: number;
  onPolicy: boolean;
  modelConfig: Record<string, unknown>;
  observationSpace: Record<string, unknown>;
  actionSpace: Record<string, unknown>;
  observationSize: number | null;
  fcnetActivation: string;
  headFcnetActivation: string;
  /** The module's ONNX policy graph (PROTOCOL.md 10.7), when the runner agreed to policy_graph and exported one. */
  policyGraph: Uint8Array | null;
  /** A paced runner's paced_in_flight (PROTOCOL.md 9): batches an off-policy client keeps sent and unconfirmed; null: none named. */
  pacedInFlight: number | null;
  description: Record<string, unknown>;
}
export declare function readRunnerConfig(setConfig: Message): RunnerConfig | null;
/** SET_CONFIG's key holding the module's ONNX policy graph: "policy_graph". */
export declare const POLICY_GRAPH_KEY: string;

export interface WeightSet {
  params: Map<string, NdArray>;
  seqNo: number;
}
export declare function readWeightSet(state: unknown): WeightSet;

export interface Taken {
  /** As recorded for the learner (a Box action before unsquashing). */
  action: number | Float32Array;
  /** As the env applies it. */
  forEnv: number | Float32Array;
  logp: number;
  distInputs: Float32Array;
}
export declare class EpisodeBuilder {
  constructor(options: {
    observationSize: number; observationShape?: number[]; observationType?: TypedArrayConstructor;
    boxActionShape?: number[] | null; distInputsSize?: number; maxChunkSteps?: number;
    /** A recurrent module's state shapes by state key: each step's `stateOut` is recorded as `state_out`. */
    stateShapes?: Record<string, number[]> | null;
  });
  readonly running: boolean;
  readonly steps: number;
  readonly pendingSteps: number;
  reset(observation: ArrayLike<number>): string;
  step(taken: Pick<Taken, "action"> & Partial<Taken> & { stateOut?: RecurrentState | null }, reward: number, observation: ArrayLike<number>, terminated?: boolean, truncated?: boolean): void;
  truncate(): void;
  takeChunks(): Record<string, unknown>[];
}
export declare function episodeSteps(state: unknown): number;

export declare class Network {
  constructor(params: Map<string, NdArray>, fcnetActivation: string, headFcnetActivation: string, space: ActionSpace);
  readonly observationSize: number;
  readonly outputSize: number;
  forward(observation: ArrayLike<number>): Float32Array;
}
export declare class Random {
  constructor(seed?: number);
  next(): number;
  normal(): number;
}
export declare function categoricalLogp(logits: ArrayLike<number>, action: number): number;
export declare function gaussianLogp(distInputs: ArrayLike<number>, action: ArrayLike<number>): number;
export declare function actionForEnv<A extends number | Float32Array>(space: ActionSpace | null, action: A, options?: { normalize?: boolean; clip?: boolean }): A;
export declare class LocalPolicy {
  constructor(weights: WeightSet, options: {
    space: ActionSpace; fcnetActivation?: string; headFcnetActivation?: string; explore?: boolean; seed?: number;
    normalizeActions?: boolean; clipActions?: boolean;
  });
  readonly seqNo: number;
  readonly observationSize: number;
  readonly outputSize: number;
  readonly network: Network;
  setWeights(weights: WeightSet): void;
  act(observation: ArrayLike<number>): Taken;
}

/** The typed arrays a Box observation's values may be held in (its dtype's). */
export type TypedArrayConstructor =
  | Float32ArrayConstructor | Float64ArrayConstructor | Uint8ArrayConstructor | Int8ArrayConstructor
  | Uint16ArrayConstructor | Int16ArrayConstructor | Uint32ArrayConstructor | Int32ArrayConstructor
  | BigInt64ArrayConstructor | BigUint64ArrayConstructor;
/** One observation for a policy graph: a Box's values (flat), or a Dict (object) / Tuple (array) of them. */
export type GraphObservation = number | ArrayLike<number> | { [key: string]: GraphObservation } | GraphObservation[];
/** A recurrent module's state, by its state keys (RLlib's LSTM: h, c). */
export type RecurrentState = Record<string, Float32Array>;
export interface GraphTaken extends Taken {
  /** A recurrent module's state after this step (what the next takes); null when stateless. */
  stateOut: RecurrentState | null;
}
/** The interface in a policy graph's metadata (rlinks_rllib/protocol/policy_graph.py), checked. */
export interface GraphInterface {
  version: number;
  observation_space: Record<string, unknown>;
  observation_inputs: string[];
  state_keys: string[];
  state_inputs: string[];
  state_outputs: string[];
  initial_state: Record<string, unknown>;
  parameters: string[];
  output: string;
}
/** The graph's metadata entry holding its interface: "rlinks.policy". */
export declare const GRAPH_METADATA_KEY: string;
/** onnxruntime-web, imported once (UnsupportedModel naming the package when it is not installed). */
export declare function loadOnnxRuntime(): Promise<unknown>;
/** An ONNX model's metadata_props, read from its bytes. */
export declare function readGraphMetadata(bytes: Uint8Array): Map<string, string>;
export declare function readGraphInterface(text: string | undefined, inputNames: readonly string[]): GraphInterface;
/** Any exported RLlib module, run here as its ONNX policy graph with onnxruntime-web (PROTOCOL.md 8.1). */
export declare class OnnxPolicy {
  /** `onnxRuntime`: a module with onnxruntime's JavaScript API (default: onnxruntime-web, imported now). */
  static create(graph: Uint8Array, weights: WeightSet, options: {
    space: ActionSpace; explore?: boolean; seed?: number; normalizeActions?: boolean; clipActions?: boolean;
    onnxRuntime?: unknown;
  }): Promise<OnnxPolicy>;
  readonly seqNo: number;
  readonly interface: GraphInterface;
  readonly observationSpace: Record<string, unknown>;
  /** A plain Box observation's shape, values and typed array; null for a Dict or Tuple. */
  readonly observationShape: number[] | null;
  readonly observationSize: number | null;
  readonly observationType: TypedArrayConstructor | null;
  readonly outputSize: number;
  readonly stateful: boolean;
  readonly stateShapes: Record<string, number[]>;
  initialState(): RecurrentState;
  setWeights(weights: WeightSet): void;
  forward(observations: GraphObservation[], states?: RecurrentState[]): Promise<{ distInputs: Float32Array[]; stateOut: RecurrentState[] | null }>;
  act(observation: GraphObservation, state?: RecurrentState): Promise<GraphTaken>;
  release(): Promise<void>;
}

// ---------------------------------------------------------------------------
// Transports and the client (section 6)

export interface Address {
  readonly scheme: "tcp" | "tls" | "ws" | "wss";
  readonly host: string;
  readonly port: number;
  readonly path: string;
  toString(): string;
}
export declare function parseAddress(text: string): Address;
export declare abstract class Transport {
  readonly address: Address;
  readonly closed: boolean;
  readonly received: number;
  next(deadline: number): Promise<Message | null>;
  poll(): Message | undefined;
  send(body: Uint8Array, timeoutMs: number): Promise<void>;
  sendMessage(message: Message, timeoutMs: number): Promise<void>;
  close(): void;
}
export interface TlsOptions {
  /** PEM: the CA to check the server with (default: the system's), a client certificate and its key. */
  ca?: string | Uint8Array;
  cert?: string | Uint8Array;
  key?: string | Uint8Array;
}
export declare function openTransport(address: Address, options: { connectTimeoutMs: number; maxFrameBytes: number; tls?: TlsOptions }): Promise<Transport>;

export interface ClientOptions {
  /** Any one wait: a reply (on-policy: the training step included), the server taking a message. */
  timeoutMs?: number;
  connectTimeoutMs?: number;
  /** Connection attempts per connect, and reconnections per call. */
  retryAttempts?: number;
  backoffInitialMs?: number;
  backoffCapMs?: number;
  /** Reconnect after a drop and send again what was not acknowledged. */
  reliable?: boolean;
  maxUnacked?: number;
  /** After the learner's shutting_down, how long a reliable client tries to reconnect before it ends (default 30 s under Node, 0 in a browser). */
  shutdownGraceMs?: number;
  /**
   * How long a client that has never reached its learner keeps trying one that is not up yet, past
   * retryAttempts (default: $RLINKS_CONNECT_WAIT_S under Node, else 60 s; 0: no wait).
   */
  connectWaitMs?: number;
  extensions?: readonly string[];
  maxFrameBytes?: number;
  /** The learner's shared secret (at least 16 bytes); null: no authentication. */
  secret?: string | Uint8Array | null;
  /** For tls:// and (under Node) wss://. */
  tls?: TlsOptions;
  agent?: string;
  /** Under Node, the Origin header a ws:// connection sends (a browser sends its page's own). */
  origin?: string;
  warn?: (text: string) => void;
}
export interface ClientStats {
  batchesSent: number;
  stepsSent: number;
  batchesAcked: number;
  stepsAcked: number;
  batchesResent: number;
  reconnects: number;
  unacked: number;
  actsSent: number;
  actRowsSent: number;
  episodesInterrupted: number;
}
export interface ActRow {
  env: number;
  obs: ArrayLike<number>;
  reward: number;
  start: boolean;
  terminated: boolean;
  truncated: boolean;
  /** served_taken: the simulator's own action for this row (recorded, and answered with itself). */
  taken?: number | ArrayLike<number>;
  /** served_taken: false on the rows of an episode that is not trained on. */
  train?: boolean;
}
export interface ActionsReply {
  env: number[];
  actions: NdArray;
  weightsSeqNo: number;
  /** Envs whose open episode a dropped connection closed, started again by this call's rows. */
  interrupted: number[];
}
export declare const MAX_ENV_ID: number;
export declare function makeAct(rows: ActRow[], obsShape: readonly number[]): Message;
export declare function readActions(message: Message, expected: readonly number[]): Omit<ActionsReply, "interrupted">;
export interface WeightsUpdate {
  weights: WeightSet;
  wantSteps: number | null;
}
export declare const VERSION: string;
export declare const DEFAULT_EXTENSIONS: readonly string[];
/** connectWaitMs when neither the options nor $RLINKS_CONNECT_WAIT_S set it: 60 s. */
export declare const DEFAULT_CONNECT_WAIT_MS: number;
export declare class Client {
  constructor(address: string, options?: ClientOptions);
  readonly address: Address;
  readonly clientId: string;
  readonly plainRllib: boolean;
  readonly serverAgent: string;
  readonly connected: boolean;
  readonly stopped: boolean;
  readonly stats: ClientStats;
  agreed(extension: string): boolean;
  connect(): Promise<void>;
  getConfig(): Promise<Message>;
  getState(): Promise<WeightsUpdate>;
  sendEpisodes(episodes: Record<string, unknown>[]): Promise<number | null>;
  sendEpisodesAndGetState(episodes: Record<string, unknown>[]): Promise<WeightsUpdate>;
  /** Served actions: offer "served_actions" in `extensions`. */
  act(rows: ActRow[], obsShape: readonly number[]): Promise<ActionsReply>;
  flush(): Promise<void>;
  stop(): void;
  close(): void;
}

export interface EnvClientOptions extends ClientOptions {
  /** "auto" (default): the policy runs here when this client can run the module (RLlib's default MLP, or the runner's
   * policy graph with onnxruntime-web), else the runner computes the actions. */
  inference?: "auto" | "local" | "served";
  numEnvs?: number;
  /** null: as the runner's algorithm says. */
  onPolicy?: boolean | null;
  explore?: boolean;
  seed?: number;
  weightsEveryMs?: number;
  normalizeActions?: boolean;
  clipActions?: boolean;
  /** For RLlib's own server only, which describes itself as a pickle. */
  actionSpace?: ActionSpace | Record<string, unknown> | null;
  rolloutFragmentLength?: number;
  fcnetActivation?: string;
  headFcnetActivation?: string;
  /** The onnxruntime module that runs a policy graph (default: onnxruntime-web, imported when one comes). */
  onnxRuntime?: unknown;
}
export interface EnvClientStats {
  steps: number;
  episodes: number;
  meanReturn: number;
  weightsSeqNo: number;
  waitMs: number;
  delivery: ClientStats;
}
export type Ending = "finished" | "training_ended" | "stopped";
export declare class EnvClient {
  constructor(address: string, options?: EnvClientOptions);
  readonly client: Client;
  readonly config: RunnerConfig | null;
  readonly policy: LocalPolicy | OnnxPolicy | null;
  readonly mode: "local" | "served" | null;
  readonly onPolicy: boolean;
  readonly address: Address;
  readonly running: boolean;
  readonly stats: EnvClientStats;
  connect(): Promise<this>;
  run(loop: (client: this) => Promise<void> | void): Promise<Ending>;
  act(obs: ArrayLike<number>, env?: number): Promise<number | Float32Array>;
  /** The simulator's own action, recorded with the policy's log-probability (served actions, served_taken). */
  logAction(obs: ArrayLike<number>, action: number | ArrayLike<number>, env?: number): Promise<number | Float32Array>;
  report(reward: number, nextObs: ArrayLike<number>, terminated?: boolean, truncated?: boolean, env?: number): Promise<void>;
  /** `train: false`: the env's episodes are played and never trained on (served actions, served_taken). */
  startEpisode(obs: ArrayLike<number>, env?: number, options?: { train?: boolean }): Promise<void>;
  startEpisode(obs: ArrayLike<number>, options: { train?: boolean }): Promise<void>;
  endEpisode(env?: number): Promise<void>;
  refreshWeights(): Promise<void>;
  stop(): void;
  close(options?: { flush?: boolean }): Promise<void>;
}
