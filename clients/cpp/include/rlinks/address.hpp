// Where a learner listens: HOST:PORT, tcp://HOST:PORT, tls://HOST:PORT, [::1]:PORT.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace rlinks {

struct Address {
  std::string host;
  uint16_t port = 0;
  bool tls = false;

  std::string str() const;
};

// Throws UsageError for anything but the forms above with a port in 1..65535.
Address parse_address(std::string_view text);

}  // namespace rlinks
