#include "util/read_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace elasticrun::util {

Result<std::string> read_small_file(const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status(errno, "open " + path);
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return Status(err, "read " + path);
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > max_bytes) {
      ::close(fd);
      return Status(EFBIG, path + " is over " + std::to_string(max_bytes) + " bytes");
    }
  }
  ::close(fd);
  return text;
}

}  // namespace elasticrun::util
