#include "rlinks/address.hpp"

#include "rlinks/errors.hpp"

namespace rlinks {

std::string Address::str() const {
  const std::string shown_host = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return (tls ? "tls://" : "") + shown_host + ":" + std::to_string(port);
}

Address parse_address(std::string_view text) {
  const auto invalid = [&](const std::string& why) {
    return UsageError("address '" + std::string(text) + "': " + why + " (expected HOST:PORT, tcp://HOST:PORT or tls://HOST:PORT)");
  };
  Address address;
  std::string_view rest = text;
  if (rest.substr(0, 6) == "tls://") {
    address.tls = true;
    rest.remove_prefix(6);
  } else if (rest.substr(0, 6) == "tcp://") {
    rest.remove_prefix(6);
  } else if (rest.find("://") != std::string_view::npos) {
    throw invalid("unknown scheme");
  }
  std::string_view port;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      throw invalid("an IPv6 host needs [HOST]:PORT");
    }
    address.host = std::string(rest.substr(1, close - 1));
    port = rest.substr(close + 2);
  } else {
    const size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) throw invalid("no port");
    address.host = std::string(rest.substr(0, colon));
    port = rest.substr(colon + 1);
    if (address.host.find(':') != std::string::npos) throw invalid("put an IPv6 host in brackets");
  }
  if (address.host.empty()) throw invalid("no host");
  if (port.empty() || port.size() > 5) throw invalid("bad port");
  unsigned long number = 0;
  for (char digit : port) {
    if (digit < '0' || digit > '9') throw invalid("bad port");
    number = number * 10 + unsigned(digit - '0');
  }
  if (number < 1 || number > 65535) throw invalid("port out of range");
  address.port = uint16_t(number);
  return address;
}

}  // namespace rlinks
