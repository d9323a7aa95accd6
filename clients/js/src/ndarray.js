/**
 * numpy arrays and scalars as RLlib's msgpack-numpy peers write them (PROTOCOL.md section 4).
 *
 * On the wire each is a msgpack map with *bin* keys:
 *
 *     array:  {nd: true,  type: "<f4", kind: b"", shape: [2, 3], data: <bin>}
 *     scalar: {nd: false, type: "<i8", data: <bin>}
 *
 * {@link NdArray} holds one: its dtype string, its shape and its bytes (C
 * order, in the dtype's byte order), and gives the values as a typed array.
 * Only plain kinds are decoded (bool, int, uint, float, complex, bytes, str);
 * object, structured, datetime and sub-array dtypes are refused, so nothing
 * from the network is ever taken for code.
 */

import { DecodeError, UnsafePayload } from "./errors.js";
import { MAX_DTYPE_CHARS } from "./limits.js";

/** Item sizes each kind allows (S and U: any). */
const SIZES = { b: [1], i: [1, 2, 4, 8], u: [1, 2, 4, 8], f: [2, 4, 8], c: [8, 16] };
/** Kinds never decoded: object, structured (void), datetime, timedelta. */
const UNSAFE_KINDS = new Set(["O", "V", "M", "m"]);
const DTYPE = /^([<>|=]?)([a-zA-Z])(\d*)(.*)$/s;
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** The parsed form of a dtype string. */
export class DType {
  constructor(str, order, kind, itemsize) {
    /** numpy's `dtype.str`, as on the wire. */
    this.str = str;
    /** "<", ">" or "|". */
    this.order = order;
    /** One of b, i, u, f, c, S, U. */
    this.kind = kind;
    /** Bytes per element. */
    this.itemsize = itemsize;
    Object.freeze(this);
  }

  /** Whether the elements are stored big-endian. */
  get bigEndian() {
    return this.order === ">" || (this.order === "=" && !LITTLE_ENDIAN);
  }
}

const cache = new Map();

/**
 * The dtype a wire `type` string names, if it is one this package decodes.
 *
 * @param {unknown} descr
 * @returns {DType}
 * @throws {UnsafePayload} an object, structured, datetime or sub-array dtype
 * @throws {DecodeError} not a dtype string
 */
export function parseDtype(descr) {
  if (typeof descr !== "string") {
    // msgpack-numpy writes a list of fields here for structured dtypes.
    throw new UnsafePayload(`array dtype must be a dtype string, got ${typeName(descr)}`);
  }
  const known = cache.get(descr);
  if (known !== undefined) return known;
  if (descr.length > MAX_DTYPE_CHARS) throw new DecodeError(`array dtype string too long: ${JSON.stringify(descr.slice(0, 32))}`);
  if (descr.startsWith("(")) throw new UnsafePayload(`sub-array dtype ${JSON.stringify(descr)} is not allowed`);
  const match = DTYPE.exec(descr);
  if (match !== null && UNSAFE_KINDS.has(match[2])) {
    throw new UnsafePayload(
      `array dtype ${JSON.stringify(descr)} (kind '${match[2]}') is not allowed; ` +
        "only bool, int, uint, float, complex, bytes and str arrays are",
    );
  }
  if (match === null || match[4] !== "" || match[3] === "") throw new DecodeError(`not a numpy dtype: ${JSON.stringify(descr)}`);
  const [, given, kind, digits] = match;
  const size = Number(digits);
  if (kind !== "S" && kind !== "U" && !(SIZES[kind] ?? []).includes(size)) {
    throw new DecodeError(`not a numpy dtype: ${JSON.stringify(descr)}`);
  }
  const itemsize = kind === "U" ? 4 * size : size;
  const order = itemsize === 1 || kind === "S" ? "|" : given === "" ? "=" : given;
  const dtype = new DType(descr, order, kind, itemsize);
  if (cache.size < 256) cache.set(descr, dtype);
  return dtype;
}

