#include "cli/scheduler_env.hpp"

#include <algorithm>

#include "cli/flag_text.hpp"
#include "cli/slurm_hostlist.hpp"
#include "elasticrun/errors.hpp"

namespace elasticrun::cli {
namespace {

using Env = std::map<std::string, std::string>;

const std::string* find(const Env& env, const char* name) {
  const auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

int count(const Env& env, const char* name) {
  const std::string* v = find(env, name);
  if (v == nullptr) return 0;
  try {
    size_t used = 0;
    const int n = std::stoi(*v, &used);
    if (used == v->size() && n >= 0) return n;
  } catch (const std::exception&) {
  }
  throw ConfigError(std::string(name) + " " + *v + ": not a count");
}

std::string given_backend(const FlagValues& given) {
  const auto& r = given[static_cast<size_t>(Flag::kRdzvBackend)];
  return r ? r->text : "";
}

// c10d's port where an endpoint names none, as torchrun's.
constexpr int kC10dPort = 29400;

constexpr const char* kSlurmSignals = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2";

SchedulerGuess slurm_step(const Env& env, const FlagValues& given) {
  SchedulerGuess g;
  const std::string job = *find(env, "SLURM_JOB_ID");
  const int tasks = count(env, "SLURM_STEP_NUM_TASKS");
  const char* list_var =
      find(env, "SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
  const std::string* list = find(env, list_var);
  g.source = "SLURM job " + job + " step " + *find(env, "SLURM_STEP_ID") + " (" +
             std::to_string(tasks) + (tasks == 1 ? " task" : " tasks") +
             (list ? " on " + *list : "") + ")";
  g.values.emplace_back(Flag::kSignalsToHandle, Raw{kSlurmSignals, "SLURM"});
  if (tasks <= 1) return g;
  if (list == nullptr) {
    g.endpoint_missing = g.source + ": neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set";
    return g;
  }
  const std::string first = expand_hostlist(*list, list_var).front();
  g.values.emplace_back(Flag::kNnodes, Raw{std::to_string(tasks), "SLURM_STEP_NUM_TASKS"});
  g.values.emplace_back(Flag::kRdzvId, Raw{job, "SLURM_JOB_ID"});
  if (given_backend(given) == "static") {
    g.values.emplace_back(Flag::kMasterAddr, Raw{first, list_var});
    if (const std::string* procid = find(env, "SLURM_PROCID")) {
      g.values.emplace_back(Flag::kNodeRank, Raw{*procid, "SLURM_PROCID"});
    }
  } else {
    g.values.emplace_back(Flag::kRdzvBackend, Raw{"c10d", "SLURM"});
    g.values.emplace_back(Flag::kRdzvEndpoint,
                          Raw{first + ":" + std::to_string(kC10dPort), list_var});
  }
  return g;
}

// The batch script runs on the allocation's first node only.
SchedulerGuess slurm_batch(const Env& env) {
  SchedulerGuess g;
  const int nodes = count(env, "SLURM_JOB_NUM_NODES");
  if (nodes > 1) {
    g.notes.push_back("SLURM job " + *find(env, "SLURM_JOB_ID") +
                      ": started by its batch script, "
                      "on the first of its " +
                      std::to_string(nodes) +
                      " nodes only; start elasticrun with srun to run on all of them");
  }
  return g;
}

SchedulerGuess indexed_job(const Env& env, const FlagValues& given,
                           const std::function<std::string()>& fqdn) {
  SchedulerGuess g;
  const std::string index = *find(env, "JOB_COMPLETION_INDEX");
  g.source = "Kubernetes Indexed Job, completion index " + index;
  if (!given[static_cast<size_t>(Flag::kNnodes)]) {
    g.notes.push_back(g.source +
                      ": --nnodes not given; give the Job's completions (MIN:MAX "
                      "for an elastic job)");
  }
  const std::string name = fqdn();
  const auto dot = name.find('.');
  const std::string host = name.substr(0, dot);
  const std::string suffix = "-" + index;
  if (host.size() <= suffix.size() ||
      host.compare(host.size() - suffix.size(), suffix.size(), suffix) != 0) {
    g.endpoint_missing = g.source + ": the host name " + host + " is not <job>" + suffix +
                         ", as an Indexed Job's pod's is; give --rdzv-endpoint";
    return g;
  }
  const std::string job = host.substr(0, host.size() - suffix.size());
  if (dot == std::string::npos) {
    g.endpoint_missing = g.source + ": pod " + host +
                         " has no DNS name; set the pod template's subdomain to a headless "
                         "Service, or give --rdzv-endpoint";
    return g;
  }
  g.values.emplace_back(Flag::kRdzvBackend, Raw{"c10d", "JOB_COMPLETION_INDEX"});
  g.values.emplace_back(Flag::kRdzvEndpoint,
                        Raw{job + "-0" + name.substr(dot) + ":" + std::to_string(kC10dPort),
                            "the pod's FQDN " + name});
  g.values.emplace_back(Flag::kRdzvId, Raw{job, "the pod's host name " + host});
  return g;
}

}  // namespace

SchedulerGuess guess_from_scheduler(const Env& env, const FlagValues& given,
                                    const std::function<std::string()>& fqdn) {
  SchedulerGuess g;
  if (find(env, "SLURM_JOB_ID")) {
    if (!find(env, "SLURM_STEP_ID") || !find(env, "SLURM_STEP_NUM_TASKS")) return slurm_batch(env);
    g = slurm_step(env, given);
  } else if (find(env, "JOB_COMPLETION_INDEX")) {
    g = indexed_job(env, given, fqdn);
  }
  // --standalone asks for a job of this node alone: no rendezvous to find.
  const auto& standalone = given[static_cast<size_t>(Flag::kStandalone)];
  if (standalone && parse_switch(*standalone)) {
    std::erase_if(g.values, [](const auto& v) { return v.first != Flag::kSignalsToHandle; });
    g.notes.clear();
    g.endpoint_missing.clear();
  }
  return g;
}

}  // namespace elasticrun::cli
