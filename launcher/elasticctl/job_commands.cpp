#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cli/launch_config.hpp"
#include "commands.hpp"
#include "ctl/ctl_requests.hpp"
#include "ctl/job_connection.hpp"
#include "ctl/job_status.hpp"
#include "ctl/readmit.hpp"
#include "ctl/watch.hpp"
#include "elasticrun/errors.hpp"
#include "util/secret.hpp"

namespace elasticrun::ctlcmd {
namespace {

// What the job commands share: which job, and how long to wait.
struct JobOptions {
  std::string endpoint;
  std::string run_id;
  double connect_timeout_s = 5;
  // Also bounds every store call.
  double timeout_s = 60;
  // The job secret's file, when the job has one (else $ELASTICRUN_SECRET_FILE).
  std::optional<std::string> secret_file;
  // c10d (elasticrun's store), or etcd / etcd-v2 and their https settings.
  std::string backend = "c10d";
  std::string rdzv_conf;
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
  cmd->add_option("--rdzv-endpoint,--rdzv_endpoint", o.endpoint,
                  "The job's rendezvous store, HOST[:PORT] (port 29400 when omitted); for etcd "
                  "its members, HOST[:PORT],... (port 2379)")
      ->required();
  cmd->add_option("--rdzv-backend,--rdzv_backend", o.backend,
                  "The job's --rdzv-backend: c10d (elasticrun's store), etcd or etcd-v2")
      ->capture_default_str()
      ->check(CLI::IsMember({"c10d", "elasticrun", "etcd", "etcd-v2"}));
  cmd->add_option("--rdzv-conf,--rdzv_conf", o.rdzv_conf,
                  "The job's --rdzv-conf; for etcd over https its protocol, cacert, cert and key "
                  "are read (other keys are not)");
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
  cmd->add_option("--secret-file", o.secret_file,
                  "File of the job secret its store asks for (default: the file "
                  "$ELASTICRUN_SECRET_FILE names)");
}

// The job, with its secret; throws ConfigError.
ctl::JobAddress job_address(const JobOptions& o) {
  ctl::JobAddress job = ctl::parse_job_address("--rdzv-endpoint", o.endpoint, o.run_id,
                                               o.backend == "elasticrun" ? "c10d" : o.backend,
                                               cli::parse_rdzv_conf("--rdzv-conf", o.rdzv_conf));
  job.secret = util::job_secret(o.secret_file, "--secret-file").value_or("");
  return job;
}

StoreClient connect(const JobOptions& o, ctl::JobAddress& job) {
  job = job_address(o);
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
  w.job = job_address(o);
  w.connect_timeout = millis(o.connect_timeout_s);
  w.call_timeout = millis(o.timeout_s);
  return ctl::run_watch(w);
}

}  // namespace

std::vector<Command> add_job_commands(CLI::App& app) {
  std::vector<Command> out;

  struct Request {
    JobOptions job;
    int nodes = 0;
    bool no_wait = false;
  };
  auto scale = std::make_shared<Request>();
  auto* scale_cmd = app.add_subcommand(
      "scale", "Ask a running job's leader to scale the job to N nodes (within --nnodes MIN:MAX)");
  add_job_options(scale_cmd, scale->job, true);
  scale_cmd->add_option("--nodes", scale->nodes, "The number of nodes to run at")
      ->required()
      ->check(kAtLeastOne);
  scale_cmd->add_flag("--no-wait", scale->no_wait, "Return once the request is written");
  out.push_back({scale_cmd, [scale] {
                   return run_request(scale->job, {ctl::Request::Kind::kScale, scale->nodes},
                                      !scale->no_wait);
                 }});

  auto release = std::make_shared<Request>();
  auto* release_cmd = app.add_subcommand(
      "release",
      "Ask a running job's leader to give back K nodes, the most recently added first (never "
      "below the minimum); they stay as spares");
  add_job_options(release_cmd, release->job, true);
  release_cmd->add_option("--nodes", release->nodes, "The number of nodes to give back")
      ->required()
      ->check(kAtLeastOne);
  release_cmd->add_flag("--no-wait", release->no_wait, "Return once the request is written");
  out.push_back({release_cmd, [release] {
                   return run_request(release->job, {ctl::Request::Kind::kRelease, release->nodes},
                                      !release->no_wait);
                 }});

  struct Readmit {
    JobOptions job;
    std::string host;
  };
  auto readmit = std::make_shared<Readmit>();
  auto* readmit_cmd = app.add_subcommand(
      "readmit",
      "Let a node the health monitors excluded back into the job before its cooldown ends");
  add_job_options(readmit_cmd, readmit->job, false);
  readmit_cmd->add_option("--host", readmit->host, "The node's host (its --local-addr or name)")
      ->required();
  out.push_back({readmit_cmd, [readmit] { return run_readmit(readmit->job, readmit->host); }});

  struct Status {
    JobOptions job;
    bool json = false;
  };
  auto status = std::make_shared<Status>();
  auto* status_cmd = app.add_subcommand("status", "Show a job's round, members and policy state");
  add_job_options(status_cmd, status->job, false);
  status_cmd->add_flag("--json", status->json, "Print one JSON object");
  out.push_back({status_cmd, [status] { return run_status(status->job, status->json); }});

  struct Watch {
    JobOptions job;
    ctl::WatchOptions view;
    double interval_s = 1;
  };
  auto watch = std::make_shared<Watch>();
  watch->job.timeout_s = 2;  // Ctrl-C waits for a store call that hangs: short
  auto* watch_cmd = app.add_subcommand(
      "watch",
      "Show a running job live: sizes, spares, each rank's step, samples/s and the last events, "
      "redrawn in place until Ctrl-C");
  add_job_options(watch_cmd, watch->job, false);
  watch_cmd->add_option("--interval", watch->interval_s, "Seconds between two looks at the job")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  watch_cmd
      ->add_option("--total-steps", watch->view.total_steps,
                   "The step a progress bar is full at (default: the highest rank's step)")
      ->check(CLI::NonNegativeNumber);
  watch_cmd->add_flag("--once", watch->view.once, "Print one frame and exit");
  out.push_back({watch_cmd, [watch] {
                   watch->view.interval = millis(watch->interval_s);
                   return run_watch(watch->job, watch->view);
                 }});
  return out;
}

}  // namespace elasticrun::ctlcmd
