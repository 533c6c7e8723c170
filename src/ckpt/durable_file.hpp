// The file operations a checkpoint is made of, and the only way src/ckpt
// touches the disk. A narrow interface so that a test can put a file system
// in its place that remembers what was fsynced and, at a simulated crash,
// forgets the rest (leveldb's fault-injection Env; test/unit/ckpt_crash_test.cpp).
// Every operation is a system call or more, so the virtual call on top of
// it costs nothing that shows.
//
// Nothing here is durable unless it says so: a new name in a directory
// survives a crash only after sync_dir of that directory, new data only
// after the fsync inside write_file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.hpp"

namespace elasticrun::ckpt {

enum class FileKind { kAbsent, kFile, kDirectory };

struct DirEntry {
  std::string name;
  bool directory = false;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // Creates (or truncates) `path`, writes the parts in order and fsyncs the
  // file: its data is durable, its name in the directory is not.
  virtual util::Status write_file(const std::filesystem::path& path,
                                  std::span<const std::span<const std::byte>> parts) = 0;
  // mkdir; EEXIST when something has the name already.
  virtual util::Status make_dir(const std::filesystem::path& path) = 0;
  // rename(2): atomically replaces `to`, a file or an empty directory.
  virtual util::Status rename(const std::filesystem::path& from,
                              const std::filesystem::path& to) = 0;
  // Atomically swaps two existing names (renameat2 RENAME_EXCHANGE).
  virtual util::Status exchange(const std::filesystem::path& a, const std::filesystem::path& b) = 0;
  // Removes `path` and everything under it; nothing there is not an error.
  virtual util::Status remove_all(const std::filesystem::path& path) = 0;
  // fsync of a directory: the names created, renamed and removed in it so
  // far survive a crash.
  virtual util::Status sync_dir(const std::filesystem::path& dir) = 0;

  virtual util::Result<FileKind> kind(const std::filesystem::path& path) = 0;
  virtual util::Result<std::vector<DirEntry>> list(const std::filesystem::path& dir) = 0;
  // Reads `size` bytes at `offset`; EPROTO when the file is shorter.
  virtual util::Result<std::vector<std::byte>> read_at(const std::filesystem::path& path,
                                                       std::uint64_t offset,
                                                       std::uint64_t size) = 0;
  virtual util::Result<std::string> read_text(const std::filesystem::path& path) = 0;
};

// The file system checkpoints use: the machine's, unless a test substituted
// another.
FileSystem& file_system();

// Substitutes `fs` for the machine's file system until destroyed. For tests;
// not while a save or a read is running on another thread.
class ScopedFileSystem {
 public:
  explicit ScopedFileSystem(FileSystem& fs);
  ~ScopedFileSystem();
  ScopedFileSystem(const ScopedFileSystem&) = delete;
  ScopedFileSystem& operator=(const ScopedFileSystem&) = delete;

 private:
  FileSystem* previous_;
};

// Durable operations made of the ones above, written once so that the
// fault-injection test checks them too.

// Writes `text` to path.tmp, renames it over `path`, syncs the directory:
// after a crash `path` holds the old content or the new, never a mix, and
// once this returns, the new.
util::Status replace_file(FileSystem& fs, const std::filesystem::path& path, std::string_view text);

// Creates `dir` and any missing parents, syncing the directory above each
// one it creates, so that a directory this made is still there after a
// crash once this returns.
util::Status make_dirs(FileSystem& fs, const std::filesystem::path& dir);

}  // namespace elasticrun::ckpt
