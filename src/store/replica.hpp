// The stream that keeps a standby store equal to its primary (docs/protocol.md,
// "Standby"). Made and parsed here only.
//
// A standby connects as any client (the job secret's handshake, VALIDATE,
// PING), then sends REPLICATE (0xA2) with the endpoint it serves at. From
// then on the connection carries only this stream:
//
//   primary -> standby  records, each a u8 tag and a u64 sequence number:
//       kChange  + u8 kind, key and value (u64 length and bytes each): one
//                  Change (store/state.hpp); numbers rise by one per change
//       kSynced  + u64 store id: the snapshot (changes that rebuild the
//                  data) is complete; the id is the primary's, random per
//                  process, so a follower can tell a restarted store
//   standby -> primary  u64 acknowledgements: every change through that
//                       number is applied
//
// The primary holds back every reply produced after a change until the
// standby acknowledged it, so a client never sees a write (nor anything
// that followed one) that the standby could lack.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "store/frame.hpp"
#include "store/state.hpp"

namespace elasticrun::store {

inline constexpr size_t kAckSize = sizeof(uint64_t);
// "STBY", little-endian: a standby's answer to a client's PING, before it
// closes the connection (the client tries its next endpoint).
inline constexpr uint32_t kStandbyWord = 0x59425453;

struct ReplicaRecord {
  enum class Tag : uint8_t { kChange = 1, kSynced = 2 };
  Tag tag = Tag::kChange;
  uint64_t seq = 0;
  Change change;          // kChange
  uint64_t store_id = 0;  // kSynced
};

void write_change(std::string& out, uint64_t seq, const Change& change);
void write_synced(std::string& out, uint64_t seq, uint64_t store_id);
void write_ack(std::string& out, uint64_t seq);

// One record from the front of `data` (ParseResult as parse_request's:
// incomplete, invalid with a reason, or complete with its size). Keys and
// values are held to `limits`.
ParseResult parse_replica_record(std::string_view data, const Limits& limits, ReplicaRecord& out);

}  // namespace elasticrun::store
