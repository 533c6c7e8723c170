// The table of elasticrun's launch flags: spellings, environment fallback,
// help text, and how each flag's text sets the LaunchConfig. parse.cpp
// parses against it; --help and --print-completion are generated from it,
// so they cannot drift from what is accepted. A flag is added as an id, a
// row, and its field; what several flags decide together is derived in
// parse.cpp (and the elastic group in elastic_parse.cpp).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace elasticrun::cli {

struct LaunchConfig;

// A flag's value as found: on the command line (origin "--nnodes", the dash
// spelling whatever was typed), in the environment (origin "PET_NNODES") or
// in the job config (origin "<file>, line N: <key>"). A switch's text is "1"
// on the command line.
struct Raw {
  std::string text;
  std::string origin;
};

// Sets the flag's field from its text; throws ConfigError naming the origin.
using Convert = void (*)(LaunchConfig&, const Raw&);

enum class Flag {
  kHelp,
  kNnodes,
  kNprocPerNode,
  kRdzvBackend,
  kRdzvEndpoint,
  kRdzvId,
  kRdzvConf,
  kStandalone,
  kMaxRestarts,
  kMonitorInterval,
  kStartMethod,
  kEventLogHandler,
  kRole,
  kModule,
  kNoPython,
  kRunPath,
  kLogDir,
  kRedirects,
  kTee,
  kLogLinePrefixTemplate,
  kLocalRanksFilter,
  kDuplicateStdoutFilters,
  kDuplicateStderrFilters,
  kNodeRank,
  kMasterAddr,
  kMasterPort,
  kLocalAddr,
  kLogsSpecs,
  kNumaBinding,
  kSignalsToHandle,
  kShutdownTimeout,
  kVirtualLocalRank,
  kPrintCompletion,
  kShutdownSignal,
  kPreTrainScript,
  kPreTrainArgs,
  kPostTrainScript,
  kPostTrainArgs,
  kServerHost,
  kServerPort,
  kInprocessRestart,
  kMinReplicas,
  kMaxReplicas,
  kReplicaIncrementStep,
  kReplicaDiscreteValues,
  kGracefulShutdownTimeout,
  kScalingTimeout,
  kFaultyScaleDownTimeout,
  kMinStablePeriod,
  kMaxStablePeriod,
  kConfig,
  kWarmStart,
  kWarmStartImports,
  kEventLog,
  kMetricsPort,
  kHangTimeout,
  kStartupTimeout,
  kNonFiniteLoss,
  kExcludeAfter,
  kExcludeWindow,
  kExcludeCooldown,
  kStragglerFactor,
  kStragglerPoints,
  kGpuHealth,
  kSpotNoticeUrl,
  kSpotNoticeInterval,
  kHostDiscoveryScript,
  kHostDiscoveryInterval,
  kMemoryTierLimit,
  kMemoryReplicas,
  kMemoryReplicationRate,
  kDataCacheLimit,
  kCount,
};

// kElastic: elasticrun's own flags. They are not torchrun's, so they have no
// PET_ fallback (a PET_ variable means what torchrun says it means).
// kHealth: the health monitors (docs/health.md), also ours, also without PET_.
enum class Group { kTorchrun, kHyperPod, kElastic, kHealth };

struct FlagSpec {
  Flag id;
  std::string_view short_name;  // "-m", or empty
  std::string_view long_name;   // dash spelling; the underscore one is derived
  bool takes_value;             // false: a switch (argparse store_true / check_env)
  bool env_fallback;            // reads PET_<DEST> when not given, as torchrun's `env` action
  Group group;
  std::string_view metavar;
  std::string_view default_text;  // for --help; empty: none shown
  std::string_view help;
  // Null for the flags whose meaning depends on others (the elastic group,
  // --config) and for --help and --print-completion.
  Convert convert = nullptr;
  // The job config key that gives the same setting ("monitors.hangTimeoutInSeconds"),
  // read as the flag's text when the flag is not given; empty: none.
  std::string_view config_key = {};

  // "nproc_per_node": argparse's dest, which names the PET_ variable.
  std::string dest() const;
  std::string env_name() const { return "PET_" + upper(dest()); }
  // Every spelling the command line accepts: long, underscore long, short.
  std::vector<std::string> spellings() const;

 private:
  static std::string upper(std::string s);
};

const std::vector<FlagSpec>& flag_table();
const FlagSpec& flag_spec(Flag id);

// The complete, grouped --help text.
std::string help_text();
// A completion script for bash, zsh or tcsh (--print-completion); throws
// ConfigError for any other shell.
std::string completion_script(std::string_view shell);

}  // namespace elasticrun::cli
