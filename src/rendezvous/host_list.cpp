#include "rendezvous/host_list.hpp"

#include <charconv>
#include <sstream>

#include "elasticrun/errors.hpp"
#include "util/strings.hpp"

namespace elasticrun::rendezvous {
namespace {

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::string_view first_label(std::string_view name) {
  return name.substr(0, name.find('.'));
}

// A dotted quad or anything with a ':' (IPv6) is an address: its "labels"
// mean nothing.
bool is_address(std::string_view name) {
  if (name.find(':') != std::string_view::npos) return true;
  return !name.empty() && name.find_first_not_of("0123456789.") == std::string_view::npos;
}

bool same_host(std::string_view listed, std::string_view host) {
  if (listed == host) return true;
  if (is_address(listed) || is_address(host)) return false;
  // One is the other's first label: "node7" and "node7.cluster.local".
  const bool listed_short = listed.find('.') == std::string_view::npos;
  const bool host_short = host.find('.') == std::string_view::npos;
  if (listed_short == host_short) return false;
  return first_label(listed) == first_label(host);
}

}  // namespace

const ListedHost* HostList::find(const std::string& host) const {
  for (const auto& h : hosts) {
    if (same_host(h.host, host)) return &h;
  }
  return nullptr;
}

bool HostList::admits(const std::string& host, int local_world_size) const {
  const ListedHost* h = find(host);
  return h && (!h->slots || *h->slots >= local_world_size);
}

std::string HostList::serialize() const {
  std::string out;
  for (const auto& h : hosts) {
    const bool v6 = h.host.find(':') != std::string::npos;
    out += v6 ? "[" + h.host + "]" : h.host;
    if (h.slots) out += ":" + std::to_string(*h.slots);
    out += '\n';
  }
  return out;
}

HostList HostList::parse(const std::string& text) {
  HostList list;
  std::istringstream in(text);
  std::string raw;
  for (int n = 1; std::getline(in, raw); ++n) {
    const std::string_view line = trim(raw);
    if (line.empty() || line.front() == '#') continue;
    auto bad = [&](const std::string& why) {
      throw ConfigError("host list line " + std::to_string(n) + " " + util::quote(line) + ": " +
                        why + " (expected host[:slots])");
    };
    if (line.find_first_of(" \t") != std::string_view::npos) bad("a space inside");
    // host:slots, where an IPv6 address is written in brackets: [::1]:8.
    std::string_view host = line;
    std::string_view slots;
    const size_t colon = line.rfind(':');
    if (line.front() == '[') {
      const size_t close = line.find(']');
      if (close == std::string_view::npos) bad("an unclosed '['");
      host = line.substr(1, close - 1);
      if (close + 1 < line.size()) {
        if (line[close + 1] != ':') bad("text after ']'");
        slots = line.substr(close + 2);
        if (slots.empty()) bad("no slots after ':'");
      }
    } else if (colon != std::string_view::npos) {
      if (line.find(':') != colon) bad("an IPv6 address must be written as [address]");
      host = line.substr(0, colon);
      slots = line.substr(colon + 1);
      if (slots.empty()) bad("no slots after ':'");
    }
    if (host.empty()) bad("no host");
    ListedHost h{std::string(host), std::nullopt};
    if (!slots.empty()) {
      int v = 0;
      auto [p, ec] = std::from_chars(slots.data(), slots.data() + slots.size(), v);
      if (ec != std::errc() || p != slots.data() + slots.size() || v < 1) {
        bad("slots must be a positive number");
      }
      h.slots = v;
    }
    bool seen = false;
    for (const auto& e : list.hosts) seen = seen || e.host == h.host;
    if (!seen) list.hosts.push_back(std::move(h));
  }
  return list;
}

}  // namespace elasticrun::rendezvous
