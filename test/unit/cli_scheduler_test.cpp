// The scheduler's environment as flag values (cli/scheduler_env): SLURM's
// srun steps and batch scripts, Kubernetes Indexed Jobs, SLURM's host
// lists, and the precedence of flags, PET_ variables and the job config.
#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "cli/parse.hpp"
#include "cli/scheduler_env.hpp"
#include "cli/slurm_hostlist.hpp"
#include "elasticrun/errors.hpp"

using namespace elasticrun::cli;
using Catch::Matchers::Contains;
using elasticrun::ConfigError;
using Args = std::vector<std::string>;
using Env = std::map<std::string, std::string>;
using Hosts = std::vector<std::string>;

namespace {

// What srun sets in each task of `srun -N2 -n4 ...` (those we read, and a few we do not).
Env srun_step(int procid = 1) {
  return {{"SLURM_JOB_ID", "4711"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_STEP_NUM_TASKS", "4"},
          {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_STEP_NODELIST", "gpu[07-08]"},
          {"SLURM_JOB_NODELIST", "gpu[07-09]"},
          {"SLURM_PROCID", std::to_string(procid)},
          {"SLURM_NODEID", "0"},
          {"SLURM_LOCALID", "1"},
          {"SLURM_JOB_NUM_NODES", "3"}};
}

LaunchConfig parse(const Args& args, const Env& env) {
  return parse_launch_args(args, env, 16, 0);
}

bool has_note(const LaunchConfig& c, const std::string& part) {
  for (const auto& n : c.notes) {
    if (n.find(part) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("SLURM host lists expand as SLURM's own do", "[cli][slurm]") {
  CHECK(expand_hostlist("vm", "L") == Hosts{"vm"});
  CHECK(expand_hostlist("gpu[01-03,07],login1", "L") ==
        Hosts{"gpu01", "gpu02", "gpu03", "gpu07", "login1"});
  CHECK(expand_hostlist("n[8-10]", "L") == Hosts{"n8", "n9", "n10"});
  CHECK(expand_hostlist("n[098-101]", "L") == Hosts{"n098", "n099", "n100", "n101"});
  CHECK(expand_hostlist("rack[1-2]-n[1-2].ib", "L") ==
        Hosts{"rack1-n1.ib", "rack1-n2.ib", "rack2-n1.ib", "rack2-n2.ib"});
  CHECK(expand_hostlist("a,b[3],c", "L") == Hosts{"a", "b3", "c"});
  for (const char* bad : {"", "gpu[01-03", "gpu01]", "gpu[03-01]", "gpu[a-b]", "gpu[]", "a,,b",
                          "a,", ",a", "gpu[1-]"}) {
    INFO(bad);
    CHECK_THROWS_WITH(expand_hostlist(bad, "SLURM_STEP_NODELIST"), Contains("SLURM_STEP_NODELIST"));
  }
  CHECK_THROWS_WITH(expand_hostlist("n[1-200000]", "L", 1000), Contains("more than 1000 hosts"));
  CHECK_THROWS_WITH(expand_hostlist("a[1-40]b[1-40]", "L", 1000), Contains("more than 1000"));
}

TEST_CASE("an srun step gives the rendezvous: every task one node", "[cli][slurm]") {
  const auto c = parse({"--nproc-per-node", "8", "train.py"}, srun_step());
  CHECK(c.rdzv_backend == "c10d");
  CHECK(c.rdzv_endpoint == "gpu07:29400");
  CHECK(c.rdzv_id == "4711");
  CHECK(c.nnodes_min == 4);
  CHECK(c.nnodes_max == 4);
  CHECK(c.nproc_per_node == 8);
  CHECK(c.signals_to_handle ==
        std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2});
  // Said once, naming where each value came from; nothing about the node rank.
  REQUIRE(c.notes.size() == 1);
  CHECK_THAT(c.notes[0], Contains("SLURM job 4711 step 0 (4 tasks on gpu[07-08])"));
  CHECK_THAT(c.notes[0], Contains("--nnodes 4 (SLURM_STEP_NUM_TASKS)"));
  CHECK_THAT(c.notes[0], Contains("--rdzv-endpoint gpu07:29400 (SLURM_STEP_NODELIST)"));
}

TEST_CASE("flags and PET_ variables win over SLURM's environment", "[cli][slurm]") {
  const auto c = parse({"--nnodes", "2:4", "--rdzv-endpoint", "head:1234", "train.py"}, [] {
    auto e = srun_step();
    e["PET_RDZV_ID"] = "mine";
    return e;
  }());
  CHECK(c.nnodes_min == 2);
  CHECK(c.nnodes_max == 4);
  CHECK(c.rdzv_endpoint == "head:1234");
  CHECK(c.rdzv_id == "mine");
  REQUIRE(c.notes.size() == 1);
  CHECK_THAT(c.notes[0], !Contains("--nnodes") && !Contains("--rdzv-id"));
  // --min-replicas keeps the range its own.
  const auto r = parse({"--min-replicas", "2", "--max-replicas", "6", "train.py"}, srun_step());
  CHECK(r.nnodes_min == 2);
  CHECK(r.nnodes_max == 6);
  const auto s = parse({"--signals-to-handle", "SIGTERM", "train.py"}, srun_step());
  CHECK(s.signals_to_handle == std::vector<int>{SIGTERM});
}

TEST_CASE("the job config's range wins over SLURM's task count", "[cli][slurm]") {
  const auto path = std::filesystem::temp_directory_path() / "cli_scheduler_test.yaml";
  std::ofstream(path) << "elasticPolicy:\n  minReplicas: 1\n  maxReplicas: 8\n";
  const auto c = parse({"--config", path.string(), "train.py"}, srun_step());
  std::filesystem::remove(path);
  CHECK(c.nnodes_min == 1);
  CHECK(c.nnodes_max == 8);
  CHECK(c.rdzv_endpoint == "gpu07:29400");
}

TEST_CASE("an srun step with the static backend gives node ranks and the master", "[cli][slurm]") {
  const auto c = parse({"--rdzv-backend", "static", "train.py"}, srun_step(3));
  CHECK(c.rdzv_backend == "static");
  CHECK(c.node_rank == 3);
  CHECK(c.master_addr == "gpu07");
  CHECK(c.rdzv_endpoint == "gpu07:29500");
  CHECK(c.nnodes_max == 4);
}

TEST_CASE("a one-task step is a single-node job; a batch script reads nothing", "[cli][slurm]") {
  auto one = srun_step(0);
  one["SLURM_STEP_NUM_TASKS"] = "1";
  const auto c = parse({"train.py"}, one);
  CHECK(c.nnodes_max == 1);
  CHECK(c.rdzv_endpoint == "localhost:0");
  CHECK(c.signals_to_handle.size() == 6);

  // --standalone: this node alone, whatever the step holds.
  const auto alone = parse({"--standalone", "train.py"}, srun_step());
  CHECK(alone.nnodes_max == 1);
  CHECK(alone.rdzv_endpoint == "localhost:0");
  CHECK(alone.signals_to_handle.size() == 6);
  CHECK(parse({"--standalone", "train.py"}, {{"JOB_COMPLETION_INDEX", "1"}, {"HOSTNAME", "x"}})
            .rdzv_endpoint == "localhost:0");

  Env batch = {{"SLURM_JOB_ID", "12"},
               {"SLURM_JOB_NUM_NODES", "4"},
               {"SLURM_PROCID", "0"},
               {"SLURM_JOB_NODELIST", "n[1-4]"}};
  const auto b = parse({"train.py"}, batch);
  CHECK(b.nnodes_max == 1);
  CHECK(b.signals_to_handle.size() == 4);
  CHECK(has_note(b, "on the first of its 4 nodes only; start elasticrun with srun"));
  batch["SLURM_JOB_NUM_NODES"] = "1";
  CHECK(parse({"train.py"}, batch).notes.empty());
}

TEST_CASE("a broken SLURM environment is a clear error", "[cli][slurm]") {
  auto e = srun_step();
  e["SLURM_STEP_NUM_TASKS"] = "four";
  CHECK_THROWS_WITH(parse({"train.py"}, e), Contains("SLURM_STEP_NUM_TASKS four: not a count"));
  e = srun_step();
  e["SLURM_STEP_NODELIST"] = "gpu[07-";
  CHECK_THROWS_WITH(parse({"train.py"}, e), Contains("SLURM_STEP_NODELIST 'gpu[07-'"));
  e = srun_step();
  e.erase("SLURM_STEP_NODELIST");
  e.erase("SLURM_JOB_NODELIST");
  CHECK_THROWS_WITH(parse({"train.py"}, e), Contains("neither SLURM_STEP_NODELIST"));
  // ... unless the endpoint is given.
  CHECK(parse({"--rdzv-endpoint", "h:1", "train.py"}, e).rdzv_endpoint == "h:1");
}

TEST_CASE("a Kubernetes Indexed Job's pod finds index 0 through its FQDN", "[cli][k8s]") {
  const Env env = {{"JOB_COMPLETION_INDEX", "2"}, {"HOSTNAME", "trainer-2"}};
  const auto fqdn = [] { return std::string("trainer-2.trainers.ml.svc.cluster.local"); };
  FlagValues given{};
  const auto g = guess_from_scheduler(env, given, fqdn);
  CHECK(g.source == "Kubernetes Indexed Job, completion index 2");
  REQUIRE(g.values.size() == 3);
  CHECK(g.values[1].second.text == "trainer-0.trainers.ml.svc.cluster.local:29400");
  CHECK(g.values[2].second.text == "trainer");
  CHECK(g.endpoint_missing.empty());
  REQUIRE(g.notes.size() == 1);
  CHECK_THAT(g.notes[0], Contains("--nnodes not given"));
  given[static_cast<size_t>(Flag::kNnodes)] = Raw{"4", "--nnodes"};
  CHECK(guess_from_scheduler(env, given, fqdn).notes.empty());

  // A job's own dashes stay its own.
  const auto dashed = guess_from_scheduler({{"JOB_COMPLETION_INDEX", "10"}}, given,
                                           [] { return std::string("my-job-10.svc"); });
  CHECK(dashed.values[1].second.text == "my-job-0.svc:29400");
  CHECK(dashed.values[2].second.text == "my-job");

  // Without a subdomain there is no DNS name to find.
  const auto bare = guess_from_scheduler(env, given, [] { return std::string("trainer-2"); });
  CHECK_THAT(bare.endpoint_missing, Contains("has no DNS name; set the pod template's subdomain"));
  const auto odd = guess_from_scheduler(env, given, [] { return std::string("laptop.lan"); });
  CHECK_THAT(odd.endpoint_missing, Contains("laptop is not <job>-2"));
}

TEST_CASE("nothing is read outside a scheduler", "[cli][slurm][k8s]") {
  const auto g =
      guess_from_scheduler({{"HOSTNAME", "x"}}, FlagValues{}, [] { return std::string("x.y"); });
  CHECK(g.source.empty());
  CHECK(g.values.empty());
  CHECK(g.notes.empty());
}
