#include "cli/launch_config.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "elasticrun/errors.hpp"
#include "util/signals.hpp"
#include "util/strings.hpp"

namespace elasticrun::cli {

namespace {

constexpr std::string_view kSpace = " \t\n\r\f\v";

std::string_view strip(std::string_view s) {
  const auto first = s.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(kSpace);
  return s.substr(first, last - first + 1);
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

[[noreturn]] void fail(std::string_view what, std::string_view text, std::string_view why) {
  throw ConfigError(std::string(what) + " " + util::quote(text) + ": " + std::string(why));
}

// Python accepts '_' between digits (1_000); drops them, or returns false if misplaced.
bool drop_underscores(std::string_view in, std::string& out) {
  out.clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '_') {
      out += in[i];
      continue;
    }
    if (i == 0 || i + 1 == in.size() || !is_digit(in[i - 1]) || !is_digit(in[i + 1])) return false;
  }
  return true;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const auto pos = s.find(sep, start);
    parts.push_back(s.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) return parts;
    start = pos + 1;
  }
}

nlohmann::ordered_json optional_json(const std::optional<std::string>& value) {
  return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
}

nlohmann::ordered_json health_json(const HealthOptions& h) {
  nlohmann::ordered_json rules = nlohmann::ordered_json::array();
  for (const auto& r : h.log_rules) rules.push_back(r.name);
  nlohmann::ordered_json policy = nullptr;
  if (h.restart_policy) {
    const auto opt = [](const auto& v) {
      return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
    };
    policy = {{"num_restart_before_full_job_restart",
               opt(h.restart_policy->num_restart_before_full_job_restart)},
              {"eval_period_seconds", opt(h.restart_policy->eval_period_seconds)},
              {"max_full_job_restarts", opt(h.restart_policy->max_full_job_restarts)},
              {"job_max_retry_count", opt(h.restart_policy->job_max_retry_count)}};
  }
  const char* hang = h.hang == HealthOptions::Hang::kAuto  ? "auto"
                     : h.hang == HealthOptions::Hang::kOff ? "off"
                                                           : "seconds";
  return {
      {"hang", hang},
      {"hang_seconds", h.hang_seconds},
      {"startup_timeout", h.startup_timeout},
      {"non_finite_loss", h.non_finite_loss},
      {"exclude_after", h.exclude_after},
      {"exclude_window", h.exclude_window},
      {"exclude_cooldown", h.exclude_cooldown},
      {"straggler_factor", h.straggler_factor},
      {"straggler_points", h.straggler_points},
      {"log_rules", rules},
      {"restart_policy", policy},
      {"max_restarts_given", h.max_restarts_given},
      {"gpu_health", h.gpu == HealthOptions::Gpu::kAuto ? "auto" : "off"},
  };
}

nlohmann::ordered_json elastic_json(const ElasticOptions& e) {
  nlohmann::ordered_json overrides = nlohmann::ordered_json::object();
  for (const auto& [size, values] : e.world_size_overrides) {
    overrides[std::to_string(size)] = values;
  }
  return {
      {"min_replicas", e.min_replicas},
      {"max_replicas", e.max_replicas},
      {"replica_increment_step", e.replica_increment_step},
      {"replica_discrete_values", e.replica_discrete_values},
      {"graceful_shutdown_timeout", e.graceful_shutdown_timeout},
      {"scaling_timeout", e.scaling_timeout},
      {"faulty_scale_down_timeout", e.faulty_scale_down_timeout},
      {"min_stable_period", e.min_stable_period},
      {"max_stable_period", e.max_stable_period},
      {"config_file", optional_json(e.config_file)},
      {"world_size_overrides", overrides},
  };
}

nlohmann::ordered_json std_json(const StdStreams& s) {
  nlohmann::ordered_json ranks = nlohmann::ordered_json::object();
  for (const auto& [rank, bits] : s.per_rank) ranks[std::to_string(rank)] = bits;
  return {{"default", s.default_bits}, {"ranks", ranks}};
}

}  // namespace

int StdStreams::for_rank(int local_rank) const {
  const auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? default_bits : it->second;
}

