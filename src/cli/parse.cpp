#include "cli/parse.hpp"

#include <array>
#include <optional>
#include <random>
#include <string_view>

#include "cli/elastic_parse.hpp"
#include "cli/flag_text.hpp"
#include "cli/flags.hpp"
#include "cli/job_config.hpp"
#include "cli/scheduler_env.hpp"
#include "cli/tokenize.hpp"
#include "elasticrun/errors.hpp"
#include "util/host_name.hpp"
#include "util/strings.hpp"

namespace elasticrun::cli {

namespace {

using Given = FlagValues;

[[noreturn]] void fail(const std::string& message) {
  throw ConfigError(message);
}

std::string random_run_id() {
  std::random_device rd;
  std::array<unsigned char, 16> b{};
  for (auto& byte : b) byte = static_cast<unsigned char>(rd());
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);  // version 4, like uuid.uuid4()
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < b.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += kHex[b[i] >> 4];
    out += kHex[b[i] & 0xf];
  }
  return out;
}

int resolve_nproc(const Raw& raw, int cpu_count, int gpu_count) {
  const std::string& spec = raw.text;
  int n = 0;
  if (spec == "cpu") {
    n = cpu_count;
  } else if (spec == "gpu") {
    if (gpu_count <= 0) fail(raw.origin + " 'gpu': no CUDA GPU is visible to this process");
    n = gpu_count;
  } else if (spec == "auto") {
    n = gpu_count > 0 ? gpu_count : cpu_count;
  } else if (spec == "xpu") {
    fail(raw.origin + " 'xpu': elasticrun does not support Intel XPUs");
  } else {
    try {
      n = parse_int(raw.origin, spec);
    } catch (const ConfigError&) {
      fail(raw.origin + " " + util::quote(spec) + ": expected a number, auto, cpu or gpu");
    }
  }
  if (n < 1) fail(raw.origin + " " + util::quote(spec) + ": must be at least 1 worker");
  return n;
}

const std::optional<Raw>& given(const Given& g, Flag id) {
  return g[static_cast<size_t>(id)];
}

std::string origin(const Given& g, Flag id) {
  const auto& raw = given(g, id);
  return raw ? raw->origin : std::string(flag_spec(id).long_name);
}

// torchrun's run(): --standalone, or a single-node static job that names no
// master port, gets a private c10d rendezvous on a free port.
void derive_rendezvous(LaunchConfig& c, const Given& g) {
  if (c.standalone) {
    std::string ignored;
    for (Flag id : {Flag::kRdzvBackend, Flag::kRdzvEndpoint, Flag::kRdzvId}) {
      if (given(g, id)) ignored += (ignored.empty() ? "" : ", ") + origin(g, id);
    }
    if (!ignored.empty()) {
      c.notes.push_back("--standalone: ignoring " + ignored +
                        "; a standalone job hosts c10d on localhost:0 with a random id");
    }
    c.rdzv_backend = "c10d";
    c.rdzv_endpoint = "localhost:0";
    c.rdzv_id = random_run_id();
  } else if (c.rdzv_backend == "static" && c.rdzv_endpoint.empty() &&
             !given(g, Flag::kMasterPort) && c.nnodes_max == 1) {
    if (given(g, Flag::kRdzvId)) {
      c.notes.push_back(origin(g, Flag::kRdzvId) + " " + util::quote(c.rdzv_id) +
                        ": ignored; a single-node static job without --master-port runs c10d "
                        "on a free port with a random id, as torchrun does");
    }
    c.rdzv_backend = "c10d";
    c.rdzv_endpoint = "localhost:0";
    c.rdzv_id = random_run_id();
  }
  if (c.rdzv_backend == "elasticrun") c.rdzv_backend = "c10d";
  const std::string& b = c.rdzv_backend;
  if (b != "static" && b != "c10d" && b != "etcd" && b != "etcd-v2") {
    fail(origin(g, Flag::kRdzvBackend) + " " + util::quote(b) +
         ": unknown rendezvous backend; expected static, c10d, etcd, etcd-v2 or elasticrun");
  }
  if (b == "static") {
    if (c.node_rank >= c.nnodes_max) {
      fail(origin(g, Flag::kNodeRank) + " " + std::to_string(c.node_rank) +
           ": out of range for --nnodes " + c.nnodes_spec + " (static node ranks are 0 to " +
           std::to_string(c.nnodes_max - 1) + ")");
    }
    if (c.rdzv_endpoint.empty()) {
      if (c.master_port == 0 && c.nnodes_max > 1) {
        fail(origin(g, Flag::kMasterPort) +
             " 0: the other nodes cannot find a port picked at random; give a fixed port");
      }
      c.rdzv_endpoint = c.master_addr + ":" + std::to_string(c.master_port);
      parse_endpoint("--master-addr/--master-port", c.rdzv_endpoint, -1);
    } else {
      parse_endpoint(origin(g, Flag::kRdzvEndpoint), c.rdzv_endpoint, -1);
    }
    return;
  }
  if (b == "c10d") {
    parse_endpoint(origin(g, Flag::kRdzvEndpoint), c.rdzv_endpoint, 29400);
  } else {
    parse_etcd_endpoints(origin(g, Flag::kRdzvEndpoint), c.rdzv_endpoint);
  }
  if (c.node_rank != 0) {
    c.notes.push_back(origin(g, Flag::kNodeRank) + " " + std::to_string(c.node_rank) +
                      ": ignored; only the static backend uses it");
  }
  for (Flag id : {Flag::kMasterAddr, Flag::kMasterPort}) {
    if (given(g, id)) {
      c.notes.push_back(origin(g, id) + ": ignored; only the static backend uses it");
    }
  }
}

