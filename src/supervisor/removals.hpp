// What the agent keeps in /dev/shm (the memory tier, the dataset cache, the
// control block), removed with system calls only where no destructor runs:
// in the death watch's child once the agent is gone, and in PID 1's signal
// handler as it exits (agent/pid1_signals.hpp). Each path's directory, and
// the path itself when it is a directory, is opened when the set is made;
// removing needs nothing else, and is async-signal-safe.
#pragma once

#include <limits.h>

#include <cstddef>
#include <string>
#include <vector>

namespace elasticrun::supervisor {

class Removals {
 public:
  static constexpr size_t kMax = 8;

  Removals() = default;
  // Absolute paths, each a directory (removed with all below it) or a file;
  // one that cannot be opened now, or beyond kMax, is left out.
  explicit Removals(const std::vector<std::string>& paths);
  ~Removals();
  Removals(const Removals&) = delete;
  Removals& operator=(const Removals&) = delete;

  // Removes each (one already gone is no error). Async-signal-safe.
  void remove_all() const;
  // Whether `fd` is one of the descriptors the set holds.
  bool holds(int fd) const;

 private:
  struct Entry {
    int parent_fd = -1;
    int tree_fd = -1;  // -1: a file
    char name[NAME_MAX + 1] = {};
  };
  Entry entries_[kMax];
  size_t count_ = 0;
};

}  // namespace elasticrun::supervisor
