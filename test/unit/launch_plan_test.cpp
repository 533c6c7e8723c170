// From the command line to the agent's configuration (agent/launch_plan):
// the worker command, the rendezvous mode and --rdzv-conf, the policy, the
// per-rank log plans, the hooks and what workers inherit.
#include "agent/launch_plan.hpp"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "cli/parse.hpp"
#include "elasticrun/errors.hpp"
#include "temp_dir.hpp"

using namespace elasticrun;
using agent::AgentConfig;
using agent::Environment;
using Catch::Matchers::Contains;
using Args = std::vector<std::string>;

namespace {

// PYTHON_EXEC fixes the interpreter, so that these tests do not depend on PATH.
const Environment kEnv = {{"PYTHON_EXEC", "/opt/py/bin/python3"}};

AgentConfig plan(const Args& args, const Environment& env = kEnv) {
  return agent::plan_agent(cli::parse_launch_args(args, env, 16, 0), env);
}

std::string make_executable(const test::TempDir& dir, const std::string& name) {
  const std::string path = dir / name;
  std::ofstream(path) << "#!/bin/sh\n";
  ::chmod(path.c_str(), 0755);
  return path;
}

}  // namespace

TEST_CASE("a Python script runs as python -u script args", "[launch_plan]") {
  const AgentConfig a = plan({"train.py", "--lr", "0.1"});
  CHECK(a.worker_command == Args{"/opt/py/bin/python3", "-u", "train.py", "--lr", "0.1"});
  CHECK(a.script_name == "train.py");
}

TEST_CASE("-m runs a module, --no-python the program itself, --run-path through runpy",
          "[launch_plan]") {
  CHECK(plan({"-m", "pkg.train", "x"}).worker_command ==
        Args{"/opt/py/bin/python3", "-u", "-m", "pkg.train", "x"});
  CHECK(plan({"--no-python", "./worker", "x"}).worker_command == Args{"./worker", "x"});
  const Args run_path = plan({"--run-path", "/abs/train.py", "x"}).worker_command;
  REQUIRE(run_path.size() == 6);
  CHECK(run_path[2] == "-c");
  CHECK_THAT(run_path[3], Contains("runpy.run_path"));
  CHECK(run_path[4] == "/abs/train.py");
}

TEST_CASE("without PYTHON_EXEC the workers run the python3 that PATH finds first",
          "[launch_plan]") {
  test::TempDir first, second;
  make_executable(second, "python3");
  const std::string in_first = make_executable(first, "python");
  const std::string python3 = second / "python3";
  const Environment env = {{"PATH", first.path().string() + ":" + second.path().string()}};
  // python3 beats python even when python comes earlier on PATH.
  CHECK(plan({"t.py"}, env).worker_command.front() == python3);
  const Environment only_python = {{"PATH", first.path().string()}};
  CHECK(plan({"t.py"}, only_python).worker_command.front() == in_first);
  CHECK_THROWS_WITH(plan({"t.py"}, Environment{{"PATH", "/nonexistent"}}),
                    Contains("no python3 or python on PATH"));
}

TEST_CASE("--warm-start knows where sys.argv starts in each command shape", "[launch_plan]") {
  CHECK(plan({"--warm-start", "t.py"}).warm_start.argv_offset == 2);
  CHECK(plan({"--warm-start", "-m", "m"}).warm_start.argv_offset == 3);
  CHECK(plan({"--warm-start", "--run-path", "/t.py"}).warm_start.argv_offset == 4);
  CHECK(plan({"--warm-start", "--run-path", "/t.py"}).warm_start.mode == "run_path");
  CHECK_FALSE(plan({"--warm-start", "--no-python", "w"}).warm_start.enabled);
}

