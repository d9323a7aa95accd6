/** rlinks-client: train JavaScript simulators (Node, browsers) with Ray RLlib over RLlink. */

export { EnvClient } from "./env_client.js";
export { Client, DEFAULT_CONNECT_WAIT_MS, DEFAULT_EXTENSIONS, VERSION } from "./client.js";
export { parseAddress } from "./address.js";
export { normalizeSecret, SECRET_ENV } from "./auth.js";
export { decodeBody, encodeBody, float64, Float64 } from "./codec.js";
export { BoxSpace, DiscreteSpace, POLICY_GRAPH_KEY, readActionSpace, readRunnerConfig } from "./config.js";
export { EpisodeBuilder, episodeSteps } from "./episodes.js";
export * from "./errors.js";
export { Extension, makeOffer, parseOffer } from "./extensions.js";
export { decodeMessage, encodeFrame, encodeMessage, encodeMessageBody, FrameDecoder } from "./framing.js";
export { DEFAULT_MAX_FRAME_BYTES, HEADER_BYTES, MAX_BODY_BYTES } from "./limits.js";
export { MessageType, OLD_API_TYPES, validateMessage } from "./messages.js";
export { Network } from "./mlp.js";
export { Complex, NdArray } from "./ndarray.js";
export { LocalPolicy } from "./policy.js";
export { GRAPH_METADATA_KEY, loadOnnxRuntime, OnnxPolicy, readGraphInterface, readGraphMetadata } from "./onnx_policy.js";
export { actionForEnv, categoricalLogp, gaussianLogp, Random } from "./sampling.js";
export { openTransport, Transport } from "./transport.js";
export { makeAct, MAX_ENV_ID, readActions } from "./served.js";
export { readWeightSet } from "./weights.js";
