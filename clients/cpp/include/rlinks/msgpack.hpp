// msgpack bodies, both ways, in the profile of PROTOCOL.md sections 3 and 4.
#pragma once

#include <cstddef>
#include <memory>

#include "rlinks/value.hpp"

namespace rlinks::msgpack {

// Deepest nesting of arrays and maps a body may have; msgpack-python's own
// stack stops at about the same depth.
constexpr size_t kMaxDepth = 1000;

// Decodes the one value `body` holds. Arrays decoded from msgpack-numpy maps
// share `body`'s bytes. Throws ProtocolError: bad_body for anything that is
// not one complete msgpack value of RLlink's profile (extension types,
// trailing bytes, invalid UTF-8, nesting past kMaxDepth, a malformed array
// map), unsafe_payload for object, structured, datetime and timedelta arrays.
Value decode(std::shared_ptr<const Bytes> body);
Value decode(const uint8_t* data, size_t size);

// Appends `value` as msgpack-python (use_bin_type=True) and msgpack-numpy
// write it: the shortest integer forms, float64 for floats, arrays as maps
// with bin keys in the order nd, type, kind, shape, data.
void encode(const Value& value, Bytes& out);
Bytes encode(const Value& value);

}  // namespace rlinks::msgpack
