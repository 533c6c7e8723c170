#include "control/assignment.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>

#include "util/read_file.hpp"

namespace elasticrun::control {
namespace {

// Far above what any node's workers' environments add up to: a file larger
// than this is not an assignment.
constexpr size_t kMaxAssignmentBytes = 64 * 1024 * 1024;

}  // namespace

std::string assignment_path(const std::string& control_path) {
  return control_path + ".assign";
}

RankEnv changed_from(const RankEnv& base, const RankEnv& env) {
  RankEnv out;
  for (const auto& [name, value] : env) {
    const auto it = base.find(name);
    if (it == base.end() || it->second != value) out.emplace(name, value);
  }
  return out;
}

std::string format_assignment(uint64_t generation, const std::vector<RankEnv>& ranks) {
  nlohmann::json doc = {{"version", kAssignmentVersion}, {"generation", generation}};
  doc["ranks"] = nlohmann::json::array();
  for (const RankEnv& env : ranks) doc["ranks"].push_back(env);
  // Environment values are bytes to the kernel; replace what is not UTF-8
  // rather than throw (the worker gets U+FFFD where the agent had a stray byte).
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

util::Status write_assignment(const std::string& path, uint64_t generation,
                              const std::vector<RankEnv>& ranks) {
  const std::string text = format_assignment(generation, ranks);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return util::Status(errno, "create " + tmp);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return util::Status(err, "write " + tmp);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  // The block's directory is the agent's (tmpfs, usually): a rename is
  // atomic for a reader; nothing here needs to survive a crash of the machine.
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return util::Status(err, "rename " + tmp + " to " + path);
  }
  return util::Status::ok();
}

util::Result<RankEnv> parse_assignment(const std::string& text, uint64_t generation,
                                       int local_rank) {
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return util::Status(EINVAL, "not a JSON object");
  const auto version = doc.find("version");
  if (version == doc.end() || !version->is_number_integer() || *version != kAssignmentVersion) {
    return util::Status(EINVAL, "version " + (version == doc.end() ? "missing" : version->dump()) +
                                    ", this reader reads " + std::to_string(kAssignmentVersion));
  }
  const auto gen = doc.find("generation");
  if (gen == doc.end() || !gen->is_number_unsigned() || gen->get<uint64_t>() != generation) {
    return util::Status(EINVAL, "round " + (gen == doc.end() ? "missing" : gen->dump()) +
                                    ", expected " + std::to_string(generation));
  }
  const auto ranks = doc.find("ranks");
  if (ranks == doc.end() || !ranks->is_array() || local_rank < 0 ||
      static_cast<size_t>(local_rank) >= ranks->size() ||
      !(*ranks)[static_cast<size_t>(local_rank)].is_object()) {
    return util::Status(EINVAL, "no entry for local rank " + std::to_string(local_rank));
  }
  RankEnv env;
  for (const auto& [name, value] : (*ranks)[static_cast<size_t>(local_rank)].items()) {
    if (!value.is_string()) return util::Status(EINVAL, name + ": not a string");
    env.emplace(name, value.get<std::string>());
  }
  return env;
}

util::Result<RankEnv> read_assignment(const std::string& path, uint64_t generation,
                                      int local_rank) {
  auto text = util::read_small_file(path, kMaxAssignmentBytes);
  if (!text) return text.status();
  auto env = parse_assignment(text.value(), generation, local_rank);
  if (!env) return util::Status(env.status().err(), path + ": " + env.status().context());
  return env;
}

}  // namespace elasticrun::control
