// The elastic group of the command line and the job config file, merged and
// validated into LaunchConfig::elastic.
//
// Precedence, field by field: a flag, else the file (--config), else the
// default. The range of nodes is the exception, because torchrun's --nnodes
// MIN:MAX already says it: when --nnodes (or PET_NNODES) is given it is the
// range, --min-replicas/--max-replicas must agree with it (ConfigError naming
// both when not), and the file's minReplicas/maxReplicas give way with a
// note. Without --nnodes, an unset maximum is the minimum's (or 1).
#pragma once

#include "cli/job_config.hpp"
#include "cli/launch_config.hpp"
#include "cli/tokenize.hpp"

namespace elasticrun::cli {

// Fills c.elastic from the elastic flags in `given` and --config, and sets
// c.nnodes_min/nnodes_max to its replicas (c.nnodes_spec too, when --nnodes
// was not given). Call after the other flags are converted and before the
// rendezvous is derived: a single-node job derives differently. Throws
// ConfigError naming the flag, or the file, line and key, of a bad value.
// `file`: the job config (--config) as read, or empty.
void parse_elastic(LaunchConfig& c, const FlagValues& given, JobConfig file);

// "2,4,8": node counts, in any order; empty entries are an error.
std::vector<int> parse_replica_list(std::string_view what, std::string_view text);

}  // namespace elasticrun::cli
