#include "util/strings.hpp"

namespace elasticrun::util {

std::string quote(std::string_view s, size_t max) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c == '\'' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  out += '\'';
  if (s.size() > max) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

std::string seconds_text(std::chrono::milliseconds d) {
  std::string s = std::to_string(d.count() / 1000);
  if (d.count() % 1000) {
    std::string frac = std::to_string(1000 + d.count() % 1000).substr(1);
    while (frac.back() == '0') frac.pop_back();
    s += "." + frac;
  }
  return s + " s";
}

}  // namespace elasticrun::util
