// The launch command line (cli/): torchrun's flags, spellings, PET_ fallback,
// defaults and derivations, hyperpodrun's extras, and every rejected input.
#include <catch2/catch.hpp>
#include <csignal>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cli/flags.hpp"
#include "cli/parse.hpp"
#include "elasticrun/errors.hpp"

using namespace elasticrun::cli;
using Catch::Matchers::Contains;
using elasticrun::ConfigError;
using Args = std::vector<std::string>;
using Env = std::map<std::string, std::string>;

namespace {

LaunchConfig parse(const Args& args, const Env& env = {}, int cpus = 16, int gpus = 0) {
  return parse_launch_args(args, env, cpus, gpus);
}

// The JSON with the random run id blanked, to compare two parses.
std::string dump(LaunchConfig c) {
  if (c.rdzv_endpoint == "localhost:0") c.rdzv_id = "<random>";
  return to_json(c);
}

bool is_uuid4(const std::string& s) {
  if (s.size() != 36 || s[14] != '4') return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash != (s[i] == '-')) return false;
    if (!dash && std::string("0123456789abcdef").find(s[i]) == std::string::npos) return false;
  }
  return true;
}

// A value for each flag that differs from its default.
const std::map<Flag, std::string> kSample = {
    {Flag::kWarmStartImports, "torch,numpy"},
    {Flag::kEventLog, "events.jsonl"},
    {Flag::kMetricsPort, "9400"},
    {Flag::kSpotNoticeUrl, "http://127.0.0.1:1/notice"},
    {Flag::kSpotNoticeInterval, "0.5"},
    {Flag::kHostDiscoveryScript, "/opt/discover-hosts.sh"},
    {Flag::kHostDiscoveryInterval, "2.5"},
    {Flag::kMemoryTierLimit, "512M"},
    {Flag::kMemoryReplicas, "2"},
    {Flag::kMemoryReplicationRate, "64M"},
    {Flag::kDataCacheLimit, "256M"},
    {Flag::kHangTimeout, "120"},
    {Flag::kStartupTimeout, "600"},
    {Flag::kNonFiniteLoss, "off"},
    {Flag::kExcludeAfter, "5"},
    {Flag::kExcludeWindow, "60"},
    {Flag::kExcludeCooldown, "30"},
    {Flag::kStragglerFactor, "1.5"},
    {Flag::kStragglerPoints, "4"},
    {Flag::kGpuHealth, "off"},
    {Flag::kNnodes, "2"},
    {Flag::kNprocPerNode, "3"},
    {Flag::kRdzvBackend, "etcd"},
    {Flag::kRdzvEndpoint, "node1:2000"},
    {Flag::kRdzvId, "job2"},
    {Flag::kRdzvConf, "timeout=60"},
    {Flag::kMaxRestarts, "4"},
    {Flag::kMonitorInterval, "2.5"},
    {Flag::kStartMethod, "fork"},
    {Flag::kEventLogHandler, "console"},
    {Flag::kRole, "trainer"},
    {Flag::kLogDir, "/tmp/logs"},
    {Flag::kRedirects, "3"},
    {Flag::kTee, "0:1,1:2"},
    {Flag::kLogLinePrefixTemplate, "${rank}: "},
    {Flag::kLocalRanksFilter, "0,1"},
    {Flag::kDuplicateStdoutFilters, "loss"},
    {Flag::kDuplicateStderrFilters, "error"},
    {Flag::kNodeRank, "1"},
    {Flag::kMasterAddr, "10.0.0.1"},
    {Flag::kMasterPort, "1234"},
    {Flag::kLocalAddr, "10.0.0.2"},
    {Flag::kLogsSpecs, "mine"},
    {Flag::kNumaBinding, "node"},
    {Flag::kSignalsToHandle, "SIGUSR1"},
    {Flag::kShutdownTimeout, "5"},
    {Flag::kShutdownSignal, "SIGUSR2"},
    {Flag::kPreTrainScript, "pre.sh"},
    {Flag::kPreTrainArgs, "a b"},
    {Flag::kPostTrainScript, "post.sh"},
    {Flag::kPostTrainArgs, "c"},
    {Flag::kServerHost, "127.0.0.1"},
    {Flag::kServerPort, "9000"},
    {Flag::kMinReplicas, "2"},
    {Flag::kMaxReplicas, "3"},
    {Flag::kReplicaIncrementStep, "2"},
    {Flag::kReplicaDiscreteValues, "1"},
    {Flag::kGracefulShutdownTimeout, "5"},
    {Flag::kScalingTimeout, "1.5"},
    {Flag::kFaultyScaleDownTimeout, "7"},
    {Flag::kMinStablePeriod, "3"},
    {Flag::kMaxStablePeriod, "900"},
};

