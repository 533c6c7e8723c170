// load_overrides (include/elasticrun/batch.hpp): worldSizeOverrides of the job
// config file, through the agent's own parser (src/cli/job_config), so that
// a worker reads exactly what the agent validated before it started the job.
//
// The Python SDK cannot share that parser and has a small reader of its own
// (python/elasticrun/overrides.py); test_sdk_cpp_equivalence.py holds the two to
// the same answers, and lists the forms where they part.
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>

#include "cli/job_config.hpp"
#include "elasticrun/batch.hpp"
#include "elasticrun/errors.hpp"
#include "util/strings.hpp"

namespace elasticrun::sdk {
namespace {

constexpr size_t kMaxFileBytes = 1 << 20;  // the agent's limit (cli/job_config.cpp)

// `what` names the file for messages: "job config '/x/job.yaml'".
std::string read_capped(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(what + ": cannot open: " + std::strerror(errno));
  std::string text;
  char buffer[8192];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    text.append(buffer, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxFileBytes) {
      throw ConfigError(what + ": larger than " + std::to_string(kMaxFileBytes) + " bytes");
    }
  }
  if (in.bad()) throw ConfigError(what + ": cannot read: " + std::strerror(errno));
  return text;
}

// The parser has checked `text` (a plain YAML number, finite, in range) and
// kept it as written; these give its value the way Python's int() and
// float() do, correctly rounded.
template <class T>
T value_of(std::string_view text, std::string_view origin) {
  bool negative = false;
  if (!text.empty() && (text[0] == '+' || text[0] == '-')) {
    negative = text[0] == '-';
    text.remove_prefix(1);
  }
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  // Unreachable for text the parser accepted; a message beats a wrong number.
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw ConfigError(std::string(origin) + ": cannot read the number " + util::quote(text));
  }
  return negative ? -value : value;
}

Overrides load(const std::string& path, const std::string& what) {
  const std::string text = read_capped(path, what);
  const cli::JobConfig config = cli::parse_job_config(text, path);
  Overrides out;
  for (const auto& [nodes, entry] : config.world_size_overrides) {
    const std::string& origin = config.world_size_origins.at(nodes);
    Override& o = out[nodes];
    for (const auto& [key, value] : entry) {
      if (key == "learningRate") {
        o.learning_rate = value_of<double>(value, origin);
      } else if (key == "microBatchSize") {
        o.micro_batch_size = value_of<int64_t>(value, origin);
      } else if (key == "minMicroBatchSize") {
        o.min_micro_batch_size = value_of<int64_t>(value, origin);
      } else if (key == "maxMicroBatchSize") {
        o.max_micro_batch_size = value_of<int64_t>(value, origin);
      }
      // The parser admits no other key today; one it learns later is not ours.
    }
  }
  return out;
}

}  // namespace

Overrides load_overrides(const std::string& path) {
  return load(path, "job config " + util::quote(path));
}

Overrides load_overrides() {
  const char* path = std::getenv(kConfigFileEnv);
  // Empty counts as unset, as in Python (os.environ.get(...) or None).
  if (path == nullptr || *path == '\0') return {};
  return load(path, std::string("job config ") + util::quote(path) + " ($" + kConfigFileEnv + ")");
}

}  // namespace elasticrun::sdk
