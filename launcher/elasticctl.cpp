// elasticctl: everything that is not launching. `elasticctl store`, a
// standalone TCPStore-compatible store server; `scale`, `release` and
// `status`, which talk to a running job through its rendezvous store
// (docs/elasticctl.md); `simulate`, the capacity simulator (docs/simulator.md).
#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "ctl/ctl_requests.hpp"
#include "ctl/job_connection.hpp"
#include "ctl/job_status.hpp"
#include "ctl/readmit.hpp"
#include "ctl/watch.hpp"
#include "elasticrun/errors.hpp"
#include "sim/controller.hpp"
#include "sim/report.hpp"
#include "sim/simulator.hpp"
#include "sim/trace.hpp"
#include "store/server.hpp"
#include "timeline/timeline.hpp"
#include "util/logging.hpp"

namespace {

using namespace elasticrun;

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

int run_store(const store::ServerOptions& options) {
  store::Server server(options);
  server.bind();
  // Handlers first: whoever reads the line below may signal us at once.
  server.stop_on_signals({SIGINT, SIGTERM});
  // Scripts (and our tests) read the chosen port from this line.
  std::printf("elasticctl store: listening on %s:%u\n", server.host().c_str(), server.port());
  std::fflush(stdout);
  server.run();
  return kExitOk;
}

// What scale, release and status share: which job, and how long to wait.
struct JobOptions {
  std::string endpoint;
  std::string run_id;
  double connect_timeout_s = 5;
  // Also bounds every store call.
  double timeout_s = 60;
};

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// CLI11's PositiveNumber prints the whole range of a double when it fails.
const CLI::Validator kAtLeastOne(
    [](const std::string& text) -> std::string {
      try {
        if (std::stoll(text) >= 1) return {};
      } catch (const std::exception&) {
      }
      return "must be an integer of at least 1, not '" + text + "'";
    },
    "N>=1");
const CLI::Validator kPositiveSeconds(
    [](const std::string& text) -> std::string {
      try {
        if (std::stod(text) > 0) return {};
      } catch (const std::exception&) {
      }
      return "must be a number of seconds above 0, not '" + text + "'";
    },
    "SECONDS>0");

void add_job_options(CLI::App* cmd, JobOptions& o, bool waits) {
  // Checked at parse time, so that a bad endpoint exits 2 with the usage.
  auto endpoint_check = [](const std::string& text) -> std::string {
    try {
      ctl::parse_job_address("endpoint", text, "job");
      return {};
    } catch (const ConfigError& e) {
      return e.what();
    }
  };
  cmd->add_option("--rdzv-endpoint,--rdzv_endpoint", o.endpoint,
                  "The job's rendezvous store, HOST[:PORT] (port 29400 when omitted)")
      ->required()
      ->check(CLI::Validator(endpoint_check, "HOST[:PORT]", "endpoint"));
  cmd->add_option("--rdzv-id,--rdzv_id", o.run_id, "The job's --rdzv-id")->required();
  cmd->add_option("--connect-timeout", o.connect_timeout_s,
                  "Seconds to keep trying to reach the store")
      ->capture_default_str()
      ->check(kPositiveSeconds);
  cmd->add_option("--timeout", o.timeout_s,
                  waits ? "Seconds to wait for the leader to handle the request"
                        : "Seconds any one store operation may take")
      ->capture_default_str()
      ->check(kPositiveSeconds);
}

StoreClient connect(const JobOptions& o, ctl::JobAddress& job) {
  job = ctl::parse_job_address("--rdzv-endpoint", o.endpoint, o.run_id);
  return ctl::connect_job(job, millis(o.connect_timeout_s), millis(o.timeout_s));
}

int run_request(const JobOptions& o, const ctl::Request& r, bool wait) {
  ctl::JobAddress job;
  StoreClient client = connect(o, job);
  const ctl::Ticket ticket = ctl::submit(client, r);
  if (!wait) {
    std::printf(
        "elasticctl: request #%lld (%s) sent to job '%s'; its leader acts on it while a "
        "round runs\n",
        static_cast<long long>(ticket.seq), ctl::describe(r).c_str(), job.run_id.c_str());
    return kExitOk;
  }
  ctl::wait_handled(client, ticket, millis(o.timeout_s));
  std::printf("elasticctl: %s\n", ctl::outcome(client, r, ticket).c_str());
  return kExitOk;
}

int run_readmit(const JobOptions& o, const std::string& host) {
  ctl::JobAddress job;
  StoreClient client = connect(o, job);
  std::printf("elasticctl: %s\n", ctl::readmit(client, host).c_str());
  return kExitOk;
}

int run_status(const JobOptions& o, bool json) {
  ctl::JobAddress job;
  StoreClient client = connect(o, job);
  const ctl::JobStatus s = ctl::read_status(client, job);
  const std::string text =
      json ? ctl::format_json(s) : ctl::format_table(s, std::chrono::system_clock::now());
  std::fwrite(text.data(), 1, text.size(), stdout);
  return kExitOk;
}

int run_watch(const JobOptions& o, ctl::WatchOptions w) {
  w.job = ctl::parse_job_address("--rdzv-endpoint", o.endpoint, o.run_id);
  w.connect_timeout = millis(o.connect_timeout_s);
  w.call_timeout = millis(o.timeout_s);
  return ctl::run_watch(w);
}

struct SimulateOptions {
  std::string trace;
  std::string json_out;
  std::vector<std::string> policies = sim::controller_names();
  std::optional<uint64_t> seed;
};

int run_simulate(const SimulateOptions& o) {
  const sim::Trace trace = sim::load_trace(o.trace);
  const uint64_t seed = o.seed.value_or(trace.seed);
  const auto started = std::chrono::steady_clock::now();
  const std::vector<sim::RunResult> runs = sim::compare(trace, seed, o.policies);
  const auto elapsed = std::chrono::steady_clock::now() - started;
  const std::string table = sim::format_table(trace, seed, runs);
  std::fwrite(table.data(), 1, table.size(), stdout);
  // On stderr: the table and the JSON stay the same from run to run.
  std::fprintf(stderr, "elasticctl simulate: %zu policies in %.3f s\n", runs.size(),
               std::chrono::duration<double>(elapsed).count());
  if (!o.json_out.empty()) {
    std::ofstream out(o.json_out, std::ios::binary | std::ios::trunc);
    out << sim::format_json(trace, seed, runs);
    out.flush();
    if (!out) throw Error("cannot write " + o.json_out);
  }
  return kExitOk;
}

int run_timeline(const timeline::TimelineOptions& o) {
  const timeline::RunHistory h = timeline::write_timeline(o);
  std::printf("elasticctl timeline: %s: %lld events over %.1f s", o.out.c_str(),
              static_cast<long long>(h.events), h.end_s);
  if (h.skipped > 0)
    std::printf(" (%lld lines that were not events skipped)", static_cast<long long>(h.skipped));
  std::printf("\n");
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"elasticctl: control and support commands for elasticrun jobs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "elasticctl 0.1.0");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(
          CLI::IsMember({"trace", "debug", "info", "warn", "warning", "error", "critical", "off"}));