// Flags under test ride on a c10d job with a fixed id, so that nothing random
// or derived hides a difference. (--node-rank and --master-* are accepted
// there, with notes, which still change the output.)
const Args kBase = {"--rdzv-backend", "c10d", "--rdzv-id", "job"};

Args with(Args args, const Args& more) {
  args.insert(args.end(), more.begin(), more.end());
  args.push_back("train.py");
  return args;
}

}  // namespace

TEST_CASE("the flag table holds every torchrun 2.15 flag, hyperpodrun's extras and ours", "[cli]") {
  const std::set<std::string> expected = {"help",
                                          "nnodes",
                                          "nproc_per_node",
                                          "rdzv_backend",
                                          "rdzv_endpoint",
                                          "rdzv_id",
                                          "rdzv_conf",
                                          "standalone",
                                          "max_restarts",
                                          "monitor_interval",
                                          "start_method",
                                          "event_log_handler",
                                          "role",
                                          "module",
                                          "no_python",
                                          "run_path",
                                          "log_dir",
                                          "redirects",
                                          "tee",
                                          "log_line_prefix_template",
                                          "local_ranks_filter",
                                          "duplicate_stdout_filters",
                                          "duplicate_stderr_filters",
                                          "node_rank",
                                          "master_addr",
                                          "master_port",
                                          "local_addr",
                                          "logs_specs",
                                          "numa_binding",
                                          "signals_to_handle",
                                          "shutdown_timeout",
                                          "virtual_local_rank",
                                          "print_completion",
                                          "shutdown_signal",
                                          "pre_train_script",
                                          "pre_train_args",
                                          "post_train_script",
                                          "post_train_args",
                                          "server_host",
                                          "server_port",
                                          "inprocess_restart",
                                          "min_replicas",
                                          "max_replicas",
                                          "replica_increment_step",
                                          "replica_discrete_values",
                                          "graceful_shutdown_timeout",
                                          "scaling_timeout",
                                          "faulty_scale_down_timeout",
                                          "min_stable_period",
                                          "max_stable_period",
                                          "config",
                                          "warm_start",
                                          "warm_start_imports",
                                          "event_log",
                                          "metrics_port",
                                          "spot_notice_url",
                                          "spot_notice_interval",
                                          "host_discovery_script",
                                          "host_discovery_interval",
                                          "memory_tier_limit",
                                          "memory_replicas",
                                          "memory_replication_rate",
                                          "data_cache_limit",
                                          "hang_timeout",
                                          "startup_timeout",
                                          "non_finite_loss",
                                          "exclude_after",
                                          "exclude_window",
                                          "exclude_cooldown",
                                          "straggler_factor",
                                          "straggler_points",
                                          "gpu_health"};
  std::set<std::string> dests;
  for (const auto& f : flag_table()) dests.insert(f.dest());
  CHECK(dests == expected);
}

TEST_CASE("every flag's row converts its text, but those decided with other flags", "[cli]") {
  // The elastic group depends on --nnodes and --config (elastic_parse.cpp);
  // --help and --print-completion end the parse as they are read.
  const std::set<std::string> without = {"help",
                                         "print_completion",
                                         "min_replicas",
                                         "max_replicas",
                                         "replica_increment_step",
                                         "replica_discrete_values",
                                         "graceful_shutdown_timeout",
                                         "scaling_timeout",
                                         "faulty_scale_down_timeout",
                                         "min_stable_period",
                                         "max_stable_period",
                                         "config"};
  std::set<std::string> unconverted;
  for (const auto& f : flag_table()) {
    if (!f.convert) unconverted.insert(f.dest());
  }
  CHECK(unconverted == without);
}