// How the worker command is built (config_from_args): normalised so the agent
// need not know torchrun's precedence (run-path over no-python and module).
void derive_command(LaunchConfig& c, const Given& g) {
  if (c.run_path) {
    for (Flag id : {Flag::kModule, Flag::kNoPython}) {
      if (given(g, id) && parse_switch(*given(g, id))) {
        c.notes.push_back(origin(g, id) + ": ignored; --run-path takes precedence");
      }
    }
    c.module = false;
    c.no_python = false;
  } else if (c.module && c.no_python) {
    fail(origin(g, Flag::kModule) + " and " + origin(g, Flag::kNoPython) +
         " exclude each other: without python there is nothing to run a module with");
  }
}

void derive_notes(LaunchConfig& c, const Given& g) {
  const auto note = [&](Flag id, const std::string& why) {
    c.notes.push_back(origin(g, id) + " " + util::quote(given(g, id)->text) + ": " + why);
  };
  // With c10d a range is elastic; static rendezvous fixes the world at its start.
  if (c.rdzv_backend == "static" && c.nnodes_min < c.nnodes_max) {
    const std::string range = given(g, Flag::kNnodes)
                                  ? origin(g, Flag::kNnodes) + " " + c.nnodes_spec
                                  : "replicas " + c.nnodes_spec;
    c.notes.push_back(range + ": the static rendezvous cannot scale; runs with MIN (" +
                      std::to_string(c.nnodes_min) + (c.nnodes_min == 1 ? " node" : " nodes") +
                      "); use --rdzv-backend c10d for an elastic job");
  }
  if (given(g, Flag::kStartMethod)) {
    note(Flag::kStartMethod, "ignored; elasticrun always starts workers with fork and exec");
  }
  if (c.logs_specs) {
    note(Flag::kLogsSpecs,
         "ignored; LogsSpecs plugins are Python entry points, elasticrun keeps torchrun's "
         "default log layout");
  }
  // One HTTP server per agent serves the metrics and the API.
  if (given(g, Flag::kServerPort)) {
    if (c.metrics_port && *c.metrics_port != c.server_port) {
      throw ConfigError(origin(g, Flag::kMetricsPort) + " " + std::to_string(*c.metrics_port) +
                        " and " + origin(g, Flag::kServerPort) + " " +
                        std::to_string(c.server_port) +
                        " disagree: one server serves the metrics and the API");
    }
    c.serve_port = c.server_port;
  } else if (c.metrics_port) {
    c.serve_port = c.metrics_port;
  } else if (given(g, Flag::kServerHost)) {
    note(Flag::kServerHost, "no server without --server-port or --metrics-port");
  }
  if (c.inprocess_restart && !(c.rdzv_backend != "static" && c.nnodes_max > 1)) {
    note(Flag::kInprocessRestart,
         "ignored in a fixed job (standalone, static): it re-forms workers across the rounds "
         "of an elastic one (--rdzv-backend c10d)");
  }
  if (c.warm_start && c.no_python) {
    note(Flag::kWarmStart, "ignored with --no-python: the workers are not Python scripts");
  }
  if (!c.warm_start && given(g, Flag::kWarmStartImports)) {
    note(Flag::kWarmStartImports, "ignored without --warm-start");
  }
  if (!c.pre_train_script && given(g, Flag::kPreTrainArgs)) {
    note(Flag::kPreTrainArgs, "ignored without --pre-train-script");
  }
  if (!c.post_train_script && given(g, Flag::kPostTrainArgs)) {
    note(Flag::kPostTrainArgs, "ignored without --post-train-script");
  }
}

