// SLURM's host list expressions (SLURM_JOB_NODELIST, SLURM_STEP_NODELIST),
// parsed in this one place:
//
//   list  := item ("," item)*
//   item  := (text | "[" range ("," range)* "]")+      several brackets multiply
//   range := digits | digits "-" digits                 zero padding kept: 01-10
//
// "gpu[01-03,07],login1" is gpu01 gpu02 gpu03 gpu07 login1;
// "rack[1-2]-n[1-2]" is rack1-n1 rack1-n2 rack2-n1 rack2-n2.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace elasticrun::cli {

// Every host, in SLURM's order. Throws ConfigError naming `origin` (the
// variable) for a malformed list or one of more than `limit` hosts.
std::vector<std::string> expand_hostlist(std::string_view list, std::string_view origin,
                                         size_t limit = 100000);

}  // namespace elasticrun::cli
