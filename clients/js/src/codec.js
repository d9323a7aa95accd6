/**
 * Frame bodies: msgpack with numpy values in it, both ways, without pickle (PROTOCOL.md sections 3 and 4).
 *
 * {@link decodeBody} reads a body with the client's own msgpack reader (msgpack.js) and turns
 * msgpack-numpy maps into {@link NdArray}s; it refuses extension types,
 * nesting deeper than msgpack-python's stack, and every unsafe array.
 *
 * {@link encodeBody} writes a value as msgpack-python does with
 * `use_bin_type=True`, byte for byte (the canonical test vectors check it).
 * It is a small writer of its own because RLlink needs two things a JS
 * msgpack library can't express: floats that stay floats when they are
 * whole (`rewards: [1.0]`, written float64 as Python does; wrap them with
 * {@link float64}), and msgpack-numpy's maps, whose keys are bin.
 */

import { DecodeError, UnsafePayload } from "./errors.js";
import { MAX_DEPTH } from "./limits.js";
import { decodeMsgpack } from "./msgpack.js";
import { NdArray, parseComplex, typeName } from "./ndarray.js";

// ---------------------------------------------------------------------------
// Values

/** A number that goes on the wire as a msgpack float64 even when it is whole (Python's float). */
export class Float64 {
  /** @param {number} value */
  constructor(value) {
    this.value = value;
    Object.freeze(this);
  }

  valueOf() {
    return this.value;
  }
}

/** `value` as a msgpack float64, even when whole. */
export function float64(value) {
  return new Float64(Number(value));
}

// ---------------------------------------------------------------------------
// Decoding

/** Marks map keys that were bin on the wire (a plain object takes only string keys). */
const BIN_KEY = "\u0000bin:";
const ND = `${BIN_KEY}nd`;
const TYPE = `${BIN_KEY}type`;
const KIND = `${BIN_KEY}kind`;
const SHAPE = `${BIN_KEY}shape`;
const DATA = `${BIN_KEY}data`;
const COMPLEX = `${BIN_KEY}complex`;

const latin1 = new TextDecoder("latin1");

function mapKeyConverter(key) {
  if (typeof key === "string" || typeof key === "number") return key;
  if (key instanceof Uint8Array) {
    let text = BIN_KEY;
    for (const byte of key) text += String.fromCharCode(byte);
    return text;
  }
  if (typeof key === "bigint") return key.toString();
  throw new DecodeError(`map key of type ${typeName(key)} is not supported`);
}

/**
 * Unpack one frame body.
 *
 * Maps come back as plain objects, numpy values as {@link NdArray} (views of
 * `body`: don't reuse it while they live), bin as Uint8Array, integers as
 * numbers (bigint beyond 2^53), floats as numbers. A map with bin keys other
 * than a numpy map comes back as a `Map` with Uint8Array keys.
 *
 * @param {Uint8Array} body
 * @throws {UnsafePayload} an object, structured or otherwise unsafe array
 * @throws {DecodeError} anything else that is not one complete, valid msgpack value
 */
export function decodeBody(body) {
  return walk(decodeMsgpack(body, mapKeyConverter, MAX_DEPTH), 0);
}

function walk(value, depth) {
  if (value === null || typeof value !== "object") {
    if (typeof value === "bigint" && value >= Number.MIN_SAFE_INTEGER && value <= Number.MAX_SAFE_INTEGER) {
      return Number(value);
    }
    return value;
  }
  if (value instanceof Uint8Array) return value;
  if (depth >= MAX_DEPTH) throw new DecodeError("body is nested too deeply for msgpack");
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) value[i] = walk(value[i], depth + 1);
    return value;
  }
  if (ND in value || COMPLEX in value) return decodeArrayMap(value);
  let binKeys = false;
  for (const key of Object.keys(value)) {
    value[key] = walk(value[key], depth + 1);
    if (key.startsWith(BIN_KEY)) binKeys = true;
  }
  if (!binKeys) return value;
  const map = new Map();
  for (const [key, item] of Object.entries(value)) {
    map.set(key.startsWith(BIN_KEY) ? Uint8Array.from(key.slice(BIN_KEY.length), (c) => c.charCodeAt(0)) : key, item);
  }
  return map;
}

/**
 * msgpack-numpy's map form back into an {@link NdArray} (or a {@link Complex}).
 * @throws {UnsafePayload} an object (pickled) or structured dtype
 * @throws {DecodeError} a field missing or of the wrong type, or data of the wrong length
 */