const VIEWS = {
  b1: Uint8Array, i1: Int8Array, u1: Uint8Array, i2: Int16Array, u2: Uint16Array, i4: Int32Array, u4: Uint32Array,
  i8: BigInt64Array, u8: BigUint64Array, f4: Float32Array, f8: Float64Array, c8: Float32Array, c16: Float64Array,
};

/** A typed array's dtype string (native byte order, as numpy writes it). */
function dtypeOfTypedArray(values) {
  const order = LITTLE_ENDIAN ? "<" : ">";
  if (values instanceof Float32Array) return `${order}f4`;
  if (values instanceof Float64Array) return `${order}f8`;
  if (values instanceof Int8Array) return "|i1";
  if (values instanceof Uint8Array || values instanceof Uint8ClampedArray) return "|u1";
  if (values instanceof Int16Array) return `${order}i2`;
  if (values instanceof Uint16Array) return `${order}u2`;
  if (values instanceof Int32Array) return `${order}i4`;
  if (values instanceof Uint32Array) return `${order}u4`;
  if (values instanceof BigInt64Array) return `${order}i8`;
  if (values instanceof BigUint64Array) return `${order}u8`;
  throw new TypeError(`no numpy dtype for a ${values?.constructor?.name ?? typeof values}`);
}

const INTEGER_RANGES = new Map([
  [Uint8Array, [0, 255]], [Uint8ClampedArray, [0, 255]], [Int8Array, [-128, 127]], [Uint16Array, [0, 65535]],
  [Int16Array, [-32768, 32767]], [Int32Array, [-(2 ** 31), 2 ** 31 - 1]], [Uint32Array, [0, 2 ** 32 - 1]],
  [BigInt64Array, [-(2 ** 53), 2 ** 53]], [BigUint64Array, [0, 2 ** 53]],
]);

/** The values an integer typed array's elements hold, `[low, high]` (64-bit: what a JS number holds exactly); null for floats. */
export function integerRange(TypedArray) {
  return INTEGER_RANGES.get(TypedArray) ?? null;
}

/** A numpy array (or, with `scalar`, a numpy scalar) on its way to or from the wire. */
export class NdArray {
  /**
   * @param {string} dtype numpy's dtype string, e.g. "<f4"
   * @param {number[]} shape dimensions ([] for 0-d arrays and scalars)
   * @param {Uint8Array} bytes the elements, C order, in the dtype's byte order
   * @param {{scalar?: boolean}} [options] a numpy scalar (msgpack-numpy's nd=false)
   * @throws {DecodeError} `bytes` is not shape x item size long; {@link parseDtype}'s errors
   */
  constructor(dtype, shape, bytes, { scalar = false } = {}) {
    this.dtype = parseDtype(dtype);
    this.shape = Object.freeze([...shape]);
    this.bytes = bytes;
    this.scalar = scalar;
    if (scalar && this.shape.length !== 0) throw new DecodeError("a numpy scalar has no shape");
    const expected = this.size * this.dtype.itemsize;
    if (bytes.byteLength !== expected) {
      throw new DecodeError(
        `array of shape [${shape}] and dtype ${dtype} needs ${expected} bytes, data has ${bytes.byteLength}`,
      );
    }
    this._values = undefined;
  }

  /**
   * An array of a typed array's values (their dtype follows the typed array's type).
   *
   * @param {ArrayBufferView} values
   * @param {number[]} [shape] default: one axis
   */
  static from(values, shape = [values.length]) {
    const bytes = new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
    return new NdArray(dtypeOfTypedArray(values), shape, bytes);
  }

  /** Number of elements. */
  get size() {
    return this.shape.reduce((a, b) => a * b, 1);
  }

