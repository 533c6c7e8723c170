#include "rendezvous/text.hpp"

#include <charconv>
#include <sstream>

#include "elasticrun/errors.hpp"

namespace elasticrun::rendezvous::detail {

int64_t to_int(const std::string& text, const std::string& what) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size()) {
    throw StoreError("rendezvous: malformed " + what + ": '" + text + "'");
  }
  return v;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(text);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

}  // namespace elasticrun::rendezvous::detail
