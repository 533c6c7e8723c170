// The hosts a job may run on, as a host discovery script lists them
// (--host-discovery-script; horovodrun's contract): one `host[:slots]` a
// line. The same text is the store's record of the list (keys::kAllowedHosts),
// so the format is made and parsed here and nowhere else.
//
// A host is allowed when it is listed; an agent on it is admitted to rounds
// when its --nproc-per-node fits the host's slots (a host listed without
// slots takes any). Names match exactly, or by their first label, so that
// `node7` in the list matches an agent whose host is `node7.cluster.local`
// and the other way round. Addresses match only exactly.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace elasticrun::rendezvous {

struct ListedHost {
  std::string host;
  std::optional<int> slots;
  bool operator==(const ListedHost&) const = default;
};

struct HostList {
  std::vector<ListedHost> hosts;  // in the script's order, each host once

  // Whether an agent on `host` with `local_world_size` workers may join.
  bool admits(const std::string& host, int local_world_size) const;
  // The entry that `host` matches, if any.
  const ListedHost* find(const std::string& host) const;

  // "host[:slots]" lines, each ended by a newline.
  std::string serialize() const;
  // A script's output or the store's record. Blank lines and lines that
  // start with '#' are skipped, spaces around a line are trimmed, a host
  // listed twice keeps its first slots. Throws ConfigError naming the line
  // for anything else (a space inside, an empty host, slots that are not a
  // positive number): a list with one bad line is not used at all.
  static HostList parse(const std::string& text);

  bool operator==(const HostList&) const = default;
};

// Where the closer of a round and the leader of a running one learn the
// allowed hosts (agent/host_discovery.hpp runs the script). Thread-safe:
// the agent's main thread and its round watch both ask.
class HostSource {
 public:
  // The list in force; nullopt while the source has no good answer yet
  // (its first run failed, or is still going after its timeout). Never
  // blocks longer than the source's own timeout.
  virtual std::optional<HostList> current() = 0;
  // How often asking again may give a different answer.
  virtual std::chrono::milliseconds interval() const = 0;

 protected:
  ~HostSource() = default;
};

}  // namespace elasticrun::rendezvous
