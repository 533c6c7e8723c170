// One line of versioned key=value fields, "v1;lvl=0;cap=3": the form the
// agents' small states take in the store (the elastic policy's, the restart
// policy's). Strict, because whatever it accepts must read back exactly as
// it was written: a version tag first, then fields separated by ';', each
// key at most once and in a fixed order, no trailing ';', numbers in
// canonical decimal. The meaning of the fields is the caller's.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "util/result.hpp"

namespace elasticrun::util {

struct StateField {
  std::string_view key;
  std::string_view value;
};

// The fields of `text` (views into it), after its version tag. EINVAL with
// why in the context when the tag is not `version`, a field has no '=', a
// key is unknown, repeated or out of `order`, or the line ends in ';'.
// Which keys must be present is the caller's to check.
Result<std::vector<StateField>> split_state_line(std::string_view text, std::string_view version,
                                                 std::span<const std::string_view> order);

// A number as serialize() writes it: digits without leading zeros (and a
// '-' when negatives are allowed, but never "-0"), within int64_t.
std::optional<int64_t> canonical_decimal(std::string_view text, bool allow_negative = false);

}  // namespace elasticrun::util