TEST_CASE("the backend decides between a fixed place and rounds", "[launch_plan]") {
  const AgentConfig standalone = plan({"--standalone", "--nproc-per-node", "4", "t.py"});
  CHECK(standalone.standalone);
  CHECK_FALSE(standalone.dynamic);
  const AgentConfig fixed = plan({"--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1",
                                  "--master-port", "1234", "t.py"});
  CHECK_FALSE(fixed.standalone);
  CHECK_FALSE(fixed.dynamic);
  CHECK(fixed.node_rank == 1);
  CHECK(fixed.master_port == 1234);
  const AgentConfig elastic = plan({"--nnodes", "2:4", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                                    "store:5555", "--rdzv-id", "job", "t.py"});
  CHECK(elastic.dynamic);
  CHECK(elastic.rdzv.store_host == "store");
  CHECK(elastic.rdzv.store_port == 5555);
  CHECK(elastic.rdzv.run_id == "job");
  CHECK(elastic.policy.min_replicas == 2);
  CHECK(elastic.policy.max_replicas == 4);
  CHECK(elastic.rdzv.sizes.max_replicas == 4);
}

TEST_CASE("--rdzv-conf keys map onto the rendezvous, unknown ones are refused", "[launch_plan]") {
  const Args base = {"--nnodes", "1:3", "--rdzv-backend", "c10d", "--rdzv-conf"};
  auto with = [&](const std::string& conf) {
    Args a = base;
    a.push_back(conf);
    a.push_back("t.py");
    return plan(a);
  };
  const AgentConfig a = with("join_timeout=12,keep_alive_interval=0.5,missed_heartbeats=3");
  CHECK(a.rdzv.join_timeout == std::chrono::seconds(12));
  CHECK(a.rdzv.heartbeat_interval == std::chrono::milliseconds(500));
  CHECK(a.rdzv.missed_heartbeats == 3);
  CHECK(with("is_host=0").host_store == AgentConfig::HostStore::kNo);
  CHECK(with("is_host=true").host_store == AgentConfig::HostStore::kYes);
  CHECK_THROWS_WITH(with("is_host=maybe"), Contains("expected 1 or 0"));
  CHECK_THROWS_WITH(with("jion_timeout=5"), Contains("unknown key for the c10d backend"));
  CHECK_THROWS_WITH(with("heartbeat_interval=0.001"), Contains("at least 0.01 s"));
  CHECK_THROWS_WITH(with("rejoin_timeout=-1"), Contains("must not be negative"));
  // The store's standby: where every agent goes when the store's host is lost.
  const AgentConfig sb = with("standby_endpoint=node1:29401");
  CHECK(sb.rdzv.standby_host == "node1");
  CHECK(sb.rdzv.standby_port == 29401);
  CHECK(a.rdzv.standby_host.empty());
  CHECK_THROWS_WITH(with("standby_endpoint=node1"), Contains("standby_endpoint"));
  CHECK_THROWS_WITH(with("standby_endpoint=localhost:29400"),
                    Contains("the rendezvous endpoint itself"));
}

TEST_CASE("per-rank log plans cover every local rank", "[launch_plan]") {
  const AgentConfig a =
      plan({"--nproc-per-node", "3", "--tee", "0:3,2:1", "--redirects", "2", "t.py"});
  CHECK(a.tee == std::vector<int>{3, 0, 1});
  // --redirects in the same map form would name ranks; a single value covers all.
  CHECK(a.redirects == std::vector<int>{2, 2, 2});
}

TEST_CASE("hooks carry their arguments, and workers inherit the handled signals", "[launch_plan]") {
  const AgentConfig a = plan({"--pre-train-script", "/bin/prep", "--pre-train-args", "a 'b c'",
                              "--signals-to-handle", "SIGTERM,SIGUSR2", "t.py"});
  CHECK(a.pre_train_command == Args{"/bin/prep", "a", "b c"});
  CHECK(a.post_train_command.empty());
  CHECK(a.worker_env.at("TORCHELASTIC_SIGNALS_TO_HANDLE") == "SIGTERM,SIGUSR2");
  CHECK_FALSE(a.worker_env.count("ELASTICRUN_CONFIG_FILE"));
}

TEST_CASE("the agent's error file comes from its own TORCHELASTIC_ERROR_FILE", "[launch_plan]") {
  Environment env = kEnv;
  env["TORCHELASTIC_ERROR_FILE"] = "/tmp/agent-error.json";
  CHECK(plan({"t.py"}, env).agent_error_file == "/tmp/agent-error.json");
  CHECK(plan({"t.py"}).agent_error_file.empty());
}

