// hyperpodrun's --pre-train-script and --post-train-script: a command run
// to completion around an attempt's workers, in their base environment.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace elasticrun::agent {

// Runs `cmd` and waits for it; returns its exit status (128+N when killed
// by signal N, 127 when it could not start). `what` names it in the log
// ("pre-train").
int run_hook(const char* what, const std::vector<std::string>& cmd,
             const std::map<std::string, std::string>& env);

}  // namespace elasticrun::agent