void derive(LaunchConfig& c, const Given& g, const std::map<std::string, std::string>& env,
            int cpu_count, int gpu_count) {
  derive_rendezvous(c, g);
  derive_command(c, g);
  c.nproc_per_node = resolve_nproc(
      given(g, Flag::kNprocPerNode).value_or(Raw{c.nproc_per_node_spec, "--nproc-per-node"}),
      cpu_count, gpu_count);
  // torchrun's LaunchConfig.__post_init__ and config_from_args read these two.
  constexpr const char* kShutdownEnv = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT";
  if (const auto it = env.find(kShutdownEnv);
      !given(g, Flag::kShutdownTimeout) && it != env.end()) {
    c.shutdown_timeout = parse_int(kShutdownEnv, it->second);
    if (c.shutdown_timeout < 0) fail(std::string(kShutdownEnv) + ": must not be negative");
  }
  const auto prefix = env.find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");
  if (!c.log_line_prefix_template && prefix != env.end() && !prefix->second.empty()) {
    c.log_line_prefix_template = prefix->second;
  }
  derive_notes(c, g);
}

// What the scheduler's environment says goes where nothing else did; the
// minimum and maximum replicas (a flag's or the config's) keep the range.
// Returns the notes to print: what was read, once.
std::vector<std::string> apply_scheduler(FlagValues& g, const JobConfig& file,
                                         const SchedulerGuess& guess) {
  std::vector<std::string> notes = guess.notes;
  const bool range_given = given(g, Flag::kMinReplicas) || given(g, Flag::kMaxReplicas) ||
                           file.min_replicas || file.max_replicas;
  std::string applied;
  for (const auto& [id, raw] : guess.values) {
    auto& slot = g[static_cast<size_t>(id)];
    const auto key = flag_spec(id).config_key;
    if (slot || (id == Flag::kNnodes && range_given) ||
        (!key.empty() && file.flag_settings.count(std::string(key)))) {
      continue;
    }
    slot = raw;
    applied += (applied.empty() ? "" : ", ") + std::string(flag_spec(id).long_name) + " " +
               raw.text + " (" + raw.origin + ")";
  }
  if (!guess.endpoint_missing.empty() && !given(g, Flag::kRdzvEndpoint)) {
    throw ConfigError(guess.endpoint_missing);
  }
  if (!applied.empty()) notes.push_back(guess.source + ": " + applied);
  return notes;
}

}  // namespace

LaunchConfig parse_launch_args(const std::vector<std::string>& args,
                               const std::map<std::string, std::string>& env, int cpu_count,
                               int gpu_count) {
  Tokens tokens = tokenize(args);
  if (!tokens.script) fail("missing TRAINING_SCRIPT (the program each worker runs)");
  for (const auto& spec : flag_table()) {
    auto& slot = tokens.given[static_cast<size_t>(spec.id)];
    if (slot || !spec.env_fallback) continue;
    // As torchrun's `env` action: a variable that is set counts, even when empty.
    if (const auto it = env.find(spec.env_name()); it != env.end()) {
      slot = Raw{it->second, spec.env_name()};
    }
  }
  // The job config, read once: its flag settings (FlagSpec::config_key) go
  // where a flag was not given, converted as the flag's text would be.
  JobConfig file;
  if (const auto& r = tokens.given[static_cast<size_t>(Flag::kConfig)]) {
    file = load_job_config(r->text);
  }
  const std::vector<std::string> scheduler_notes =
      apply_scheduler(tokens.given, file, guess_from_scheduler(env, tokens.given, util::fqdn));
  FlagValues settings = tokens.given;
  for (const auto& spec : flag_table()) {
    auto& slot = settings[static_cast<size_t>(spec.id)];
    if (slot || spec.config_key.empty()) continue;
    if (auto it = file.flag_settings.find(std::string(spec.config_key));
        it != file.flag_settings.end()) {
      slot = Raw{it->second.value, it->second.origin};
    }
  }
  LaunchConfig c;
  for (const auto& spec : flag_table()) {
    const auto& raw = settings[static_cast<size_t>(spec.id)];
    if (raw && spec.convert) spec.convert(c, *raw);
  }
  // Before derive(): the range decides whether a static job is single-node.
  parse_elastic(c, tokens.given, std::move(file));
  c.notes.insert(c.notes.begin(), scheduler_notes.begin(), scheduler_notes.end());
  c.training_script = std::move(*tokens.script);
  c.training_script_args = std::move(tokens.script_args);
  derive(c, tokens.given, env, cpu_count, gpu_count);
  return c;
}

std::string usage() {
  return "usage: elasticrun [options] TRAINING_SCRIPT [SCRIPT_ARGS ...]\n"
         "Run 'elasticrun --help' for the options.\n";
}

}  // namespace elasticrun::cli
