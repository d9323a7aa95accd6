/** The weight set of SET_STATE (PROTOCOL.md section 8): parameter name -> array, and its version. */

import { InvalidMessage } from "./errors.js";
import { isMap, NdArray } from "./ndarray.js";


function malformed(why) {
  return new InvalidMessage(`malformed weight set: ${why}`);
}

/**
 * Read a SET_STATE's `state`: `{params: Map<string, NdArray>, seqNo: number}`.
 * A module nested under "default_policy" is unwrapped.
 * @throws {InvalidMessage} not a weight set of numeric arrays
 */
export function readWeightSet(state) {
  if (!isMap(state)) throw malformed("expected a map");
  let module = state.rl_module;
  const seqNo = state.weights_seq_no;
  if (module === undefined) throw malformed("no 'rl_module'");
  if (seqNo === undefined) throw malformed("no 'weights_seq_no'");
  if (!isMap(module)) throw malformed("'rl_module' must map parameter names to arrays");
  if ("default_policy" in module) {
    if (Object.keys(module).length !== 1) {
      throw malformed("it holds modules other than 'default_policy'; only single-agent modules are supported");
    }
    module = module.default_policy;
    if (!isMap(module)) throw malformed("'default_policy' must map parameter names to arrays");
  }
  if (!(Number.isInteger(seqNo) && seqNo >= 0)) throw malformed("'weights_seq_no' must be an int >= 0");
  const params = new Map();
  for (const [name, array] of Object.entries(module)) {
    if (!(array instanceof NdArray) || !"biuf".includes(array.dtype.kind)) {
      throw malformed(`parameter '${name.slice(0, 80)}' must be a numeric array`);
    }
    params.set(name, array);
  }
  return { params, seqNo };
}
