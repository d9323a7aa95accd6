#include "rlinks/auth.hpp"

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "rlinks/errors.hpp"

#ifdef RLINKS_WITH_OPENSSL
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#endif

namespace rlinks {
namespace {

constexpr std::string_view kLabel = "rlinks-auth-v1";
constexpr const char* kSecretVariable = "RLINKS_SECRET";

[[maybe_unused]] NotAvailable no_openssl() {
  return NotAvailable("authentication needs OpenSSL, which this build of rlinks leaves out: "
                      "configure it with -DRLINKS_WITH_OPENSSL=ON");
}

}  // namespace

std::string normalize_secret(std::string_view secret) {
  const char* space = " \t\n\r\f\v";
  const size_t first = secret.find_first_not_of(space);
  const size_t last = secret.find_last_not_of(space);
  const std::string_view stripped = first == std::string_view::npos ? std::string_view() : secret.substr(first, last - first + 1);
  if (stripped.size() < kMinSecretBytes) {
    throw UsageError("the rlinks secret is " + std::to_string(stripped.size()) + " bytes; at least " +
                     std::to_string(kMinSecretBytes) + " are needed. Make one with: openssl rand -hex 32");
  }
  if (stripped.size() > kMaxSecretBytes) {
    throw UsageError("the rlinks secret is longer than " + std::to_string(kMaxSecretBytes) + " bytes");
  }
  return std::string(stripped);
}

std::string load_secret(const std::string& secret_file) {
  if (!secret_file.empty()) {
    std::ifstream in(secret_file, std::ios::binary);
    if (!in) throw UsageError("cannot read the secret file '" + secret_file + "'");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return normalize_secret(text);
  }
  const char* value = std::getenv(kSecretVariable);
  if (value == nullptr || *value == '\0') return "";
  return normalize_secret(value);
}

bool auth_available() {
#ifdef RLINKS_WITH_OPENSSL
  return true;
#else
  return false;
#endif
}

Bytes random_nonce() {
#ifdef RLINKS_WITH_OPENSSL
  Bytes nonce(kNonceBytes);
  if (RAND_bytes(nonce.data(), int(nonce.size())) != 1) throw Error("no random bytes for the auth nonce");
  return nonce;
#else
  throw no_openssl();
#endif
}

Bytes auth_proof(const std::string& secret, std::string_view role, const Bytes& client_nonce, const Bytes& server_nonce) {
#ifdef RLINKS_WITH_OPENSSL
  Bytes message(kLabel.begin(), kLabel.end());
  message.push_back(0);
  message.insert(message.end(), role.begin(), role.end());
  message.push_back(0);
  message.insert(message.end(), client_nonce.begin(), client_nonce.end());
  message.insert(message.end(), server_nonce.begin(), server_nonce.end());
  Bytes proof(kProofBytes);
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), secret.data(), int(secret.size()), message.data(), message.size(), proof.data(), &length) ==
          nullptr ||
      length != kProofBytes) {
    throw Error("HMAC-SHA256 failed");
  }
  return proof;
#else
  (void)secret, (void)role, (void)client_nonce, (void)server_nonce;
  throw no_openssl();
#endif
}

bool same_proof(const Bytes& expected, const Bytes& received) {
  if (expected.size() != received.size()) return false;
  unsigned char difference = 0;
  for (size_t i = 0; i < expected.size(); ++i) difference |= expected[i] ^ received[i];
  return difference == 0;
}

}  // namespace rlinks