int parse_int(std::string_view what, std::string_view text) {
  std::string digits;
  std::string_view s = strip(text);
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.empty() || !is_digit(s.front()) || !drop_underscores(s, digits)) {
    fail(what, text, "expected an integer");
  }
  long long value = 0;
  for (char c : digits) {
    if (!is_digit(c)) fail(what, text, "expected an integer");
    value = value * 10 + (c - '0');
    if (value > std::numeric_limits<int>::max()) fail(what, text, "integer out of range");
  }
  return static_cast<int>(negative ? -value : value);
}

double parse_double(std::string_view what, std::string_view text) {
  std::string cleaned;
  std::string_view s = strip(text);
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  // from_chars would take "inf", "nan" and hex; none of them is a sensible interval.
  const bool plain = !s.empty() && (is_digit(s[0]) || s[0] == '.') &&
                     s.find_first_of("xXpP") == std::string_view::npos;
  if (!plain || !drop_underscores(s, cleaned)) fail(what, text, "expected a finite number");
  double value = 0;
  const auto [end, ec] = std::from_chars(cleaned.data(), cleaned.data() + cleaned.size(), value);
  if (ec != std::errc() || end != cleaned.data() + cleaned.size() || !std::isfinite(value)) {
    fail(what, text, "expected a finite number");
  }
  return negative ? -value : value;
}

std::pair<int, int> parse_nnodes(std::string_view what, std::string_view text) {
  const auto parts = split(text, ':');
  int min = 0;
  int max = 0;
  try {
    if (parts.size() > 2) throw ConfigError("");
    min = parse_int(what, parts[0]);
    max = parts.size() == 2 ? parse_int(what, parts[1]) : min;
  } catch (const ConfigError&) {
    fail(what, text, "expected N or MIN:MAX");
  }
  if (min < 1) fail(what, text, "the number of nodes must be at least 1");
  if (min > max) {
    fail(what, text,
         "MIN (" + std::to_string(min) + ") must not exceed MAX (" + std::to_string(max) + ")");
  }
  return {min, max};
}

StdStreams parse_std_streams(std::string_view what, std::string_view text) {
  constexpr std::string_view kExpected =
      "expected 0 (none), 1 (stdout), 2 (stderr), 3 (both), or per local rank like 0:3,1:0";
  const auto bits = [&](std::string_view v) {
    if (v.size() != 1 || v[0] < '0' || v[0] > '3') fail(what, text, kExpected);
    return v[0] - '0';
  };
  StdStreams out;
  if (text.find(':') == std::string_view::npos) {
    out.default_bits = bits(text);
    return out;
  }
  for (std::string_view item : split(text, ',')) {
    const auto colon = item.find(':');
    if (colon == std::string_view::npos || colon == 0) fail(what, text, kExpected);
    for (char c : item.substr(0, colon)) {
      if (!is_digit(c)) fail(what, text, kExpected);
    }
    // Later entries win, as in torchrun's dict.
    out.per_rank[parse_int(what, item.substr(0, colon))] = bits(item.substr(colon + 1));
  }
  return out;
}

std::map<std::string, std::string> parse_rdzv_conf(std::string_view what, std::string_view text) {
  std::map<std::string, std::string> conf;
  if (strip(text).empty()) return conf;
  for (std::string_view item : split(strip(text), ',')) {
    const auto eq = item.find('=');
    const auto key = strip(item.substr(0, eq));
    if (key.empty()) fail(what, text, "expected key=value,key=value,...");
    const auto value =
        eq == std::string_view::npos ? std::string_view{} : strip(item.substr(eq + 1));
    if (value.empty()) fail(what, text, "option '" + std::string(key) + "' has no value");
    conf[std::string(key)] = std::string(value);
  }
  return conf;
}

std::optional<std::set<int>> parse_local_ranks(std::string_view what, std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::set<int> ranks;
  constexpr std::string_view kExpected = "expected local ranks like 0,1,2";
  for (std::string_view item : split(text, ',')) {
    int rank = -1;
    try {
      rank = parse_int(what, item);
    } catch (const ConfigError&) {
      fail(what, text, kExpected);
    }
    if (rank < 0) fail(what, text, kExpected);
    ranks.insert(rank);
  }
  return ranks;
}

int parse_signal(std::string_view what, std::string_view text) {
  const auto s = strip(text);
  if (!s.empty() && is_digit(s[0])) {
    const int signo = parse_int(what, s);
    if (signo < 1 || signo > SIGRTMAX) fail(what, text, "no such signal");
    return signo;
  }
  if (auto signo = util::parse_signal_name(s)) return *signo;
  fail(what, text, "unknown signal (names are spelled like SIGTERM or SIGUSR1)");
}

