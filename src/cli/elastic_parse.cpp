#include "cli/elastic_parse.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <optional>
#include <system_error>

#include "cli/job_config.hpp"
#include "elasticrun/errors.hpp"
#include "util/strings.hpp"

namespace elasticrun::cli {

namespace {

// A setting and who gave it, value included, for messages:
// "--min-replicas '2'", "job.yaml, line 3: elasticPolicy.minReplicas '2'".
template <class T>
struct Setting {
  T value;
  std::string who;
};

[[noreturn]] void fail(const std::string& message) {
  throw ConfigError(message);
}

std::string seconds_text(double seconds) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, seconds);
  return ec == std::errc() ? std::string(buf, end) : "?";
}

std::string list_text(const std::vector<int>& sizes) {
  std::string out;
  for (int s : sizes) out += (out.empty() ? "" : ",") + std::to_string(s);
  return out;
}

const std::optional<Raw>& flag(const FlagValues& g, Flag id) {
  return g[static_cast<size_t>(id)];
}

std::string who(const Raw& r) {
  return r.origin + " " + util::quote(r.text);
}

std::optional<Setting<int>> int_flag(const FlagValues& g, Flag id) {
  const auto& r = flag(g, id);
  if (!r) return std::nullopt;
  return Setting<int>{parse_int(r->origin, r->text), who(*r)};
}

std::optional<Setting<int>> int_file(const std::optional<FileValue<int>>& v) {
  if (!v) return std::nullopt;
  return Setting<int>{v->value, v->origin + " " + util::quote(std::to_string(v->value))};
}

// The range of nodes (see elastic_parse.hpp for who wins). Sets c.nnodes_*.
std::pair<Setting<int>, Setting<int>> resolve_range(LaunchConfig& c, const FlagValues& g,
                                                    const JobConfig& file) {
  const auto min_flag = int_flag(g, Flag::kMinReplicas);
  const auto max_flag = int_flag(g, Flag::kMaxReplicas);
  const auto min_file = int_file(file.min_replicas);
  const auto max_file = int_file(file.max_replicas);
  if (const auto& nnodes = flag(g, Flag::kNnodes)) {
    const std::string range = who(*nnodes);
    const auto agree = [&](const std::optional<Setting<int>>& f, int want, const char* end) {
      if (f && f->value != want) {
        fail(f->who + " and " + range + " disagree: " + nnodes->origin + " sets the " + end +
             " to " + std::to_string(want) + "; give one of them, or the same value to both");
      }
    };
    agree(min_flag, c.nnodes_min, "minimum");
    agree(max_flag, c.nnodes_max, "maximum");
    const auto overridden = [&](const std::optional<Setting<int>>& f, int want) {
      if (f && f->value != want) c.notes.push_back(f->who + ": overridden by " + range);
    };
    overridden(min_file, c.nnodes_min);
    overridden(max_file, c.nnodes_max);
    return {{c.nnodes_min, range}, {c.nnodes_max, range}};
  }
  Setting<int> min = min_flag   ? *min_flag
                     : min_file ? *min_file
                                : Setting<int>{c.nnodes_min, "--min-replicas' default 1"};
  if (min.value < 1) fail(min.who + ": the minimum must be at least 1 node");
  // Without --nnodes, "--min-replicas 4" alone means exactly 4, not 4 to 1.
  const int default_max = std::max(min.value, c.nnodes_max);
  Setting<int> max = max_flag ? *max_flag
                     : max_file
                         ? *max_file
                         : Setting<int>{default_max, "--max-replicas' default (the minimum) " +
                                                         std::to_string(default_max)};
  if (max.value < min.value) fail(max.who + ": below the minimum, " + min.who);
  c.nnodes_min = min.value;
  c.nnodes_max = max.value;
  c.nnodes_spec = std::to_string(min.value) + ":" + std::to_string(max.value);
  return {min, max};
}

// --replica-increment-step or --replica-discrete-values (or the file's, when
// neither flag is given: a flag picks the kind and drops the file's other kind).
void resolve_sizes(ElasticOptions& e, const FlagValues& g, const JobConfig& file,
                   const Setting<int>& min, const Setting<int>& max) {
  const auto& step_raw = flag(g, Flag::kReplicaIncrementStep);
  const auto& list_raw = flag(g, Flag::kReplicaDiscreteValues);
  if (step_raw && list_raw) {
    fail(step_raw->origin + " and " + list_raw->origin +
         " exclude each other: the allowed sizes are either a step or a list");
  }
  std::optional<Setting<int>> step;
  std::optional<Setting<std::vector<int>>> list;
  if (step_raw) {
    step = int_flag(g, Flag::kReplicaIncrementStep);
  } else if (list_raw) {
    list = {parse_replica_list(list_raw->origin, list_raw->text), who(*list_raw)};
  } else {
    const auto& fs = file.replica_increment_step;
    const auto& fl = file.replica_discrete_values;
    if (fs && fl) {
      fail(fs->origin + " and " + fl->origin +
           " exclude each other: the allowed sizes are either a step or a list");
    }
    step = int_file(fs);
    if (fl) list = {fl->value, fl->origin + " " + util::quote(list_text(fl->value))};
  }
  if (step) {
    if (step->value < 1) fail(step->who + ": the step must be at least 1 node");
    e.replica_increment_step = step->value;
  }
  if (!list) return;
  auto sizes = list->value;
  if (sizes.empty()) fail(list->who + ": give at least one size");
  std::sort(sizes.begin(), sizes.end());
  const std::string range = min.who == max.who ? min.who : "between " + min.who + " and " + max.who;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::string size = std::to_string(sizes[i]);
    if (sizes[i] < 1) fail(list->who + ": " + size + " is not a number of nodes (at least 1)");
    if (sizes[i] < min.value || sizes[i] > max.value) {
      fail(list->who + ": " + size + " is outside the range " + std::to_string(min.value) + ".." +
           std::to_string(max.value) + " (" + range + ")");
    }
    if (i > 0 && sizes[i] == sizes[i - 1]) fail(list->who + ": " + size + " is given twice");
  }
  e.replica_discrete_values = std::move(sizes);
}