TEST_CASE("with no flags every value is torchrun's default", "[cli]") {
  const auto c = parse({"train.py"});
  CHECK(c.nnodes_min == 1);
  CHECK(c.nnodes_max == 1);
  CHECK(c.nproc_per_node == 1);
  // run(): a single-node static job without --master-port becomes c10d on a free port.
  CHECK(c.rdzv_backend == "c10d");
  CHECK(c.rdzv_endpoint == "localhost:0");
  CHECK(is_uuid4(c.rdzv_id));
  CHECK(c.rdzv_conf.empty());
  CHECK_FALSE(c.standalone);
  CHECK(c.max_restarts == 0);
  CHECK(c.monitor_interval == 0.1);
  CHECK(c.start_method == "spawn");
  CHECK(c.event_log_handler == "null");
  CHECK(c.role == "default");
  CHECK_FALSE(c.module);
  CHECK_FALSE(c.no_python);
  CHECK_FALSE(c.run_path);
  CHECK_FALSE(c.log_dir);
  CHECK(c.redirects == StdStreams{});
  CHECK(c.tee == StdStreams{});
  CHECK_FALSE(c.log_line_prefix_template);
  CHECK_FALSE(c.local_ranks_filter);
  CHECK(c.duplicate_stdout_filters.empty());
  CHECK(c.duplicate_stderr_filters.empty());
  CHECK(c.node_rank == 0);
  CHECK(c.master_addr == "127.0.0.1");
  CHECK(c.master_port == 29500);
  CHECK_FALSE(c.local_addr);
  CHECK_FALSE(c.logs_specs);
  CHECK_FALSE(c.numa_binding);
  CHECK(c.signals_to_handle == std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT});
  CHECK(c.shutdown_timeout == 30);
  CHECK_FALSE(c.virtual_local_rank);
  CHECK(c.shutdown_signal == SIGTERM);
  CHECK_FALSE(c.pre_train_script);
  CHECK_FALSE(c.post_train_script);
  CHECK(c.server_host == "127.0.0.1");
  CHECK_FALSE(c.serve_port);
  CHECK(c.server_port == 8080);
  CHECK(c.training_script == "train.py");
  CHECK(c.training_script_args.empty());
  CHECK(c.notes.empty());
}

TEST_CASE("each run without a fixed id gets a different random id", "[cli]") {
  CHECK(parse({"train.py"}).rdzv_id != parse({"train.py"}).rdzv_id);
}

TEST_CASE("every flag works in dash and underscore spelling, with a space or '='", "[cli]") {
  const std::string baseline = dump(parse(with(kBase, {})));
  for (const auto& spec : flag_table()) {
    if (spec.id == Flag::kHelp || spec.id == Flag::kPrintCompletion) continue;
    // --config needs a file; cli_elastic_test.cpp tries its spellings.
    if (spec.id == Flag::kConfig) continue;
    std::vector<Args> forms;
    for (const auto& name : spec.spellings()) {
      if (!spec.takes_value) {
        forms.push_back({name});
        continue;
      }
      forms.push_back({name, kSample.at(spec.id)});
      if (name.starts_with("--")) forms.push_back({name + "=" + kSample.at(spec.id)});
    }
    std::string first;
    for (const auto& form : forms) {
      INFO(form.front());
      const auto out = dump(parse(with(kBase, form)));
      CHECK(out != baseline);
      if (first.empty()) first = out;
      CHECK(out == first);
    }
  }
}

TEST_CASE("a flag that is not given is read from PET_<NAME>, and the command line wins", "[cli]") {
  // Notes name the origin (PET_ROLE or --role), so they are left out here.
  const auto without_notes = [](LaunchConfig c) {
    c.notes.clear();
    return dump(c);
  };
  for (const auto& spec : flag_table()) {
    if (!spec.env_fallback) continue;
    INFO(spec.env_name());
    const std::string value = spec.takes_value ? kSample.at(spec.id) : "1";
    const Args flag = spec.takes_value ? Args{std::string(spec.long_name), value}
                                       : Args{std::string(spec.long_name)};
    CHECK(without_notes(parse({"train.py"}, {{spec.env_name(), value}})) ==
          without_notes(parse(with({}, flag))));
  }
  const auto c = parse({"--max-restarts", "5", "train.py"},
                       {{"PET_MAX_RESTARTS", "2"}, {"PET_NPROC_PER_NODE", "3"}});
  CHECK(c.max_restarts == 5);
  CHECK(c.nproc_per_node == 3);
}

TEST_CASE("a PET_ switch is an integer: 0 is off, other numbers on, text is an error", "[cli]") {
  CHECK_FALSE(parse({"train.py"}, {{"PET_STANDALONE", "0"}}).standalone);
  CHECK(parse({"train.py"}, {{"PET_STANDALONE", "2"}}).standalone);
  CHECK(parse({"--module", "train"}, {{"PET_MODULE", "0"}}).module);
  REQUIRE_THROWS_WITH(parse({"train.py"}, {{"PET_NO_PYTHON", "yes"}}),
                      Contains("PET_NO_PYTHON") && Contains("yes"));
}

TEST_CASE("--logs-specs and --numa-binding have no PET_ fallback, as in torchrun", "[cli]") {
  const auto c = parse({"train.py"}, {{"PET_LOGS_SPECS", "x"}, {"PET_NUMA_BINDING", "node"}});
  CHECK_FALSE(c.logs_specs);
  CHECK_FALSE(c.numa_binding);
}

