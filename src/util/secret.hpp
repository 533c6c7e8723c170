// The job secret: the bytes of a file that every agent of a job and its
// operator's elasticctl read, which gates the rendezvous store (the
// challenge and response of store/auth.hpp). Never on a command line,
// never in a log: only the file's path travels.
#pragma once

#include <optional>
#include <string>

namespace elasticrun::util {

// The variable naming the file when no flag does.
inline constexpr const char* kSecretFileEnv = "ELASTICRUN_SECRET_FILE";
// Fewer bytes than this is a password, not a secret.
inline constexpr size_t kMinSecretSize = 16;
// More than this is a wrong path (a log, an image), not a secret.
inline constexpr size_t kMaxSecretSize = 64 * 1024;

// The secret in `path`, without one trailing newline (as `echo` and
// Kubernetes' secret files leave it). Throws ConfigError naming `what` (the
// flag or the variable that named the file) and the path when the file
// cannot be read or holds fewer than kMinSecretSize bytes or more than
// kMaxSecretSize; never prints any of its bytes.
std::string read_secret_file(const std::string& what, const std::string& path);

// The job's secret: from `flag_path` when given (what: `flag`), else from
// the file $ELASTICRUN_SECRET_FILE names, else none. Throws as
// read_secret_file.
std::optional<std::string> job_secret(const std::optional<std::string>& flag_path,
                                      const std::string& flag);

}  // namespace elasticrun::util
