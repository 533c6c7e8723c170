#include "util/state_line.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <string>

#include "util/strings.hpp"

namespace elasticrun::util {

Result<std::vector<StateField>> split_state_line(std::string_view text, std::string_view version,
                                                 std::span<const std::string_view> order) {
  auto bad = [](std::string why) { return Status(EINVAL, std::move(why)); };
  std::string_view rest = text;
  auto next_field = [&rest] {
    const size_t semi = rest.find(';');
    const std::string_view field = rest.substr(0, semi);
    rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
    return field;
  };
  if (next_field() != version) return bad("not a " + std::string(version) + " state");
  std::vector<StateField> fields;
  size_t next_key = 0;  // keys come in `order`, each at most once
  while (!rest.empty()) {
    const std::string_view field = next_field();
    const size_t eq = field.find('=');
    if (eq == std::string_view::npos) return bad("field " + quote(field) + " has no '='");
    const std::string_view key = field.substr(0, eq);
    size_t k = next_key;
    while (k < order.size() && order[k] != key) ++k;
    if (k == order.size()) return bad("unknown, repeated or misplaced key " + quote(key));
    next_key = k + 1;
    fields.push_back({key, field.substr(eq + 1)});
  }
  // "v1;" and "v1;a=0;" leave an empty last field.
  if (!text.empty() && text.back() == ';') return bad("trailing ';'");
  return fields;
}

std::optional<int64_t> canonical_decimal(std::string_view v, bool allow_negative) {
  std::string_view digits = v;
  if (allow_negative && !digits.empty() && digits.front() == '-') digits.remove_prefix(1);
  const bool canonical =
      !digits.empty() && (digits.size() == 1 || digits.front() != '0') &&
      std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) &&
      !(digits.size() < v.size() && digits == "0");
  int64_t n = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (!canonical || ec != std::errc() || end != v.data() + v.size()) return std::nullopt;
  return n;
}

}  // namespace elasticrun::util