TEST_CASE("--numa-binding takes torchrun's four modes and is applied, not noted", "[cli]") {
  for (const char* mode : {"node", "socket", "exclusive", "core-complex"}) {
    INFO(mode);
    const auto c = parse({"--numa-binding", mode, "t.py"});
    CHECK(c.numa_binding == mode);
    CHECK(c.notes.empty());
  }
  CHECK(parse({"--numa_binding=socket", "t.py"}).numa_binding == "socket");
}

TEST_CASE("a bad PET_ value is reported under the variable's name, even when empty", "[cli]") {
  REQUIRE_THROWS_WITH(parse({"train.py"}, {{"PET_NNODES", ""}}), Contains("PET_NNODES"));
  REQUIRE_THROWS_WITH(parse({"train.py"}, {{"PET_MASTER_PORT", "http"}}),
                      Contains("PET_MASTER_PORT") && Contains("http"));
}

TEST_CASE("-m, -r and -t are short for --module, --redirects and --tee, clustered too", "[cli]") {
  auto c = parse({"-m", "-r", "3", "-t0:1", "pkg.train"});
  CHECK(c.module);
  CHECK(c.redirects.default_bits == kStdAll);
  CHECK(c.tee.per_rank == std::map<int, int>{{0, kStdOut}});
  c = parse({"-mr2", "pkg.train"});
  CHECK(c.module);
  CHECK(c.redirects.default_bits == kStdErr);
  CHECK(parse({"-r=1", "t.py"}).redirects.default_bits == kStdOut);
  REQUIRE_THROWS_WITH(parse({"-mx", "t.py"}), Contains("-x"));
  REQUIRE_THROWS_WITH(parse({"-q", "t.py"}), Contains("unrecognized") && Contains("-q"));
}

TEST_CASE("a unique prefix of a long flag works; an ambiguous one names the candidates", "[cli]") {
  CHECK(parse({"--nproc", "4", "t.py"}).nproc_per_node == 4);
  CHECK(parse({"--nnode=2", "--master-port", "1", "t.py"}).nnodes_max == 2);
  REQUIRE_THROWS_WITH(parse({"--rdzv", "x", "t.py"}),
                      Contains("ambiguous") && Contains("--rdzv-backend") && Contains("--rdzv-id"));
}

TEST_CASE("a flag given twice takes its last value", "[cli]") {
  CHECK(parse({"--max-restarts", "1", "--max_restarts=2", "t.py"}).max_restarts == 2);
}

TEST_CASE("everything after the script goes to it untouched, flags included", "[cli]") {
  const auto c = parse({"--nproc-per-node", "2", "train.py", "--nproc-per-node", "5", "-m", "x",
                        "--help", "--standalone", "--bogus"});
  CHECK(c.nproc_per_node == 2);
  CHECK_FALSE(c.module);
  CHECK_FALSE(c.standalone);
  CHECK(c.training_script == "train.py");
  CHECK(c.training_script_args ==
        Args{"--nproc-per-node", "5", "-m", "x", "--help", "--standalone", "--bogus"});
  CHECK(parse({"t.py", "--nnodes"}).training_script_args == Args{"--nnodes"});
}

TEST_CASE("'--' ends the flags; one right after the script is dropped, as argparse does", "[cli]") {
  auto c = parse({"--", "-weird.py", "--", "a"});
  CHECK(c.training_script == "-weird.py");
  CHECK(c.training_script_args == Args{"--", "a"});
  c = parse({"train.py", "--", "--lr", "1"});
  CHECK(c.training_script_args == Args{"--lr", "1"});
  c = parse({"train.py", "a", "--", "b"});
  CHECK(c.training_script_args == Args{"a", "--", "b"});
}

TEST_CASE("a value may start with '-' if it is a negative number, has a space, or follows '='",
          "[cli]") {
  CHECK(parse({"--rdzv-id", "-5", "--standalone", "t.py"}).notes.size() == 1);
  CHECK(parse({"--pre-train-script", "p", "--pre-train-args", "-a -b", "t.py"}).pre_train_args ==
        Args{"-a", "-b"});
  CHECK(parse({"--role=-x", "t.py"}).role == "-x");
  REQUIRE_THROWS_WITH(parse({"--role", "-x", "t.py"}), Contains("--role") && Contains("value"));
}

TEST_CASE("--standalone picks c10d on localhost:0 with a random id, noting what it overrides",
          "[cli]") {
  const auto c = parse({"--standalone", "--rdzv-backend", "etcd", "--rdzv_id=abc", "t.py"});
  CHECK(c.standalone);
  CHECK(c.rdzv_backend == "c10d");
  CHECK(c.rdzv_endpoint == "localhost:0");
  CHECK(is_uuid4(c.rdzv_id));
  REQUIRE(c.notes.size() == 1);
  CHECK_THAT(c.notes[0], Contains("--rdzv-backend") && Contains("--rdzv-id"));
  CHECK(parse({"--standalone", "t.py"}).notes.empty());
}