std::vector<int> parse_signal_list(std::string_view what, std::string_view text) {
  std::vector<int> out;
  for (std::string_view item : split(text, ',')) {
    // torchrun only warns about an empty entry ("SIGTERM,"): skip it likewise.
    if (strip(item).empty()) continue;
    const int signo = parse_signal(what, item);
    if (signo == SIGKILL || signo == SIGSTOP) {
      fail(what, item, "cannot be caught, so it cannot be forwarded");
    }
    if (std::find(out.begin(), out.end(), signo) == out.end()) out.push_back(signo);
  }
  return out;
}

std::string signal_name(int signo) {
  // Python has names for SIGRTMIN and SIGRTMAX only; number them all alike.
  if (signo >= SIGRTMIN && signo <= SIGRTMAX) return "SIGRTMIN+" + std::to_string(signo - SIGRTMIN);
  if (auto name = util::python_signal_name(signo)) return std::string(*name);
  return "signal " + std::to_string(signo);
}

std::vector<std::string> parse_comma_list(std::string_view text) {
  std::vector<std::string> out(1);
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != ',') {
      out.back() += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == ',') {
      out.back() += ',';
      ++i;
    } else {
      out.emplace_back();
    }
  }
  return out;
}

std::vector<std::string> split_shell_words(std::string_view what, std::string_view text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote == '\'') {
      if (c == '\'') {
        quote = 0;
      } else {
        word += c;
      }
    } else if (quote == '"') {
      if (c == '"') {
        quote = 0;
      } else if (c == '\\' && i + 1 < text.size() &&
                 std::string_view("\"\\$`").find(text[i + 1]) != std::string_view::npos) {
        word += text[++i];
      } else {
        word += c;
      }
    } else if (kSpace.find(c) != std::string_view::npos) {
      if (in_word) words.push_back(std::exchange(word, {}));
      in_word = false;
    } else {
      in_word = true;
      if (c == '\'' || c == '"') {
        quote = c;
      } else if (c == '\\') {
        if (++i == text.size()) fail(what, text, "ends with a lone backslash");
        word += text[i];
      } else {
        word += c;
      }
    }
  }
  if (quote != 0) fail(what, text, std::string("unterminated ") + quote + " quote");
  if (in_word) words.push_back(std::move(word));
  return words;
}