function decodeArrayMap(obj) {
  if (COMPLEX in obj) {
    const text = obj[DATA];
    if (obj[COMPLEX] !== true) throw new DecodeError("malformed complex value");
    return parseComplex(text instanceof Uint8Array ? latin1.decode(text) : text);
  }
  const nd = obj[ND];
  const kind = obj[KIND] ?? new Uint8Array(0);
  if (!(kind instanceof Uint8Array) && typeof kind !== "string") throw new DecodeError(`unknown array kind ${typeName(kind)}`);
  if (kind.length > 0) {
    const text = typeof kind === "string" ? kind : latin1.decode(kind);
    if (text === "O") throw new UnsafePayload("object arrays are refused: msgpack-numpy would unpickle them");
    if (text === "V") throw new UnsafePayload("structured (kind 'V') arrays are refused");
    throw new DecodeError(`unknown array kind ${JSON.stringify(text)}`);
  }
  const data = obj[DATA];
  if (!(data instanceof Uint8Array)) throw new DecodeError(`array data must be bin, got ${typeName(data)}`);
  const descr = obj[TYPE];
  if (nd === false) {
    if (Object.keys(obj).length > 3 + (KIND in obj ? 1 : 0)) throw new DecodeError("unexpected keys in numpy scalar");
    return new NdArray(descr, [], data, { scalar: true });
  }
  if (nd !== true) throw new DecodeError("array map's 'nd' must be true or false");
  const shape = obj[SHAPE];
  if (!Array.isArray(shape)) throw new DecodeError("array shape must be a list of ints");
  for (const dim of shape) {
    if (typeof dim !== "number" || !Number.isInteger(dim) || dim < 0) {
      throw new DecodeError(`array shape must be non-negative ints, got [${shape}]`);
    }
  }
  return new NdArray(descr, shape, data);
}

// ---------------------------------------------------------------------------
// Encoding

const utf8 = new TextEncoder();
const ARRAY_KEYS = ["nd", "type", "kind", "shape", "data"].map((k) => utf8.encode(k));
const [K_ND, K_TYPE, K_KIND, K_SHAPE, K_DATA] = ARRAY_KEYS;
const EMPTY = new Uint8Array(0);

class Writer {
  constructor(size = 256) {
    this.buf = new Uint8Array(size);
    this.view = new DataView(this.buf.buffer);
    this.pos = 0;
  }

  ensure(n) {
    if (this.pos + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.pos + n) size *= 2;
    const buf = new Uint8Array(size);
    buf.set(this.buf.subarray(0, this.pos));
    this.buf = buf;
    this.view = new DataView(buf.buffer);
  }

  byte(b) {
    this.ensure(1);
    this.buf[this.pos++] = b;
  }

  head(b, size, value) {
    this.ensure(1 + size);
    this.buf[this.pos++] = b;
    if (size === 1) this.view.setUint8(this.pos, value);
    else if (size === 2) this.view.setUint16(this.pos, value);
    else if (size === 4) this.view.setUint32(this.pos, value);
    this.pos += size;
  }

  raw(bytes) {
    this.ensure(bytes.length);
    this.buf.set(bytes, this.pos);
    this.pos += bytes.length;
  }

  float(x) {
    this.ensure(9);
    this.buf[this.pos] = 0xcb;
    this.view.setFloat64(this.pos + 1, x);
    this.pos += 9;
  }

  int(x) {
    // x: a whole number or a bigint, in -2^63 .. 2^64-1; the shortest form, as msgpack-python writes.
    if (typeof x === "number" && x >= -32 && x <= 127) return this.byte(x & 0xff);
    if (x >= 0) {
      if (x <= 0xff) return this.head(0xcc, 1, Number(x));
      if (x <= 0xffff) return this.head(0xcd, 2, Number(x));
      if (x <= 0xffffffff) return this.head(0xce, 4, Number(x));
      this.ensure(9);
      this.buf[this.pos] = 0xcf;
      this.view.setBigUint64(this.pos + 1, BigInt(x));
      this.pos += 9;
      return;
    }
    if (x >= -32) return this.byte(Number(x) & 0xff);
    if (x >= -0x80) return this.head(0xd0, 1, Number(x) & 0xff);
    if (x >= -0x8000) return this.head(0xd1, 2, Number(x) & 0xffff);
    if (x >= -0x80000000) return this.head(0xd2, 4, Number(x) >>> 0);
    this.ensure(9);
    this.buf[this.pos] = 0xd3;
    this.view.setBigInt64(this.pos + 1, BigInt(x));
    this.pos += 9;
  }

