// The exceptions that elasticrun's orchestration code and public API throw.
//
// Low-level code (src/util) returns util::Result; the layers above turn a
// failed Result into one of these, adding what a user needs to act on it
// (endpoint, key, rank). Each executable's main catches Error once and maps
// the kind to an exit code. See docs/ARCHITECTURE.md, "Errors".
#pragma once

#include <stdexcept>
#include <string>

namespace elasticrun {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad flags, bad config files, values out of range. Exit code 2.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A peer could not be reached, or the connection broke.
class NetworkError : public Error {
 public:
  using Error::Error;
};

// A deadline passed. The message names what was awaited (endpoint, keys).
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// The store answered, but not as the protocol allows (or refused the request).
class StoreError : public Error {
 public:
  using Error::Error;
};

}  // namespace elasticrun
