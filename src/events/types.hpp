// The event types of schema version 1 (docs/events.md gives each one's
// fields). Each type is recorded at one place in the agent; a reader
// treats a type it does not know as something to show, not an error.
#pragma once

#include <array>
#include <chrono>
#include <string_view>

namespace elasticrun::events::type {

// This agent started (its flags' gist) and ended (its exit code).
inline constexpr std::string_view kAgentStart = "agent_start";
inline constexpr std::string_view kAgentEnd = "agent_end";
// This node has a place in a round: its group rank, the round's sizes.
inline constexpr std::string_view kRoundStart = "round_start";
// The round this node was in ended: the end record's kind and reason, as
// every member reads it.
inline constexpr std::string_view kRoundEnd = "round_end";
// This node's workers started (their pids, how many in warm interpreters,
// how long the start took) and ended (the outcome and each failure).
inline constexpr std::string_view kWorkersStart = "workers_start";
inline constexpr std::string_view kWorkersEnd = "workers_end";
// The leader: what it observed and what the elastic policy decided.
inline constexpr std::string_view kNodeLost = "node_lost";
inline constexpr std::string_view kWaiting = "waiting";
inline constexpr std::string_view kOperatorRequest = "operator_request";
inline constexpr std::string_view kPolicyDecision = "policy_decision";
// What the restart policy (or --max-restarts) made of a failure.
inline constexpr std::string_view kRestartDecision = "restart_decision";
// A health monitor's fault on this node.
inline constexpr std::string_view kHealthFault = "health_fault";
// A node excluded from the job for a cooldown, and by whom.
inline constexpr std::string_view kNodeExcluded = "node_excluded";
// This node leaves the job (a handled signal).
inline constexpr std::string_view kLeave = "leave";
// A worker's marked section ended (a checkpoint save, an evaluation).
inline constexpr std::string_view kSection = "section";
// A worker given the rescue window after a failure exited: whether it
// saved its rescue, and how long after the failure.
inline constexpr std::string_view kRescue = "rescue";
// Before a round's workers started, this node fetched the memory snapshots
// it lacked from the members that held them (docs/memory-tier.md).
inline constexpr std::string_view kMemoryFetch = "memory_fetch";
// While the workers ran, this node replicated a member's shards into its
// memory tier (docs/memory-tier.md).
inline constexpr std::string_view kMemoryReplicate = "memory_replicate";
// This node left gracefully and served its memory tier until the next
// round's members had restored from it (docs/memory-tier.md).
inline constexpr std::string_view kMemoryHandoff = "memory_handoff";
// The workers' steps, sampled every kProgressInterval.
inline constexpr std::string_view kProgress = "progress";

// How often the agent records kProgress while its workers step.
inline constexpr std::chrono::seconds kProgressInterval{5};

inline constexpr std::array kAll = {
    kAgentStart,      kAgentEnd,    kRoundStart,      kRoundEnd,        kWorkersStart,
    kWorkersEnd,      kNodeLost,    kWaiting,         kOperatorRequest, kPolicyDecision,
    kRestartDecision, kHealthFault, kNodeExcluded,    kLeave,           kSection,
    kRescue,          kMemoryFetch, kMemoryReplicate, kMemoryHandoff,   kProgress};

}  // namespace elasticrun::events::type
