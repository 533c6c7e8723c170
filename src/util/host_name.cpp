#include "util/host_name.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstring>

namespace elasticrun::util {

std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

std::string fqdn() {
  const std::string host = host_name();
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return host;
  hostent* he = nullptr;
  if (res->ai_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(res->ai_addr);
    he = ::gethostbyaddr(&a->sin_addr, sizeof(a->sin_addr), AF_INET);
  } else if (res->ai_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(res->ai_addr);
    he = ::gethostbyaddr(&a->sin6_addr, sizeof(a->sin6_addr), AF_INET6);
  }
  ::freeaddrinfo(res);
  if (he == nullptr || he->h_name == nullptr) return host;
  if (std::strchr(he->h_name, '.')) return he->h_name;
  for (char** alias = he->h_aliases; alias && *alias; ++alias) {
    if (std::strchr(*alias, '.')) return *alias;
  }
  return he->h_name;
}

}  // namespace elasticrun::util