TEST_CASE("a static job derives its endpoint from the master address and port", "[cli]") {
  auto c = parse({"--nnodes", "2", "--node_rank", "1", "--master-addr", "10.0.0.1", "--master-port",
                  "1234", "t.py"});
  CHECK(c.rdzv_backend == "static");
  CHECK(c.rdzv_endpoint == "10.0.0.1:1234");
  CHECK(c.rdzv_id == "none");
  CHECK(c.node_rank == 1);
  c = parse({"--master-port", "29501", "t.py"});  // single node, but a port: stays static
  CHECK(c.rdzv_backend == "static");
  CHECK(c.rdzv_endpoint == "127.0.0.1:29501");
}

TEST_CASE("--nproc-per-node resolves auto, cpu and gpu like torchrun; xpu is refused", "[cli]") {
  CHECK(parse({"--nproc-per-node", "auto", "t.py"}, {}, 12, 4).nproc_per_node == 4);
  CHECK(parse({"--nproc-per-node", "auto", "t.py"}, {}, 12, 0).nproc_per_node == 12);
  CHECK(parse({"--nproc-per-node", "cpu", "t.py"}, {}, 12, 4).nproc_per_node == 12);
  const auto c = parse({"--nproc-per-node", "gpu", "t.py"}, {}, 12, 4);
  CHECK(c.nproc_per_node == 4);
  CHECK(c.nproc_per_node_spec == "gpu");
  REQUIRE_THROWS_WITH(parse({"--nproc-per-node", "gpu", "t.py"}, {}, 12, 0),
                      Contains("--nproc-per-node") && Contains("gpu"));
  REQUIRE_THROWS_WITH(parse({"--nproc-per-node", "xpu", "t.py"}), Contains("xpu"));
  for (const char* bad : {"0", "-1", "many", ""}) {
    INFO(bad);
    REQUIRE_THROWS_WITH(parse({"--nproc-per-node", bad, "t.py"}), Contains("--nproc-per-node"));
  }
}

TEST_CASE("--nnodes takes N or MIN:MAX; static runs MIN<MAX as MIN, with a note", "[cli]") {
  auto c = parse({"--nnodes", "1:4", "--rdzv-backend", "c10d", "t.py"});
  CHECK(c.nnodes_min == 1);
  CHECK(c.nnodes_max == 4);
  CHECK(c.notes.empty());  // c10d: the range is elastic
  c = parse({"--nnodes", "1:4", "--master-port", "29500", "t.py"});
  CHECK(c.rdzv_backend == "static");
  CHECK(c.effective_nnodes() == 1);
  REQUIRE(c.notes.size() == 1);
  CHECK_THAT(c.notes[0], Contains("--nnodes 1:4") && Contains("static rendezvous cannot scale") &&
                             Contains("MIN (1 node)"));
  for (const char* bad : {"3:2", "0", "1:2:3", "two", "", "2:"}) {
    INFO(bad);
    REQUIRE_THROWS_WITH(parse({"--nnodes", bad, "t.py"}), Contains("--nnodes"));
  }
  REQUIRE_THROWS_WITH(parse({"--nnodes", "3:2", "t.py"}), Contains("'3:2'"));
}

TEST_CASE("--tee and --redirects give one setting for all ranks or one per named rank", "[cli]") {
  const auto c = parse({"--tee", "0:3,1:0,12:2", "--redirects", "1", "t.py"});
  CHECK(c.tee.for_rank(0) == kStdAll);
  CHECK(c.tee.for_rank(1) == kStdNone);
  CHECK(c.tee.for_rank(12) == kStdErr);
  CHECK(c.tee.for_rank(5) == kStdNone);  // not named: NONE, as torchrun's to_map
  CHECK(c.redirects.for_rank(7) == kStdOut);
  CHECK(parse({"-t", "0:1,0:2", "t.py"}).tee.for_rank(0) == kStdErr);  // last wins
  for (const char* bad : {"4", "0:4", "a:1", "0:1,", "", " 1", "0=1", ":1"}) {
    INFO(bad);
    REQUIRE_THROWS_WITH(parse({"--tee", bad, "t.py"}), Contains("--tee"));
    REQUIRE_THROWS_WITH(parse({"-r", bad, "t.py"}), Contains("--redirects"));
  }
}

TEST_CASE("--local-ranks-filter takes comma-separated local ranks; empty means all", "[cli]") {
  CHECK(*parse({"--local-ranks-filter", "2, 0", "t.py"}).local_ranks_filter == std::set<int>{0, 2});
  CHECK_FALSE(parse({"--local-ranks-filter=", "t.py"}).local_ranks_filter);
  for (const char* bad : {"a", "-1", "0,,1", "0,"}) {
    INFO(bad);
    REQUIRE_THROWS_WITH(parse({"--local-ranks-filter", bad, "t.py"}),
                        Contains("--local-ranks-filter"));
  }
}

