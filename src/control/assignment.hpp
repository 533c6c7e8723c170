// The next round's assignment for parked workers (--inprocess-restart).
//
// A worker that re-forms in process does not exit when its round ends: it
// parks, and the agent hands it the next round's place. The control block
// says that the place is ready (EventKind::reform, the new generation); the
// place itself, the environment the worker would have been started with, is
// a file beside the block, `<control file>.assign`, which the agent replaces
// atomically (a new file renamed over the old) before it publishes the event:
//
//   {"version": 1, "generation": G, "ranks": [{"NAME": "value", ...}, ...]}
//
// ranks[i] holds local rank i's variables that differ from the agent's base
// environment: torchrun's (RANK, WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE,
// ROLE_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT, ...) and
// elasticrun's (ELASTICRUN_GENERATION, the error and stack files of the new
// attempt). The worker sets them in its environment and joins the round's
// process group as a new process would. Readers ignore fields they do not
// know. Made and read (by the C++ SDK) here only; read in Python by
// python/elasticrun/inprocess.py.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "util/result.hpp"

namespace elasticrun::control {

using RankEnv = std::map<std::string, std::string>;

inline constexpr int kAssignmentVersion = 1;

// `<control_path>.assign`.
std::string assignment_path(const std::string& control_path);

// The variables of `env` whose value differs from (or is missing in) base.
RankEnv changed_from(const RankEnv& base, const RankEnv& env);

// The file's text for `generation` and each local rank's variables.
std::string format_assignment(uint64_t generation, const std::vector<RankEnv>& ranks);

// Writes format_assignment(...) to path atomically (path.tmp, renamed),
// mode 0600; the error names the path.
util::Status write_assignment(const std::string& path, uint64_t generation,
                              const std::vector<RankEnv>& ranks);

// Local rank `local_rank`'s variables for round `generation` from a file's
// text; an error says why not (not JSON, another version, another round,
// no such rank, a value that is not a string). Unknown fields are ignored.
util::Result<RankEnv> parse_assignment(const std::string& text, uint64_t generation,
                                       int local_rank);

// parse_assignment() of the file at path; the error names the path.
util::Result<RankEnv> read_assignment(const std::string& path, uint64_t generation, int local_rank);

}  // namespace elasticrun::control
