// Small helpers shared by the rendezvous sources: round keys and the text
// forms of the values the protocol keeps in the store.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rendezvous/rendezvous.hpp"

namespace elasticrun::rendezvous::detail {

inline std::string rkey(uint64_t round, const std::string& name) {
  return keys::round_key(round, name);
}

// A decimal the protocol wrote; StoreError naming `what` otherwise.
int64_t to_int(const std::string& text, const std::string& what);

std::vector<std::string> split(const std::string& text, char sep);

}  // namespace elasticrun::rendezvous::detail