  store::ServerOptions store_opts;
  // The default of torchrun's --rdzv-endpoint, the store's main use.
  store_opts.port = 29400;
  auto* store_cmd = app.add_subcommand(
      "store",
      "Run a standalone store that agents and PyTorch workers share (c10d TCPStore protocol)");
  store_cmd->add_option("--host", store_opts.host, "Address to listen on")->capture_default_str();
  store_cmd
      ->add_option("--port", store_opts.port,
                   "Port to listen on; 0 picks a free one (the port is printed either way)")
      ->capture_default_str();
  store_cmd->add_option("--max-key-size", store_opts.limits.max_key_size, "Largest key in bytes")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  store_cmd
      ->add_option("--max-value-size", store_opts.limits.max_value_size, "Largest value in bytes")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  store_cmd
      ->add_option("--max-keys-per-request", store_opts.limits.max_keys_per_request,
                   "Most keys one CHECK/WAIT/MULTI_GET/MULTI_SET may name")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  store_cmd
      ->add_option("--max-request-size", store_opts.limits.max_request_size,
                   "Most bytes of keys and values in one request")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  store_cmd
      ->add_option("--max-pending-reply-bytes", store_opts.max_pending_reply_bytes,
                   "Replies queued for a client that does not read them before the store stops "
                   "reading its requests")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  store_cmd
      ->add_option("--max-buffered-bytes", store_opts.max_buffered_bytes,
                   "Most bytes of partial requests buffered across all clients")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);

  JobOptions scale_opts, release_opts, status_opts;
  int scale_nodes = 0, release_nodes = 0;
  bool scale_no_wait = false, release_no_wait = false, status_json = false;
  auto* scale_cmd = app.add_subcommand(
      "scale", "Ask a running job's leader to scale the job to N nodes (within --nnodes MIN:MAX)");
  add_job_options(scale_cmd, scale_opts, true);
  scale_cmd->add_option("--nodes", scale_nodes, "The number of nodes to run at")
      ->required()
      ->check(kAtLeastOne);
  scale_cmd->add_flag("--no-wait", scale_no_wait, "Return once the request is written");
  auto* release_cmd = app.add_subcommand(
      "release",
      "Ask a running job's leader to give back K nodes, the most recently added first (never "
      "below the minimum); they stay as spares");
  add_job_options(release_cmd, release_opts, true);
  release_cmd->add_option("--nodes", release_nodes, "The number of nodes to give back")
      ->required()
      ->check(kAtLeastOne);
  release_cmd->add_flag("--no-wait", release_no_wait, "Return once the request is written");
  JobOptions readmit_opts;
  std::string readmit_host;
  auto* readmit_cmd = app.add_subcommand(
      "readmit",
      "Let a node the health monitors excluded back into the job before its cooldown ends");
  add_job_options(readmit_cmd, readmit_opts, false);
  readmit_cmd->add_option("--host", readmit_host, "The node's host (its --local-addr or name)")
      ->required();
  auto* status_cmd = app.add_subcommand("status", "Show a job's round, members and policy state");
  add_job_options(status_cmd, status_opts, false);
  status_cmd->add_flag("--json", status_json, "Print one JSON object");

  JobOptions watch_opts;
  watch_opts.timeout_s = 2;  // Ctrl-C waits for a store call that hangs: short
  ctl::WatchOptions watch_view;
  double watch_interval_s = 1;
  auto* watch_cmd = app.add_subcommand(
      "watch",
      "Show a running job live: sizes, spares, each rank's step, samples/s and the last events, "
      "redrawn in place until Ctrl-C");
  add_job_options(watch_cmd, watch_opts, false);
  watch_cmd->add_option("--interval", watch_interval_s, "Seconds between two looks at the job")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  watch_cmd
      ->add_option("--total-steps", watch_view.total_steps,
                   "The step a progress bar is full at (default: the highest rank's step)")
      ->check(CLI::NonNegativeNumber);
  watch_cmd->add_flag("--once", watch_view.once, "Print one frame and exit");

  SimulateOptions sim_opts;
  auto* simulate_cmd = app.add_subcommand(
      "simulate",
      "Play a capacity trace against the elastic policy and the policies it replaces; print a "
      "table and optionally write JSON (docs/simulator.md)");
  simulate_cmd->add_option("trace", sim_opts.trace, "The trace file")->required();
  simulate_cmd->add_option("--json", sim_opts.json_out, "Write the results as JSON to this file");
  simulate_cmd->add_option("--policies", sim_opts.policies, "Comma-separated policies to compare")
      ->delimiter(',')
      ->check(CLI::IsMember(sim::controller_names()))
      ->capture_default_str();
  simulate_cmd->add_option("--seed", sim_opts.seed,
                           "Seed for the trace's random failures and notices (default: its own)");

  timeline::TimelineOptions timeline_opts;
  auto* timeline_cmd = app.add_subcommand(
      "timeline",
      "Draw a run from its event logs (--event-log): world size, throughput, steps and every "
      "event over time, as a PNG or a self-contained HTML page");
  timeline_cmd->add_option("logs", timeline_opts.logs, "Event logs (one or several nodes')")
      ->required()
      ->check(CLI::ExistingFile);
  timeline_cmd->add_option("-o,--output", timeline_opts.out, "The picture: FILE.png or FILE.html")
      ->required();
  timeline_cmd->add_option("--title", timeline_opts.title,
                           "Its title (default: the run id, start time and length)");
  timeline_cmd->add_option("--width", timeline_opts.width, "Its width in pixels")
      ->capture_default_str()
      ->check(CLI::Range(640, 20000));
  timeline_cmd
      ->add_option("--list", timeline_opts.list_lines,
                   "Events listed under the PNG's chart (the most important first)")
      ->capture_default_str()
      ->check(CLI::Range(0, 10000));

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // The usage of the subcommand the error is about, when there is one.
    const auto parsed = app.get_subcommands();
    std::cerr << "elasticctl: " << e.what() << "\n\n"
              << (parsed.empty() ? app.help() : parsed.front()->help());
    return kExitUsage;
  }

  try {
    util::set_log_level(log_level);
    if (store_cmd->parsed()) return run_store(store_opts);
    if (scale_cmd->parsed()) {
      return run_request(scale_opts, {ctl::Request::Kind::kScale, scale_nodes}, !scale_no_wait);
    }
    if (release_cmd->parsed()) {
      return run_request(release_opts, {ctl::Request::Kind::kRelease, release_nodes},
                         !release_no_wait);
    }
    if (readmit_cmd->parsed()) return run_readmit(readmit_opts, readmit_host);
    if (status_cmd->parsed()) return run_status(status_opts, status_json);
    if (simulate_cmd->parsed()) return run_simulate(sim_opts);
    if (timeline_cmd->parsed()) return run_timeline(timeline_opts);
    if (watch_cmd->parsed()) {
      watch_view.interval = millis(watch_interval_s);
      return run_watch(watch_opts, watch_view);
    }
  } catch (const ConfigError& e) {
    std::cerr << "elasticctl: " << e.what() << "\n";
    return kExitUsage;
  } catch (const Error& e) {
    std::cerr << "elasticctl: " << e.what() << "\n";
    return kExitFailure;
  }
  return kExitUsage;
}
