#include "supervisor/removals.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "supervisor/cgroup_raw.hpp"

namespace elasticrun::supervisor {

Removals::Removals(const std::vector<std::string>& paths) {
  for (const auto& path : paths) {
    const size_t slash = path.find_last_of('/');
    if (count_ == kMax || slash == std::string::npos || slash + 1 == path.size() ||
        path.size() - slash - 1 > NAME_MAX) {
      continue;
    }
    Entry& e = entries_[count_];
    const std::string parent = slash == 0 ? "/" : path.substr(0, slash);
    e.parent_fd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (e.parent_fd < 0) continue;
    e.tree_fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    std::memset(e.name, 0, sizeof e.name);
    std::memcpy(e.name, path.c_str() + slash + 1, path.size() - slash - 1);
    ++count_;
  }
}

Removals::~Removals() {
  for (size_t i = 0; i < count_; ++i) {
    if (entries_[i].parent_fd >= 0) ::close(entries_[i].parent_fd);
    if (entries_[i].tree_fd >= 0) ::close(entries_[i].tree_fd);
  }
}

void Removals::remove_all() const {
  for (size_t i = 0; i < count_; ++i) {
    const Entry& e = entries_[i];
    // ENOENT: the agent removed it.
    if (e.tree_fd >= 0) {
      remove_tree_below(e.tree_fd);
      ::unlinkat(e.parent_fd, e.name, AT_REMOVEDIR);
    } else {
      ::unlinkat(e.parent_fd, e.name, 0);
    }
  }
}

bool Removals::holds(int fd) const {
  for (size_t i = 0; i < count_; ++i) {
    if (fd == entries_[i].parent_fd || fd == entries_[i].tree_fd) return true;
  }
  return false;
}

}  // namespace elasticrun::supervisor