TEST_CASE("--rdzv-conf is key=value pairs, stripped, none of them empty", "[cli]") {
  const auto c = parse({"--rdzv-conf", " timeout=60, join_timeout = 5 ", "t.py"});
  CHECK(c.rdzv_conf ==
        std::map<std::string, std::string>{{"timeout", "60"}, {"join_timeout", "5"}});
  for (const char* bad : {"timeout", "=1", "a=", "a=1,,b=2"}) {
    INFO(bad);
    REQUIRE_THROWS_WITH(parse({"--rdzv-conf", bad, "t.py"}), Contains("--rdzv-conf"));
  }
}

TEST_CASE("signals are named as in Python's signal module or numbered", "[cli]") {
  auto c =
      parse({"--signals-to-handle", "SIGTERM, SIGUSR1,SIGTERM", "--shutdown-signal", "10", "t.py"});
  CHECK(c.signals_to_handle == std::vector<int>{SIGTERM, SIGUSR1});
  CHECK(c.shutdown_signal == SIGUSR1);
  CHECK(parse({"--shutdown-signal", "SIGINT", "t.py"}).shutdown_signal == SIGINT);
  REQUIRE_THROWS_WITH(parse({"--signals-to-handle", "SIGTERM,SIGFOO", "t.py"}),
                      Contains("--signals-to-handle") && Contains("SIGFOO"));
  REQUIRE_THROWS_WITH(parse({"--signals-to-handle", "SIGKILL", "t.py"}), Contains("SIGKILL"));
  REQUIRE_THROWS_WITH(parse({"--shutdown-signal", "TERM", "t.py"}), Contains("--shutdown-signal"));
}

TEST_CASE("ports must lie in 0..65535, and port 0 only where one node is enough", "[cli]") {
  CHECK(parse({"--master-port", "0", "t.py"}).rdzv_endpoint == "127.0.0.1:0");
  for (const Args& bad : std::vector<Args>{{"--master-port", "65536"},
                                           {"--master-port", "-1"},
                                           {"--server-port", "70000"},
                                           {"--nnodes", "2", "--master-port", "0"}}) {
    INFO(bad[0] << " " << bad.back());
    REQUIRE_THROWS_WITH(parse(with({}, bad)), Contains(bad[bad.size() - 2]));
  }
  for (const char* bad : {"host:65536", "host:x", "bad host:1", ":1"}) {
    INFO(bad);
    REQUIRE_THROWS_WITH(parse({"--rdzv-backend", "c10d", "--rdzv-endpoint", bad, "t.py"}),
                        Contains("--rdzv-endpoint"));
  }
  REQUIRE_THROWS_WITH(parse({"--nnodes", "2", "--rdzv-endpoint", "host", "t.py"}),
                      Contains("no port"));
}

TEST_CASE("endpoints parse like torchrun's: IPv6 in brackets, default port when absent", "[cli]") {
  auto hp = parse_endpoint("e", "[::1]:29400", 1);
  CHECK(hp.host == "::1");
  CHECK(hp.port == 29400);
  hp = parse_endpoint("e", "node1", 29400);
  CHECK(hp.host == "node1");
  CHECK(hp.port == 29400);
  CHECK(parse_endpoint("e", "", 29400).host == "localhost");
}

TEST_CASE("backends: static, c10d, etcd, etcd-v2, and elasticrun as c10d", "[cli]") {
  for (const char* b : {"static", "c10d", "etcd", "etcd-v2"}) {
    CHECK(parse({"--nnodes", "2", "--rdzv-backend", b, "--rdzv-endpoint", "h:1", "t.py"})
              .rdzv_backend == b);
  }
  CHECK(parse({"--rdzv-backend", "elasticrun", "t.py"}).rdzv_backend == "c10d");
  REQUIRE_THROWS_WITH(parse({"--rdzv-backend", "zookeeper", "t.py"}),
                      Contains("--rdzv-backend") && Contains("zookeeper"));
}

