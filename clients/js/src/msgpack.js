/**
 * A msgpack reader for one frame body: the client's own, so the package has no runtime dependency.
 *
 * A package with none installs the way JavaScript users install (`npm install
 * /path/to/clients/js`, which npm makes a symlink; a tarball; a `<script
 * type="module">` with no import map) and loads the same everywhere. The
 * writer is codec.js's; this is its reader, held to the same test vectors.
 *
 * What it gives: nil as null, bool, ints as numbers (bigint where an int64
 * or uint64 is beyond 2^53), floats as numbers, str as string (UTF-8, bad
 * bytes replaced, as TextDecoder does), bin as a Uint8Array view of `body`,
 * arrays, and maps as plain objects whose keys pass through `mapKey`.
 * What it refuses with a {@link DecodeError}: extension types (none is part
 * of RLlink), the reserved byte 0xc1, a body cut short or followed by more
 * bytes, a map key `__proto__`, and more than `maxDepth` nested containers.
 * A declared length is checked against the bytes left before anything is
 * allocated, so a hostile header can't make it allocate more than the body.
 */

import { DecodeError } from "./errors.js";

const utf8 = new TextDecoder("utf-8");

class Reader {
  constructor(body, mapKey, maxDepth) {
    this.body = body;
    this.view = new DataView(body.buffer, body.byteOffset, body.byteLength);
    this.pos = 0;
    this.mapKey = mapKey;
    this.maxDepth = maxDepth;
  }

  need(bytes) {
    if (bytes > this.body.length - this.pos) {
      throw new DecodeError(`body is not valid msgpack: it ends ${bytes - (this.body.length - this.pos)} byte(s) early at byte ${this.pos}`);
    }
  }

  u8() {
    this.need(1);
    return this.body[this.pos++];
  }

  /** An unsigned big-endian length or int of `bytes` bytes (1, 2 or 4). */
  uint(bytes) {
    this.need(bytes);
    const at = this.pos;
    this.pos += bytes;
    if (bytes === 1) return this.view.getUint8(at);
    if (bytes === 2) return this.view.getUint16(at);
    return this.view.getUint32(at);
  }

  int(bytes) {
    this.need(bytes);
    const at = this.pos;
    this.pos += bytes;
    if (bytes === 1) return this.view.getInt8(at);
    if (bytes === 2) return this.view.getInt16(at);
    return this.view.getInt32(at);
  }

  int64(signed) {
    this.need(8);
    const value = signed ? this.view.getBigInt64(this.pos) : this.view.getBigUint64(this.pos);
    this.pos += 8;
    return value >= Number.MIN_SAFE_INTEGER && value <= Number.MAX_SAFE_INTEGER ? Number(value) : value;
  }

  float(bytes) {
    this.need(bytes);
    const value = bytes === 4 ? this.view.getFloat32(this.pos) : this.view.getFloat64(this.pos);
    this.pos += bytes;
    return value;
  }

  bytes(length) {
    this.need(length);
    const out = this.body.subarray(this.pos, this.pos + length);
    this.pos += length;
    return out;
  }

  str(length) {
    return utf8.decode(this.bytes(length));
  }

  array(length, depth) {
    this.container(length, depth);
    const out = new Array(length);
    for (let i = 0; i < length; i++) out[i] = this.value(depth + 1);
    return out;
  }

  map(length, depth) {
    this.container(2 * length, depth);
    const out = {};
    for (let i = 0; i < length; i++) {
      const key = this.mapKey(this.value(depth + 1));
      if (key === "__proto__") throw new DecodeError("a map key '__proto__' is refused");
      out[key] = this.value(depth + 1);
    }
    return out;
  }

  /** Every item takes a byte at least: a count the rest of the body can't hold is refused before allocating. */
  container(items, depth) {
    if (depth >= this.maxDepth) throw new DecodeError("body is nested too deeply for msgpack");
    this.need(items);
  }

  ext(length) {
    const type = this.int(1);
    this.need(length);
    throw new DecodeError(`msgpack extension type ${type} is not part of RLlink`);
  }

  value(depth) {
    const byte = this.u8();
    if (byte <= 0x7f) return byte;
    if (byte >= 0xe0) return byte - 0x100;
    if (byte <= 0x8f) return this.map(byte & 0x0f, depth);
    if (byte <= 0x9f) return this.array(byte & 0x0f, depth);
    if (byte <= 0xbf) return this.str(byte & 0x1f);
    switch (byte) {
      case 0xc0: return null;
      case 0xc2: return false;
      case 0xc3: return true;
      case 0xc4: return this.bytes(this.uint(1));
      case 0xc5: return this.bytes(this.uint(2));
      case 0xc6: return this.bytes(this.uint(4));
      case 0xc7: return this.ext(this.uint(1));
      case 0xc8: return this.ext(this.uint(2));
      case 0xc9: return this.ext(this.uint(4));
      case 0xca: return this.float(4);
      case 0xcb: return this.float(8);
      case 0xcc: return this.uint(1);
      case 0xcd: return this.uint(2);
      case 0xce: return this.uint(4);
      case 0xcf: return this.int64(false);
      case 0xd0: return this.int(1);
      case 0xd1: return this.int(2);
      case 0xd2: return this.int(4);
      case 0xd3: return this.int64(true);
      case 0xd4: return this.ext(1);
      case 0xd5: return this.ext(2);
      case 0xd6: return this.ext(4);
      case 0xd7: return this.ext(8);
      case 0xd8: return this.ext(16);
      case 0xd9: return this.str(this.uint(1));
      case 0xda: return this.str(this.uint(2));
      case 0xdb: return this.str(this.uint(4));
      case 0xdc: return this.array(this.uint(2), depth);
      case 0xdd: return this.array(this.uint(4), depth);
      case 0xde: return this.map(this.uint(2), depth);
      case 0xdf: return this.map(this.uint(4), depth);
      default: throw new DecodeError(`body is not valid msgpack: byte 0x${byte.toString(16)} at ${this.pos - 1} starts no value`);
    }
  }
}

/**
 * The one msgpack value `body` holds.
 * @param {Uint8Array} body
 * @param {(key: unknown) => string | number} mapKey turns each map key into an object key (or throws)
 * @param {number} maxDepth most containers nested
 * @throws {DecodeError} see the module's docs
 */
export function decodeMsgpack(body, mapKey, maxDepth) {
  const reader = new Reader(body, mapKey, maxDepth);
  const value = reader.value(0);
  if (reader.pos !== body.length) {
    throw new DecodeError(`body is not valid msgpack: ${body.length - reader.pos} byte(s) after its value`);
  }
  return value;
}