  /**
   * The elements as a typed array in this machine's byte order (complex: real and imaginary parts interleaved).
   * A view of {@link bytes} where alignment and byte order allow, else a copy (made once).
   * Bytes (S) and text (U) arrays give their raw bytes.
   */
  values() {
    if (this._values !== undefined) return this._values;
    const { kind, itemsize } = this.dtype;
    if (kind === "S" || kind === "U") return (this._values = this.bytes);
    if (kind === "f" && itemsize === 2) return (this._values = this._float16());
    const View = VIEWS[`${kind}${itemsize}`];
    const width = kind === "c" ? itemsize / 2 : itemsize;
    let bytes = this.bytes;
    if (this.dtype.bigEndian === LITTLE_ENDIAN && width > 1) {
      bytes = bytes.slice();
      for (let i = 0; i < bytes.length; i += width) bytes.subarray(i, i + width).reverse();
    } else if (bytes.byteOffset % width !== 0) {
      bytes = bytes.slice();
    }
    return (this._values = new View(bytes.buffer, bytes.byteOffset, bytes.byteLength / width));
  }

  /** The elements as a Float32Array (a copy unless they are float32 already); numbers only. */
  toFloat32() {
    const values = this.values();
    if (values instanceof Float32Array) return values;
    if (this.dtype.kind === "c" || this.dtype.kind === "S" || this.dtype.kind === "U") {
      throw new TypeError(`a ${this.dtype.str} array has no float32 values`);
    }
    return Float32Array.from(values, Number);
  }

  /** The single element of a scalar or a one-element array, as a JS number (or bigint for 64-bit ints). */
  item() {
    if (this.size !== 1) throw new TypeError(`item() of an array of ${this.size} elements`);
    const value = this.values()[0];
    return this.dtype.kind === "b" ? value !== 0 : value;
  }

  _float16() {
    const view = new DataView(this.bytes.buffer, this.bytes.byteOffset, this.bytes.byteLength);
    const little = !this.dtype.bigEndian;
    const out = new Float32Array(this.size);
    for (let i = 0; i < out.length; i++) out[i] = halfToFloat(view.getUint16(2 * i, little));
    return out;
  }
}

function halfToFloat(bits) {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >> 10) & 0x1f;
  const fraction = bits & 0x3ff;
  if (exponent === 0) return sign * 2 ** -14 * (fraction / 1024);
  if (exponent === 0x1f) return fraction ? NaN : sign * Infinity;
  return sign * 2 ** (exponent - 15) * (1 + fraction / 1024);
}

/** A Python complex number as msgpack-numpy writes it ({complex: true, data: "(1+2j)"}). */
export class Complex {
  constructor(real, imag) {
    this.real = real;
    this.imag = imag;
    Object.freeze(this);
  }
}

const COMPLEX = /^\(?([-+]?(?:\d+\.?\d*(?:e[-+]?\d+)?|inf|nan))?(?:([-+](?:\d+\.?\d*(?:e[-+]?\d+)?|inf|nan))j)?\)?$/i;
const IMAG_ONLY = /^\(?([-+]?(?:\d+\.?\d*(?:e[-+]?\d+)?|inf|nan))j\)?$/i;

/**
 * Read a Python complex repr, as msgpack-numpy sends a Python `complex`.
 * @throws {DecodeError} not a complex repr (or longer than 64 chars)
 */
export function parseComplex(text) {
  if (typeof text !== "string" || text.length > 64) throw new DecodeError("malformed complex value");
  const number = (s) => Number(s.replace(/^\+?inf$/i, "Infinity").replace(/^-inf$/i, "-Infinity").replace(/^[-+]?nan$/i, "NaN"));
  const imagOnly = IMAG_ONLY.exec(text);
  if (imagOnly) return new Complex(0, number(imagOnly[1]));
  const match = COMPLEX.exec(text);
  if (!match || (match[1] === undefined && match[2] === undefined)) throw new DecodeError(`malformed complex value ${JSON.stringify(text)}`);
  return new Complex(number(match[1] ?? "0"), number(match[2] ?? "0"));
}

export function typeName(value) {
  if (value === null) return "nil";
  if (value instanceof Uint8Array) return "bin";
  if (Array.isArray(value)) return "list";
  if (typeof value === "object") return "map";
  return typeof value;
}

/** Whether a decoded value is a msgpack map with str keys (a plain object, not an array or bin). */
export function isMap(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value) && !ArrayBuffer.isView(value) && !(value instanceof NdArray) && !(value instanceof Map) && !(value instanceof Complex);
}