HostPort parse_endpoint(std::string_view what, std::string_view text, int default_port) {
  const auto endpoint = strip(text);
  if (endpoint.empty()) {
    if (default_port < 0) fail(what, text, "expected host:port");
    return {"localhost", default_port};
  }
  std::string_view host = endpoint;
  std::optional<std::string_view> port_text;
  const bool bracketed = endpoint.front() == '[' && endpoint.back() == ']';
  if (!bracketed) {
    if (const auto colon = endpoint.rfind(':'); colon != std::string_view::npos) {
      host = endpoint.substr(0, colon);
      port_text = endpoint.substr(colon + 1);
    }
  }
  if (host.size() > 1 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = default_port;
  if (port_text) {
    const bool digits = !port_text->empty() && port_text->size() <= 5 &&
                        port_text->find_first_not_of("0123456789") == std::string_view::npos;
    if (!digits || parse_int(what, *port_text) > 65535) {
      fail(what, text, "the port must be an integer between 0 and 65535");
    }
    port = parse_int(what, *port_text);
  } else if (default_port < 0) {
    fail(what, text, "the endpoint has no port");
  }
  const bool host_ok = !host.empty() && std::all_of(host.begin(), host.end(), [](char c) {
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           std::string_view("_.:-").find(c) != std::string_view::npos;
  });
  if (!host_ok) fail(what, text, "the host must be a hostname or an IP address");
  return {std::string(host), port};
}

EtcdEndpoints parse_etcd_endpoints(std::string_view what, std::string_view text) {
  EtcdEndpoints out;
  if (strip(text).empty()) {  // as torchrun: etcd on this machine
    out.members.push_back({"localhost", kEtcdPort});
    return out;
  }
  for (std::string_view rest = strip(text);;) {
    const size_t comma = rest.find(',');
    std::string_view one = strip(rest.substr(0, comma));
    for (const auto& [scheme, tls] : {std::pair{"http://", false}, std::pair{"https://", true}}) {
      if (one.substr(0, std::string_view(scheme).size()) != scheme) continue;
      if (out.tls && *out.tls != tls) fail(what, text, "the endpoints mix http:// and https://");
      out.tls = tls;
      one.remove_prefix(std::string_view(scheme).size());
    }
    if (!one.empty() && one.back() == '/') one.remove_suffix(1);
    if (one.empty()) fail(what, text, "an empty endpoint in the list");
    HostPort hp = parse_endpoint(what, one, kEtcdPort);
    if (hp.port == 0) fail(what, text, "an etcd member's port cannot be 0");
    out.members.push_back(std::move(hp));
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return out;
}

std::string to_json(const LaunchConfig& c) {
  nlohmann::ordered_json signals = nlohmann::ordered_json::array();
  for (int signo : c.signals_to_handle) signals.push_back(signo);
  nlohmann::ordered_json filter = nullptr;
  if (c.local_ranks_filter) filter = *c.local_ranks_filter;
  nlohmann::ordered_json j = {
      {"nnodes_min", c.nnodes_min},
      {"nnodes_max", c.nnodes_max},
      {"nnodes_spec", c.nnodes_spec},
      {"nproc_per_node", c.nproc_per_node},
      {"nproc_per_node_spec", c.nproc_per_node_spec},
      {"rdzv_backend", c.rdzv_backend},
      {"rdzv_endpoint", c.rdzv_endpoint},
      {"rdzv_id", c.rdzv_id},
      {"rdzv_conf", c.rdzv_conf},
      {"standalone", c.standalone},
      {"max_restarts", c.max_restarts},
      {"monitor_interval", c.monitor_interval},
      {"start_method", c.start_method},
      {"event_log_handler", c.event_log_handler},
      {"event_log", c.event_log},
      {"spot_notice_url", c.spot_notice_url},
      {"spot_notice_interval", c.spot_notice_interval},
      {"host_discovery_script", c.host_discovery_script},
      {"host_discovery_interval", c.host_discovery_interval},
      {"memory_tier_limit",
       c.memory_tier_limit ? nlohmann::json(*c.memory_tier_limit) : nlohmann::json()},
      {"memory_replicas", c.memory_replicas},
      {"data_cache_limit",
       c.data_cache_limit ? nlohmann::json(*c.data_cache_limit) : nlohmann::json()},
      {"memory_replication_rate", c.memory_replication_rate},
      {"role", c.role},
      {"module", c.module},
      {"no_python", c.no_python},
      {"run_path", c.run_path},
      {"log_dir", optional_json(c.log_dir)},
      {"redirects", std_json(c.redirects)},
      {"tee", std_json(c.tee)},
      {"log_line_prefix_template", optional_json(c.log_line_prefix_template)},
      {"local_ranks_filter", filter},
      {"duplicate_stdout_filters", c.duplicate_stdout_filters},
      {"duplicate_stderr_filters", c.duplicate_stderr_filters},
      {"node_rank", c.node_rank},
      {"master_addr", c.master_addr},
      {"master_port", c.master_port},
      {"local_addr", optional_json(c.local_addr)},
      {"logs_specs", optional_json(c.logs_specs)},
      {"numa_binding", optional_json(c.numa_binding)},
      {"signals_to_handle", signals},
      {"shutdown_timeout", c.shutdown_timeout},
      {"virtual_local_rank", c.virtual_local_rank},
      {"shutdown_signal", c.shutdown_signal},
      {"pre_train_script", optional_json(c.pre_train_script)},
      {"pre_train_args", c.pre_train_args},
      {"post_train_script", optional_json(c.post_train_script)},
      {"post_train_args", c.post_train_args},
      {"server_host", c.server_host},
      {"server_port", c.server_port},
      {"metrics_port", c.metrics_port ? nlohmann::json(*c.metrics_port) : nlohmann::json()},
      {"serve_port", c.serve_port ? nlohmann::json(*c.serve_port) : nlohmann::json()},
      {"inprocess_restart", c.inprocess_restart},
      {"warm_start", c.warm_start},
      {"warm_start_imports", c.warm_start_imports},
      {"elastic", elastic_json(c.elastic)},
      {"health", health_json(c.health)},
      {"training_script", c.training_script},
      {"training_script_args", c.training_script_args},
      {"notes", c.notes},
  };
  // Replace, not throw, on bytes that are not UTF-8: a path may contain anything.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace elasticrun::cli
