// The shared-secret challenge of the `auth` extension (PROTOCOL.md section 10.3).
// HMAC-SHA256 and random nonces come from OpenSSL: without RLINKS_WITH_OPENSSL
// every function but normalize_secret and load_secret throws NotAvailable.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "rlinks/ndarray.hpp"

namespace rlinks {

constexpr size_t kNonceBytes = 32;
constexpr size_t kProofBytes = 32;
constexpr size_t kMinSecretBytes = 16;
constexpr size_t kMaxSecretBytes = 4096;

// The secret as both sides feed it to HMAC: surrounding whitespace stripped,
// 16 to 4096 bytes. Throws UsageError otherwise.
std::string normalize_secret(std::string_view secret);

// The secret in `secret_file` if given, else in $RLINKS_SECRET; "" when
// neither is set. Throws UsageError when the file can't be read or the
// secret is malformed.
std::string load_secret(const std::string& secret_file);

bool auth_available();

// 32 random bytes from a cryptographic source.
Bytes random_nonce();

// HMAC-SHA256(secret, "rlinks-auth-v1" 0 role 0 client_nonce server_nonce),
// role being "client" or "server".
Bytes auth_proof(const std::string& secret, std::string_view role, const Bytes& client_nonce, const Bytes& server_nonce);

// Compares two proofs in constant time.
bool same_proof(const Bytes& expected, const Bytes& received);

}  // namespace rlinks
