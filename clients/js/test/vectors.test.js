// Every test vector in tests/vectors/, replayed in one piece and byte by byte (PROTOCOL.md section 13).

import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { test } from "node:test";

import { encodeBody } from "../src/codec.js";
import { encodeFrame, FrameDecoder } from "../src/framing.js";
import { ProtocolError } from "../src/errors.js";
import { difference, loadVectors, toWire, VECTORS } from "./support/vectors.js";

const vectors = loadVectors();

function replay(bytes, maxFrameBytes, chunk) {
  const decoder = new FrameDecoder(maxFrameBytes);
  const messages = [];
  try {
    for (let pos = 0; pos < bytes.length; pos += chunk) messages.push(...decoder.feed(bytes.subarray(pos, pos + chunk)));
  } catch (error) {
    if (!(error instanceof ProtocolError)) throw error;
    return { messages: [...messages, ...decoder.beforeError], error, when: "feed" };
  }
  try {
    decoder.eof();
  } catch (error) {
    if (!(error instanceof ProtocolError)) throw error;
    return { messages, error, when: "eof" };
  }
  return { messages, error: null, when: null };
}

test("every .bin has its .json", () => {
  const bins = readdirSync(VECTORS).filter((name) => name.endsWith(".bin")).length;
  assert.ok(vectors.length > 0);
  assert.equal(vectors.length, bins);
});

for (const { name, spec, bytes } of vectors) {
  test(name, () => {
    const expected = spec.get("messages");
    const error = spec.get("error");
    for (const chunk of [bytes.length || 1, 1, 7]) {
      // The same copy of the bytes for every pass: decoded arrays are views of it, never written.
      const got = replay(bytes.slice(), spec.get("max_frame_bytes"), chunk);
      const how = `fed in chunks of ${chunk}`;
      if (error === null) {
        assert.equal(got.error, null, `${how}: refused: ${got.error?.message}`);
      } else {
        assert.ok(got.error, `${how}: accepted, expected ${error.get("code")}`);
        assert.equal(got.error.code, error.get("code"), `${how}: ${got.error.message}`);
        assert.equal(got.when, error.get("when"), how);
      }
      assert.equal(got.messages.length, expected.length, `${how}: messages decoded`);
      expected.forEach((message, i) => assert.equal(difference(got.messages[i], message), null, `${how}: message ${i}`));
    }
    if (spec.get("canonical")) {
      // Maps keep the JSON's key order: the body as the vector's sender packed it.
      const frames = expected.map((message) => encodeFrame(encodeBody(toWire(message))));
      const encoded = Buffer.concat(frames);
      assert.ok(encoded.equals(Buffer.from(bytes)), "re-encoding does not give the .bin bytes");
    }
  });
}