  str(text) {
    const bytes = utf8.encode(text);
    const n = bytes.length;
    if (n < 32) this.byte(0xa0 | n);
    else if (n <= 0xff) this.head(0xd9, 1, n);
    else if (n <= 0xffff) this.head(0xda, 2, n);
    else this.head(0xdb, 4, n);
    this.raw(bytes);
  }

  bin(bytes) {
    const n = bytes.length;
    if (n <= 0xff) this.head(0xc4, 1, n);
    else if (n <= 0xffff) this.head(0xc5, 2, n);
    else this.head(0xc6, 4, n);
    this.raw(bytes);
  }

  array(n) {
    if (n < 16) this.byte(0x90 | n);
    else if (n <= 0xffff) this.head(0xdc, 2, n);
    else this.head(0xdd, 4, n);
  }

  map(n) {
    if (n < 16) this.byte(0x80 | n);
    else if (n <= 0xffff) this.head(0xde, 2, n);
    else this.head(0xdf, 4, n);
  }
}

const MIN_INT = -(2n ** 63n);
const MAX_UINT = 2n ** 64n - 1n;

function write(w, value, depth) {
  if (depth > MAX_DEPTH) throw new TypeError("value nested too deeply for the wire");
  if (value === null) return w.byte(0xc0);
  switch (typeof value) {
    case "boolean":
      return w.byte(value ? 0xc3 : 0xc2);
    case "number":
      if (Number.isInteger(value) && !Object.is(value, -0) && value >= -(2 ** 63) && value < 2 ** 64) return w.int(value);
      return w.float(value);
    case "bigint":
      if (value < MIN_INT || value > MAX_UINT) throw new TypeError(`integer ${value} does not fit msgpack's 64 bits`);
      return w.int(value >= -(2n ** 31n) && value <= 0xffffffffn ? Number(value) : value);
    case "string":
      return w.str(value);
    case "object":
      break;
    default:
      throw new TypeError(`cannot put a ${typeof value} on the wire`);
  }
  if (value instanceof Float64) return w.float(value.value);
  if (value instanceof Uint8Array) return w.bin(value);
  if (value instanceof ArrayBuffer) return w.bin(new Uint8Array(value));
  if (value instanceof NdArray) return writeArray(w, value);
  if (ArrayBuffer.isView(value)) return writeArray(w, NdArray.from(value));
  if (Array.isArray(value)) {
    w.array(value.length);
    for (const item of value) write(w, item, depth + 1);
    return;
  }
  if (value instanceof Map) {
    w.map(value.size);
    for (const [key, item] of value) {
      write(w, key, depth + 1);
      write(w, item, depth + 1);
    }
    return;
  }
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) throw new TypeError(`cannot put a ${proto?.constructor?.name} on the wire`);
  const keys = Object.keys(value).filter((key) => value[key] !== undefined);
  w.map(keys.length);
  for (const key of keys) {
    w.str(key);
    write(w, value[key], depth + 1);
  }
}

function writeArray(w, array) {
  const { kind } = array.dtype;
  if (!"biufcSU".includes(kind)) throw new UnsafePayload(`refusing to encode a ${array.dtype.str} array`);
  if (array.scalar) {
    w.map(3);
  } else {
    w.map(5);
  }
  w.bin(K_ND);
  w.byte(array.scalar ? 0xc2 : 0xc3);
  w.bin(K_TYPE);
  w.str(array.dtype.str);
  if (!array.scalar) {
    w.bin(K_KIND);
    w.bin(EMPTY);
    w.bin(K_SHAPE);
    w.array(array.shape.length);
    for (const dim of array.shape) w.int(dim);
  }
  w.bin(K_DATA);
  w.bin(array.bytes);
}

/**
 * Pack `value` as msgpack-python (`use_bin_type=True`) with msgpack-numpy would.
 *
 * Numbers: whole ones are ints (shortest form), others float64; wrap a whole
 * float in {@link float64}. bigint: ints. Uint8Array: bin. {@link NdArray}
 * and other typed arrays: numpy arrays. Objects and Maps: maps, keys in
 * insertion order (properties whose value is `undefined` are left out).
 *
 * @returns {Uint8Array}
 * @throws {TypeError} a value msgpack can't represent
 * @throws {UnsafePayload} an array of an unsafe dtype
 */
export function encodeBody(value) {
  const w = new Writer();
  write(w, value, 0);
  return w.buf.subarray(0, w.pos);
}
