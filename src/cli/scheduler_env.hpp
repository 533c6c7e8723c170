// What a batch scheduler's environment says about the job, as flag values,
// so that `srun elasticrun --nproc-per-node 8 train.py` and a Kubernetes
// Indexed Job's pod need no rendezvous flags. Precedence, highest first: a
// flag, its PET_ variable, the job config, what is read here, the default.
//
// SLURM, inside an srun step (SLURM_STEP_ID and SLURM_STEP_NUM_TASKS set):
// every task is one agent, a node in torchrun's terms, so several tasks on
// one machine are several nodes of the job.
//   --nnodes              SLURM_STEP_NUM_TASKS (when above 1)
//   --rdzv-backend        c10d
//   --rdzv-endpoint       the first host of SLURM_STEP_NODELIST, port 29400
//                         (c10d's default); SLURM_JOB_NODELIST if unset
//   --rdzv-id             SLURM_JOB_ID
//   --node-rank           SLURM_PROCID, and --master-addr the first host,
//                         only with --rdzv-backend static
//   --signals-to-handle   torchrun's four and SIGUSR1, SIGUSR2: the warning
//                         of --signal=USR1@60 is a graceful leave
// A step of one task is a single-node job (derived as torchrun derives it),
// and so is any step under --standalone (only the signals are read).
// In the batch script itself (no step), nothing is read: the script runs on
// the first node only, and a job of several nodes gets a note to use srun.
//
// Kubernetes Indexed Job (JOB_COMPLETION_INDEX set): the pod's hostname is
// "<job>-<index>" and, with spec.subdomain naming a headless Service, its
// FQDN "<job>-<index>.<service>.<namespace>.svc.<domain>".
//   --rdzv-backend        c10d
//   --rdzv-endpoint       "<job>-0.<service>...", index 0's pod, port 29400
//   --rdzv-id             "<job>"
// --nnodes stays the user's (the Job's completions are not in the pod's
// environment). Without a subdomain the pods have no DNS names: a clear
// error unless --rdzv-endpoint is given.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cli/tokenize.hpp"

namespace elasticrun::cli {

struct SchedulerGuess {
  // "SLURM job 12 step 0 (2 tasks on vm)"; empty: no scheduler seen.
  std::string source;
  // The flag values read, each Raw's origin naming its variable.
  std::vector<std::pair<Flag, Raw>> values;
  // Said at start whatever is applied.
  std::vector<std::string> notes;
  // Non-empty: the endpoint could not be found, and why; an error unless
  // the endpoint is given.
  std::string endpoint_missing;
};

// `given`: the flags and PET_ variables seen so far (a given backend picks
// what is read). `fqdn` is asked for a Kubernetes pod only.
SchedulerGuess guess_from_scheduler(const std::map<std::string, std::string>& env,
                                    const FlagValues& given,
                                    const std::function<std::string()>& fqdn);

}  // namespace elasticrun::cli
