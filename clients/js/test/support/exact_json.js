/**
 * A JSON reader that keeps what JSON.parse loses and the test vectors need:
 * objects as Maps (key order, for byte-exact re-encoding), numbers written
 * with a point or an exponent as Float64 (Python floats, even whole ones),
 * and integers beyond 2^53 as bigint.
 */

import { Float64 } from "../../src/codec.js";

export function parseExactJson(text) {
  let pos = 0;
  const fail = (why) => {
    throw new SyntaxError(`JSON: ${why} at offset ${pos}`);
  };
  const space = () => {
    while (pos < text.length && " \t\n\r".includes(text[pos])) pos++;
  };
  const value = () => {
    space();
    const c = text[pos];
    if (c === "{") {
      pos++;
      const map = new Map();
      space();
      if (text[pos] === "}") return pos++, map;
      for (;;) {
        space();
        const key = string();
        space();
        if (text[pos++] !== ":") fail("':' expected");
        map.set(key, value());
        space();
        const next = text[pos++];
        if (next === "}") return map;
        if (next !== ",") fail("',' or '}' expected");
      }
    }
    if (c === "[") {
      pos++;
      const list = [];
      space();
      if (text[pos] === "]") return pos++, list;
      for (;;) {
        list.push(value());
        space();
        const next = text[pos++];
        if (next === "]") return list;
        if (next !== ",") fail("',' or ']' expected");
      }
    }
    if (c === '"') return string();
    for (const [word, result] of [["true", true], ["false", false], ["null", null], ["NaN", NaN], ["Infinity", Infinity], ["-Infinity", -Infinity]]) {
      if (text.startsWith(word, pos)) {
        pos += word.length;
        return typeof result === "number" ? new Float64(result) : result;
      }
    }
    const match = /^-?\d+(\.\d+)?([eE][-+]?\d+)?/.exec(text.slice(pos, pos + 64));
    if (!match) fail("value expected");
    pos += match[0].length;
    if (match[1] !== undefined || match[2] !== undefined) return new Float64(Number(match[0]));
    const big = BigInt(match[0]);
    return big >= BigInt(Number.MIN_SAFE_INTEGER) && big <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(big) : big;
  };
  const string = () => {
    if (text[pos] !== '"') fail("string expected");
    let end = pos + 1;
    while (text[end] !== '"') end += text[end] === "\\" ? 2 : 1;
    const result = JSON.parse(text.slice(pos, end + 1));
    pos = end + 1;
    return result;
  };
  const result = value();
  space();
  if (pos !== text.length) fail("trailing text");
  return result;
}