Setting<double> seconds(const FlagValues& g, Flag id, const std::optional<FileValue<double>>& file,
                        double fallback) {
  Setting<double> s{fallback,
                    std::string(flag_spec(id).long_name) + "'s default " + seconds_text(fallback)};
  if (const auto& r = flag(g, id)) {
    s = {parse_double(r->origin, r->text), who(*r)};
  } else if (file) {
    s = {file->value, file->origin + " " + util::quote(seconds_text(file->value))};
  }
  if (s.value < 0) fail(s.who + ": must not be negative");
  return s;
}

bool allowed(const ElasticOptions& e, int size) {
  if (!e.replica_discrete_values.empty()) {
    return std::binary_search(e.replica_discrete_values.begin(), e.replica_discrete_values.end(),
                              size);
  }
  return size >= e.min_replicas && size <= e.max_replicas &&
         (size - e.min_replicas) % e.replica_increment_step == 0;
}

}  // namespace

std::vector<int> parse_replica_list(std::string_view what, std::string_view text) {
  std::vector<int> out;
  size_t start = 0;
  while (true) {
    const auto comma = text.find(',', start);
    const auto item = text.substr(start, comma == std::string_view::npos ? comma : comma - start);
    try {
      out.push_back(parse_int(what, item));
    } catch (const ConfigError&) {
      fail(std::string(what) + " " + util::quote(text) + ": expected node counts like 2,4,8");
    }
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

void parse_elastic(LaunchConfig& c, const FlagValues& g, JobConfig file) {
  ElasticOptions& e = c.elastic;
  if (const auto& r = flag(g, Flag::kConfig)) {
    // Workers may run elsewhere (a --log-dir, a script that changes directory).
    std::error_code ec;
    const auto absolute = std::filesystem::absolute(r->text, ec);
    e.config_file = ec ? r->text : absolute.lexically_normal().string();
  }
  const auto [min, max] = resolve_range(c, g, file);
  e.min_replicas = min.value;
  e.max_replicas = max.value;
  resolve_sizes(e, g, file, min, max);
  e.graceful_shutdown_timeout =
      seconds(g, Flag::kGracefulShutdownTimeout, file.graceful_shutdown_timeout, 60).value;
  e.scaling_timeout = seconds(g, Flag::kScalingTimeout, file.scaling_timeout, 10).value;
  e.faulty_scale_down_timeout =
      seconds(g, Flag::kFaultyScaleDownTimeout, file.faulty_scale_down_timeout, 30).value;
  const auto min_stable = seconds(g, Flag::kMinStablePeriod, file.min_stable_period, 30);
  const auto max_stable = seconds(g, Flag::kMaxStablePeriod, file.max_stable_period, 600);
  if (min_stable.value > max_stable.value) {
    fail(min_stable.who + ": exceeds the maximum stable period, " + max_stable.who);
  }
  e.min_stable_period = min_stable.value;
  e.max_stable_period = max_stable.value;
  e.world_size_overrides = std::move(file.world_size_overrides);
  // The runPolicy section belongs to the health monitors.
  c.health.log_rules = std::move(file.log_rules);
  if (file.restart_policy) c.health.restart_policy = file.restart_policy->value;
  c.health.max_restarts_given = flag(g, Flag::kMaxRestarts).has_value();
  c.notes.insert(c.notes.end(), file.notes.begin(), file.notes.end());
  // Not an error: a smaller test run may reuse the production file.
  for (const auto& [size, origin] : file.world_size_origins) {
    if (allowed(e, size)) continue;
    c.notes.push_back(origin + ": unused; the job never runs at " + std::to_string(size) +
                      (size == 1 ? " node" : " nodes") + " (allowed: " +
                      (e.replica_discrete_values.empty()
                           ? std::to_string(e.min_replicas) + " to " +
                                 std::to_string(e.max_replicas) + " in steps of " +
                                 std::to_string(e.replica_increment_step)
                           : list_text(e.replica_discrete_values)) +
                      ")");
  }
}

}  // namespace elasticrun::cli