TEST_CASE("malformed command lines are ConfigErrors that name the problem", "[cli]") {
  REQUIRE_THROWS_WITH(parse({}), Contains("TRAINING_SCRIPT"));
  REQUIRE_THROWS_WITH(parse({"--nnodes", "2"}), Contains("TRAINING_SCRIPT"));
  REQUIRE_THROWS_WITH(parse({"--bogus", "t.py"}), Contains("--bogus"));
  REQUIRE_THROWS_WITH(parse({"--nnodes"}), Contains("--nnodes") && Contains("value"));
  REQUIRE_THROWS_WITH(parse({"--nnodes", "--standalone", "t.py"}), Contains("--nnodes"));
  REQUIRE_THROWS_WITH(parse({"--standalone=1", "t.py"}), Contains("--standalone"));
  REQUIRE_THROWS_WITH(parse({"--max-restarts", "-1", "t.py"}), Contains("--max-restarts"));
  REQUIRE_THROWS_WITH(parse({"--max-restarts", "0x1", "t.py"}), Contains("--max-restarts"));
  REQUIRE_THROWS_WITH(parse({"--monitor-interval", "nan", "t.py"}), Contains("--monitor-interval"));
  REQUIRE_THROWS_WITH(parse({"--shutdown-timeout", "-1", "t.py"}), Contains("--shutdown-timeout"));
  REQUIRE_THROWS_WITH(parse({"--start-method", "thread", "t.py"}), Contains("--start-method"));
  REQUIRE_THROWS_WITH(parse({"--numa-binding", "all", "t.py"}), Contains("--numa-binding"));
  REQUIRE_THROWS_WITH(parse({"-m", "--no-python", "t.py"}),
                      Contains("--module") && Contains("--no-python"));
  REQUIRE_THROWS_WITH(parse({"--nnodes", "2", "--node-rank", "2", "t.py"}),
                      Contains("--node-rank"));
  REQUIRE_THROWS_WITH(parse({"--pre-train-args", "'open", "t.py"}), Contains("--pre-train-args"));
}

TEST_CASE("numbers are read like Python's int() and float()", "[cli]") {
  CHECK(parse_int("n", " 12 ") == 12);
  CHECK(parse_int("n", "+5") == 5);
  CHECK(parse_int("n", "1_000") == 1000);
  CHECK(parse_double("n", "1e-1") == 0.1);
  CHECK(parse_double("n", ".5") == 0.5);
  for (const char* bad : {"", "0x10", "1__0", "_1", "1_", "1.5", "99999999999"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_int("n", bad), ConfigError);
  }
  for (const char* bad : {"inf", "nan", "0x1p3", "1..2", "e5"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_double("n", bad), ConfigError);
  }
}

TEST_CASE("flags that do not apply are accepted with a one-line note each", "[cli]") {
  const auto c =
      parse({"--start-method", "fork", "--logs-specs", "x", "--server-host", "h", "t.py"});
  REQUIRE(c.notes.size() == 3);
  CHECK_THAT(c.notes[0], Contains("--start-method") && Contains("fork"));
  CHECK_THAT(c.notes[2], Contains("--server-host") && Contains("no server without"));
  const auto r = parse({"--run-path", "--no-python", "-m", "t.py"});
  CHECK_FALSE(r.no_python);
  CHECK_FALSE(r.module);
  CHECK(r.notes.size() == 2);  // --no-python and -m give way to --run-path
  CHECK(parse({"--node-rank", "1", "--rdzv-backend", "c10d", "t.py"}).notes.size() == 1);
}

TEST_CASE("--event-log-handler takes torchrun's handler names; console writes the events",
          "[cli]") {
  CHECK(parse({"--event-log-handler", "console", "t.py"}).event_log_handler == "console");
  CHECK(parse({"--event-log-handler", "dynamic_rendezvous", "t.py"}).notes.empty());
  CHECK(parse({"--event-log", "e.jsonl", "t.py"}).event_log == "e.jsonl");
  REQUIRE_THROWS_WITH(parse({"--event-log-handler", "file", "t.py"}),
                      Contains("--event-log-handler") && Contains("console"));
}

TEST_CASE("--server-port or --metrics-port starts the agent's one HTTP server, on loopback",
          "[cli]") {
  CHECK_FALSE(parse({"t.py"}).serve_port);
  auto c = parse({"--server-port", "0", "t.py"});
  CHECK(c.serve_port == 0);
  CHECK(c.server_host == "127.0.0.1");
  c = parse({"--metrics-port", "9400", "--server-host", "0.0.0.0", "t.py"});
  CHECK(c.serve_port == 9400);
  CHECK(c.server_host == "0.0.0.0");
  CHECK(parse({"--metrics-port", "9400", "--server-port", "9400", "t.py"}).serve_port == 9400);
  REQUIRE_THROWS_WITH(
      parse({"--metrics-port", "9400", "--server-port", "8080", "t.py"}),
      Contains("--metrics-port 9400") && Contains("--server-port 8080") && Contains("disagree"));
  REQUIRE_THROWS_WITH(parse({"--metrics-port", "70000", "t.py"}), Contains("--metrics-port"));
}