TEST_CASE("etcd and etcd-v2 run the dynamic rendezvous on every member given, hosting no store",
          "[launch_plan][etcd]") {
  for (const char* backend : {"etcd", "etcd-v2"}) {
    const AgentConfig a = plan({"--nnodes", "2:4", "--rdzv-backend", backend, "--rdzv-endpoint",
                                "e1,e2:2380,[::1]:2381", "t.py"});
    CHECK(a.dynamic);
    CHECK(a.host_store == AgentConfig::HostStore::kNo);
    REQUIRE(a.rdzv.etcd);
    const std::vector<std::pair<std::string, uint16_t>> want = {
        {"e1", 2379}, {"e2", 2380}, {"::1", 2381}};
    CHECK(a.rdzv.etcd->endpoints == want);
    CHECK_FALSE(a.rdzv.etcd->tls);
  }
  // torchrun's etcd names and etcd-v2's for the same files.
  const AgentConfig tls =
      plan({"--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint", "https://e1:2379",
            "--rdzv-conf", "cacert=/ca.pem,ssl_cert=/c.pem,key=/k.pem", "t.py"});
  CHECK(tls.rdzv.etcd->tls);
  CHECK(tls.rdzv.etcd->ca_file == "/ca.pem");
  CHECK(tls.rdzv.etcd->cert_file == "/c.pem");
  CHECK(tls.rdzv.etcd->key_file == "/k.pem");
  CHECK(plan({"--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-conf", "protocol=https", "t.py"})
            .rdzv.etcd->tls);
  // One node needs no rendezvous, as with c10d.
  const AgentConfig one = plan({"--rdzv-backend", "etcd", "t.py"});
  CHECK(one.standalone);
  CHECK_THAT(one.notes.back(), Contains("not used by a job of one node"));
}

TEST_CASE("etcd settings that cannot work are refused before anything starts",
          "[launch_plan][etcd]") {
  auto etcd = [](std::vector<std::string> extra) {
    std::vector<std::string> args = {"--nnodes", "2", "--rdzv-backend", "etcd"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back("t.py");
    return plan(args);
  };
  CHECK_THROWS_WITH(etcd({"--rdzv-conf", "cacert=/ca.pem"}), Contains("are for https"));
  CHECK_THROWS_WITH(etcd({"--rdzv-conf", "protocol=https,cert=/c.pem"}),
                    Contains("needs both cert and key"));
  CHECK_THROWS_WITH(etcd({"--rdzv-conf", "protocol=gopher"}), Contains("expected http or https"));
  CHECK_THROWS_WITH(etcd({"--rdzv-endpoint", "https://e1", "--rdzv-conf", "protocol=http"}),
                    Contains("disagrees"));
  CHECK_THROWS_WITH(etcd({"--rdzv-conf", "standby_endpoint=h:1"}), Contains("not with etcd"));
  CHECK_THROWS_WITH(etcd({"--rdzv-conf", "etcd_prefix=/x"}), Contains("unknown key"));
  CHECK_THROWS_WITH(etcd({"--rdzv-endpoint", "http://a,https://b"}), Contains("mix"));
  CHECK_THROWS_WITH(etcd({"--rdzv-endpoint", "a,,b"}), Contains("an empty endpoint"));
  CHECK_THROWS_WITH(etcd({"--rdzv-endpoint", "a:0"}), Contains("port cannot be 0"));
  CHECK_THROWS_WITH(
      plan({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-conf", "cacert=/ca.pem", "t.py"}),
      Contains("unknown key for the c10d backend"));
}

TEST_CASE("--gpu-health turns GPU health off, and tests can point it at a fake driver",
          "[launch_plan]") {
  AgentConfig a = plan({"train.py"});
  CHECK(a.gpu_health.enabled);
  CHECK(a.gpu_health.library == "libnvidia-ml.so.1");
  CHECK(a.gpu_health.root == "/");
  CHECK_FALSE(plan({"--gpu-health", "off", "train.py"}).gpu_health.enabled);
  Environment env = kEnv;
  env["ELASTICRUN_NVML_LIBRARY"] = "/tmp/libfake_nvml.so";
  env["ELASTICRUN_TEST_SYSFS_ROOT"] = "/tmp/sysfs";
  a = plan({"train.py"}, env);
  CHECK(a.gpu_health.library == "/tmp/libfake_nvml.so");
  CHECK(a.gpu_health.root == "/tmp/sysfs");
}
