#include "agent/worker_streams.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "elasticrun/errors.hpp"

namespace elasticrun::agent {
namespace {

namespace fs = std::filesystem;

// A file the agent or a worker writes a stream to (torchrun truncates).
int create_log(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot create log file " + path + ": " + std::strerror(errno));
  return fd;
}

}  // namespace

WorkerStreams::~WorkerStreams() {
  for (int fd : parent_fds_) ::close(fd);
}

void WorkerStreams::open_filtered_copies(const AgentConfig& config, const fs::path& attempt_dir) {
  auto open_copy = [&](supervisor::LogPump::LineCopy& copy, const std::vector<std::string>& needles,
                       const char* name) -> const supervisor::LogPump::LineCopy* {
    if (needles.empty()) return nullptr;
    copy.fd = create_log((attempt_dir / name).string());
    parent_fds_.push_back(copy.fd);
    copy.needles = needles;
    return &copy;
  };
  out_copy_ = open_copy(stdout_copy_, config.duplicate_stdout_filters, "filtered_stdout.log");
  err_copy_ = open_copy(stderr_copy_, config.duplicate_stderr_filters, "filtered_stderr.log");
}

void WorkerStreams::wire(supervisor::SpawnSpec& spec, const RankPlan& plan, size_t local_rank,
                         std::vector<int>& child_fds) {
  spec.stdout_fd =
      stream_fd(plan.out, STDOUT_FILENO, plan.prefix, out_copy_, 2 * local_rank, child_fds);
  spec.stderr_fd =
      stream_fd(plan.err, STDERR_FILENO, plan.prefix, err_copy_, 2 * local_rank + 1, child_fds);
}

// The descriptor a worker gets for one stream, per the plan; -1 inherits
// the agent's.
int WorkerStreams::stream_fd(const StreamPlan& p, int console, const std::string& prefix,
                             const supervisor::LogPump::LineCopy* copy, size_t tag,
                             std::vector<int>& child_fds) {
  if (p.observed && !p.tee) {
    // Where the bytes would have gone, unchanged; and the lines to the rules.
    supervisor::LogPump::Sink sink;
    if (!p.file.empty()) {
      sink.file_fd = create_log(p.file);
      parent_fds_.push_back(sink.file_fd);
    } else if (!p.discard) {
      sink.console_fd = console;
      sink.raw = true;
    }
    sink.observer = observer_;
    sink.tag = static_cast<int>(tag);
    int pipe_w = pump_.add(std::move(sink));
    child_fds.push_back(pipe_w);
    return pipe_w;
  }
  if (p.discard) {
    int fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    child_fds.push_back(fd);
    return fd;
  }
  if (p.file.empty()) return -1;
  int file = create_log(p.file);
  if (!p.tee) {
    child_fds.push_back(file);
    return file;
  }
  parent_fds_.push_back(file);  // the pump writes it
  int pipe_w = pump_.add({file, console, false, prefix, copy, p.observed ? observer_ : nullptr,
                          static_cast<int>(tag)});
  child_fds.push_back(pipe_w);
  return pipe_w;
}

}  // namespace elasticrun::agent