TEST_CASE("shutdown timeout and line prefix fall back to torchrun's variables", "[cli]") {
  const Env env = {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "12"},
                   {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "${rank}>"}};
  auto c = parse({"t.py"}, env);
  CHECK(c.shutdown_timeout == 12);
  CHECK(c.log_line_prefix_template == "${rank}>");
  c = parse({"--shutdown-timeout", "3", "--log-line-prefix-template", "x", "t.py"}, env);
  CHECK(c.shutdown_timeout == 3);
  CHECK(c.log_line_prefix_template == "x");
}

TEST_CASE(
    "hyperpodrun's --inprocess-restart is taken from the flag or PET_; a fixed job notes "
    "that it ignores it",
    "[cli]") {
  auto has_note = [](const LaunchConfig& c) {
    for (const auto& n : c.notes) {
      if (n.find("--inprocess-restart") != std::string::npos) return true;
    }
    return false;
  };
  LaunchConfig plain = parse({"train.py"});
  CHECK_FALSE(plain.inprocess_restart);
  CHECK_FALSE(has_note(plain));
  LaunchConfig flagged = parse({"--inprocess-restart", "train.py"});
  CHECK(flagged.inprocess_restart);
  CHECK(has_note(flagged));
  CHECK(flagged.training_script == "train.py");
  LaunchConfig elastic = parse({"--inprocess-restart", "--nnodes", "1:3", "--rdzv-backend", "c10d",
                                "--rdzv-endpoint", "127.0.0.1:29400", "train.py"});
  CHECK(elastic.inprocess_restart);
  CHECK_FALSE(has_note(elastic));
  LaunchConfig from_env = parse({"train.py"}, {{"PET_INPROCESS_RESTART", "1"}});
  CHECK(from_env.inprocess_restart);
}

TEST_CASE("hyperpodrun's pre/post-train args split like a shell; filters keep ',,'", "[cli]") {
  const auto c = parse({"--pre-train-script", "pre.sh", "--pre-train-args", "a 'b c' d\\ e \"f\"",
                        "--duplicate-stdout-filters", "a,,b,c", "t.py"});
  CHECK(c.pre_train_script == "pre.sh");
  CHECK(c.pre_train_args == Args{"a", "b c", "d e", "f"});
  CHECK(c.duplicate_stdout_filters == Args{"a,b", "c"});
}

TEST_CASE("-h and --help before the script ask for the complete, grouped help", "[cli]") {
  for (const Args& args : std::vector<Args>{{"-h"}, {"--help", "t.py"}, {"-mh"}, {"--he"}}) {
    try {
      parse(args);
      FAIL("no HelpRequested for " << args[0]);
    } catch (const HelpRequested& help) {
      CHECK_THAT(help.text, Contains("torchrun-compatible:") && Contains("HyperPod-compatible"));
      for (const auto& f : flag_table()) CHECK_THAT(help.text, Contains(std::string(f.long_name)));
      CHECK_THAT(help.text, Contains("--metrics-port PORT"));
    }
  }
  CHECK(parse({"t.py", "--help"}).training_script_args == Args{"--help"});
}

TEST_CASE("--print-completion prints a script for bash, zsh and tcsh only", "[cli]") {
  for (const char* shell : {"bash", "zsh", "tcsh"}) {
    INFO(shell);
    CHECK_THROWS_AS(parse({"--print-completion", shell}), HelpRequested);
  }
  REQUIRE_THROWS_WITH(parse({"--print-completion", "fish"}), Contains("fish"));
}

TEST_CASE("to_json writes every field and survives bytes that are not UTF-8", "[cli]") {
  const auto json = to_json(parse({"--role", "\xff", "t.py", "a"}));
  CHECK_THAT(json, Contains("\"training_script_args\":[\"a\"]"));
  CHECK_THAT(json, Contains("\"signals_to_handle\":[15,2,1,3]"));
}

TEST_CASE("--gpu-health is auto unless turned off, and takes nothing else", "[cli]") {
  CHECK(parse({"train.py"}).health.gpu == HealthOptions::Gpu::kAuto);
  CHECK(parse({"--gpu-health", "off", "train.py"}).health.gpu == HealthOptions::Gpu::kOff);
  CHECK(parse({"--gpu-health=auto", "train.py"}).health.gpu == HealthOptions::Gpu::kAuto);
  REQUIRE_THROWS_WITH(parse({"--gpu-health", "on", "train.py"}),
                      Contains("--gpu-health") && Contains("expected one of auto, off"));
  CHECK(parse({"--gpu-health", "false", "train.py"}).health.gpu == HealthOptions::Gpu::kOff);
  CHECK_THAT(to_json(parse({"--gpu-health", "off", "train.py"})),
             Contains("\"gpu_health\":\"off\""));
}
