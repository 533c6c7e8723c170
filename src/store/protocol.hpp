// Constants of the c10d TCPStore wire protocol, as PyTorch 2.2+ speaks it.
// docs/protocol.md is the prose version of this file; keep them in step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace elasticrun::store {

// Query types of PyTorch 2.x (the first byte of every request).
enum class QueryType : uint8_t {
  kValidate = 0,
  kSet = 1,
  kCompareSet = 2,
  kGet = 3,
  kAdd = 4,
  kCheck = 5,
  kWait = 6,
  kGetNumKeys = 7,
  kDeleteKey = 8,
  kAppend = 9,
  kMultiGet = 10,
  kMultiSet = 11,
  kCancelWait = 12,
  kPing = 13,
  kQueuePush = 14,
  kQueuePop = 15,
  kQueueLen = 16,
  kListKeys = 17,
  kBarrier = 18,
  // elasticrun's own, outside PyTorch's numbering: the job secret's
  // challenge and response at connect (store/auth.hpp). Either, as a
  // connection's first request, makes it speak the modern dialect.
  kAuthHello = 0xA0,
  kAuthProof = 0xA1,
  // A standby asks for the store's data and its changes (store/replica.hpp);
  // the connection carries only that stream afterwards. Modern dialect only.
  kReplicate = 0xA2,
};
inline constexpr uint8_t kMaxQueryType = 18;

std::string_view query_type_name(QueryType t);

// What a client sends as the argument of VALIDATE (u32, little-endian).
inline constexpr uint32_t kValidationMagic = 0x3C85F7CE;

// Reply of CHECK.
enum class CheckResponse : uint8_t { kReady = 0, kNotReady = 1 };
// Replies of WAIT and CANCEL_WAIT.
enum class WaitResponse : uint8_t { kStopWaiting = 0, kWaitCanceled = 1 };

// The numbering of PyTorch 1.x and 2.0, which have no VALIDATE. (2.1 had a
// third numbering that cannot be told apart from this one: unsupported.)
// A connection whose first request is not VALIDATE+magic speaks this dialect;
// its requests are translated to the modern types above (frame.cpp).
enum class LegacyQueryType : uint8_t {
  kSet = 0,
  kCompareSet = 1,
  kGet = 2,
  kAdd = 3,
  kCheck = 4,
  kWait = 5,
  kGetNumKeys = 6,
  kWatchKey = 7,
  kDeleteKey = 8,
};

enum class Dialect : uint8_t {
  kUnknown,  // nothing received yet
  kModern,   // PyTorch >= 2.2: VALIDATE first
  kLegacy,   // PyTorch <= 2.0
};

// Limits the server enforces on every request. A request that breaks one
// closes that client's connection; nobody else notices.
struct Limits {
  size_t max_key_size = 64 * 1024;
  size_t max_value_size = 64 * 1024 * 1024;
  size_t max_keys_per_request = 128 * 1024;
  // Total bytes one request may carry, all keys and values together.
  size_t max_request_size = 256 * 1024 * 1024;
};

}  // namespace elasticrun::store
