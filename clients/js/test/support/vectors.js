/** The shared test vectors (tests/vectors/, README.md there): their tagged JSON values, both ways. */

import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { Float64 } from "../../src/codec.js";
import { NdArray, parseDtype } from "../../src/ndarray.js";
import { parseExactJson } from "./exact_json.js";

export const REPO = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");
export const VECTORS = join(REPO, "tests", "vectors");

/** Every vector: {name, spec (Maps, as parseExactJson reads it), bytes}. */
export function loadVectors() {
  return readdirSync(VECTORS)
    .filter((name) => name.endsWith(".json"))
    .sort()
    .map((file) => {
      const name = file.slice(0, -5);
      return {
        name,
        spec: parseExactJson(readFileSync(join(VECTORS, file), "utf8")),
        bytes: new Uint8Array(readFileSync(join(VECTORS, `${name}.bin`))),
      };
    });
}

function tag(value) {
  if (!(value instanceof Map) || value.size !== 1) return null;
  const [key] = value.keys();
  return key.startsWith("$") ? key : null;
}

function hexBytes(hex) {
  return Uint8Array.from(hex.match(/../g) ?? [], (pair) => parseInt(pair, 16));
}

/** Elements of `data` (flat list of numbers, bools or [re, im]) in `dtype`'s bytes. */
function elementBytes(dtype, data) {
  const { kind, itemsize } = parseDtype(dtype);
  const little = !parseDtype(dtype).bigEndian;
  const flat = kind === "c" ? data.flatMap((pair) => pair) : data;
  const width = kind === "c" ? itemsize / 2 : itemsize;
  const bytes = new Uint8Array(flat.length * width);
  const view = new DataView(bytes.buffer);
  flat.forEach((item, i) => {
    const x = item instanceof Float64 ? item.value : item;
    const at = i * width;
    if (kind === "b") view.setUint8(at, x ? 1 : 0);
    else if (kind === "f" || kind === "c") {
      if (width === 8) view.setFloat64(at, Number(x), little);
      else if (width === 4) view.setFloat32(at, Number(x), little);
      else view.setUint16(at, floatToHalf(Number(x)), little);
    } else if (width === 8) {
      if (kind === "i") view.setBigInt64(at, BigInt(x), little);
      else view.setBigUint64(at, BigInt(x), little);
    } else if (width === 4) kind === "i" ? view.setInt32(at, Number(x), little) : view.setUint32(at, Number(x), little);
    else if (width === 2) kind === "i" ? view.setInt16(at, Number(x), little) : view.setUint16(at, Number(x), little);
    else kind === "i" ? view.setInt8(at, Number(x)) : view.setUint8(at, Number(x));
  });
  return bytes;
}

function floatToHalf(x) {
  // Exact for the values the vectors use (normal halves).
  if (x === 0) return Object.is(x, -0) ? 0x8000 : 0;
  const sign = x < 0 ? 0x8000 : 0;
  const a = Math.abs(x);
  const exponent = Math.floor(Math.log2(a));
  const fraction = Math.round((a / 2 ** exponent - 1) * 1024);
  return sign | ((exponent + 15) << 10) | fraction;
}

/** A vector's JSON value as the value to encode (Maps kept for key order). */
export function toWire(value) {
  const t = tag(value);
  if (t === "$bytes") return hexBytes(value.get(t));
  if (t === "$ndarray") {
    const spec = value.get(t);
    return new NdArray(spec.get("dtype"), spec.get("shape"), elementBytes(spec.get("dtype"), spec.get("data")));
  }
  if (t === "$scalar") {
    const spec = value.get(t);
    return new NdArray(spec.get("dtype"), [], elementBytes(spec.get("dtype"), [spec.get("data")]), { scalar: true });
  }
  if (value instanceof Map) return new Map([...value].map(([k, v]) => [k, toWire(v)]));
  if (Array.isArray(value)) return value.map(toWire);
  return value;
}

/** Where `decoded` differs from the vector's `expected` JSON value; null when they agree. */
export function difference(decoded, expected, path = "") {
  const t = tag(expected);
  if (t === "$bytes") {
    const want = hexBytes(expected.get(t));
    return decoded instanceof Uint8Array && Buffer.from(decoded).equals(Buffer.from(want)) ? null : `${path}: bytes differ`;
  }
  if (t === "$ndarray" || t === "$scalar") {
    const spec = expected.get(t);
    if (!(decoded instanceof NdArray)) return `${path}: expected an array, got ${typeof decoded}`;
    if (decoded.scalar !== (t === "$scalar")) return `${path}: scalar/array mismatch`;
    if (decoded.dtype.str !== spec.get("dtype")) return `${path}: dtype ${decoded.dtype.str}, expected ${spec.get("dtype")}`;
    const shape = t === "$scalar" ? [] : spec.get("shape");
    if (JSON.stringify(decoded.shape) !== JSON.stringify(shape)) return `${path}: shape [${decoded.shape}], expected [${shape}]`;
    const want = new NdArray(spec.get("dtype"), shape, elementBytes(spec.get("dtype"), t === "$scalar" ? [spec.get("data")] : spec.get("data")));
    const got = decoded.values();
    const expectedValues = want.values();
    if (got.length !== expectedValues.length) return `${path}: ${got.length} values, expected ${expectedValues.length}`;
    for (let i = 0; i < got.length; i++) {
      if (!Object.is(got[i], expectedValues[i])) return `${path}[${i}]: ${got[i]}, expected ${expectedValues[i]}`;
    }
    return null;
  }
  if (expected instanceof Map) {
    if (decoded === null || typeof decoded !== "object" || Array.isArray(decoded)) return `${path}: expected a map`;
    const keys = decoded instanceof Map ? [...decoded.keys()] : Object.keys(decoded);
    if (keys.length !== expected.size) return `${path}: keys [${keys}], expected [${[...expected.keys()]}]`;
    for (const [key, item] of expected) {
      const got = decoded instanceof Map ? decoded.get(key) : decoded[key];
      if (!(decoded instanceof Map ? decoded.has(key) : Object.hasOwn(decoded, key))) return `${path}: missing key ${key}`;
      const why = difference(got, item, `${path}.${key}`);
      if (why) return why;
    }
    return null;
  }
  if (Array.isArray(expected)) {
    if (!Array.isArray(decoded) || decoded.length !== expected.length) return `${path}: expected a list of ${expected.length}`;
    for (let i = 0; i < expected.length; i++) {
      const why = difference(decoded[i], expected[i], `${path}[${i}]`);
      if (why) return why;
    }
    return null;
  }
  const want = expected instanceof Float64 ? expected.value : expected;
  if (typeof want === "bigint" || typeof decoded === "bigint") {
    return typeof decoded === typeof want && decoded === want ? null : `${path}: ${decoded}, expected ${want}`;
  }
  return Object.is(decoded, want) || (typeof want === "number" && decoded === want) ? null : `${path}: ${String(decoded)}, expected ${String(want)}`;
}
