#include "agent/addresses.hpp"

#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <vector>

#include "util/host_name.hpp"

namespace elasticrun::agent {
namespace {

std::string numeric(const sockaddr* sa, socklen_t len) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (::getnameinfo(sa, len, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) != 0) return {};
  return buf;
}

bool is_loopback(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
  }
  return false;
}

}  // namespace

std::string resolve_numeric(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return host;
  char buf[INET6_ADDRSTRLEN] = {};
  std::string out = host;
  if (::getnameinfo(res->ai_addr, res->ai_addrlen, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) ==
      0) {
    out = buf;
  }
  ::freeaddrinfo(res);
  return out;
}

bool is_local_address(const std::string& host) {
  if (host == "localhost") return true;
  if (host == util::host_name()) return true;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
  std::vector<std::string> wanted;
  bool local = false;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    if (is_loopback(ai->ai_addr)) local = true;
    wanted.push_back(numeric(ai->ai_addr, ai->ai_addrlen));
  }
  ::freeaddrinfo(res);
  if (local) return true;
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) != 0) return false;
  for (ifaddrs* i = ifs; i && !local; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    const int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    const socklen_t len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    const std::string addr = numeric(i->ifa_addr, len);
    for (const auto& w : wanted) local = local || w == addr;
  }
  ::freeifaddrs(ifs);
  return local;
}

}  // namespace elasticrun::agent
