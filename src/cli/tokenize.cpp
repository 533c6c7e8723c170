#include "cli/tokenize.hpp"

#include <string_view>

#include "cli/parse.hpp"
#include "elasticrun/errors.hpp"
#include "util/strings.hpp"

namespace elasticrun::cli {

namespace {

[[noreturn]] void fail(const std::string& message) {
  throw ConfigError(message);
}

// Matches argparse's _negative_number_matcher: '^-\d+$|^-\d*\.\d+$'.
bool is_negative_number(std::string_view s) {
  if (s.size() < 2 || s[0] != '-') return false;
  s.remove_prefix(1);
  const auto dot = s.find('.');
  const auto digits = [](std::string_view d) {
    return d.find_first_not_of("0123456789") == std::string_view::npos;
  };
  if (dot == std::string_view::npos) return digits(s);
  return digits(s.substr(0, dot)) && dot + 1 < s.size() && digits(s.substr(dot + 1));
}

const FlagSpec* find_exact(std::string_view name) {
  for (const auto& f : flag_table()) {
    for (const auto& s : f.spellings()) {
      if (s == name) return &f;
    }
  }
  return nullptr;
}

// Flags with a long spelling that starts with `prefix` (argparse's allow_abbrev).
// Unlike Python 3.11, the two spellings of one flag are not ambiguous.
std::vector<const FlagSpec*> find_prefix(std::string_view prefix) {
  std::vector<const FlagSpec*> out;
  if (prefix.size() <= 2) return out;  // "--" alone abbreviates nothing
  for (const auto& f : flag_table()) {
    for (const auto& s : f.spellings()) {
      if (s.starts_with("--") && s.starts_with(prefix)) {
        out.push_back(&f);
        break;
      }
    }
  }
  return out;
}

// argparse's _parse_optional: does `tok` name a flag (known or not), rather than a value?
bool looks_like_flag(std::string_view tok) {
  if (tok.size() < 2 || tok[0] != '-') return false;
  if (find_exact(tok)) return true;
  const auto eq = tok.find('=');
  if (eq != std::string_view::npos && find_exact(tok.substr(0, eq))) return true;
  if (tok.starts_with("--") && !find_prefix(tok.substr(0, eq)).empty()) return true;
  if (tok[1] != '-' && find_exact(tok.substr(0, 2))) return true;
  if (is_negative_number(tok)) return false;
  return tok.find(' ') == std::string_view::npos;
}

class Tokenizer {
 public:
  explicit Tokenizer(const std::vector<std::string>& args) : args_(args) {}

  Tokens run() {
    while (i_ < args_.size()) {
      const std::string& tok = args_[i_++];
      if (tok == "--") {
        // Everything after the first "--" is positional: the script, then its args.
        if (i_ < args_.size()) take_script(args_[i_++], false);
        break;
      }
      if (!looks_like_flag(tok)) {
        take_script(tok, true);
        break;
      }
      if (tok.starts_with("--")) {
        long_flag(tok);
      } else {
        short_flags(tok);
      }
    }
    return std::move(tokens_);
  }

 private:
  void take_script(const std::string& script, bool may_drop_dashes) {
    tokens_.script = script;
    // argparse's script positional swallows one "--" right after it.
    if (may_drop_dashes && i_ < args_.size() && args_[i_] == "--") ++i_;
    tokens_.script_args.assign(args_.begin() + static_cast<long>(i_), args_.end());
    i_ = args_.size();
  }

  void long_flag(const std::string& tok) {
    const auto eq = tok.find('=');
    const std::string name = tok.substr(0, eq);
    std::optional<std::string> explicit_value;
    if (eq != std::string::npos) explicit_value = tok.substr(eq + 1);
    const FlagSpec* spec = find_exact(name);
    if (!spec) {
      const auto matches = find_prefix(name);
      if (matches.empty()) fail("unrecognized option " + util::quote(tok));
      if (matches.size() > 1) {
        std::string names;
        for (const auto* m : matches)
          names += (names.empty() ? "" : ", ") + std::string(m->long_name);
        fail("ambiguous option " + util::quote(name) + " could match " + names);
      }
      spec = matches.front();
    }
    apply(*spec, explicit_value);
  }

  // "-m", "-r3", "-r=3", "-mr3", "-mt" VALUE.
  void short_flags(const std::string& tok) {
    std::string_view rest = std::string_view(tok).substr(1);
    bool first = true;
    while (!rest.empty()) {
      const FlagSpec* spec = find_exact(std::string("-") + rest[0]);
      if (!spec) {
        fail(first ? "unrecognized option " + util::quote(tok)
                   : "unrecognized option -" + std::string(1, rest[0]) + " in " + util::quote(tok));
      }
      rest.remove_prefix(1);
      if (spec->takes_value) {
        if (rest.empty()) {
          apply(*spec, std::nullopt);
        } else {
          if (first && rest[0] == '=') rest.remove_prefix(1);
          apply(*spec, std::string(rest));
        }
        return;
      }
      apply(*spec, std::nullopt);
      first = false;
    }
  }

  void apply(const FlagSpec& spec, std::optional<std::string> value) {
    const std::string name(spec.long_name);
    if (!spec.takes_value) {
      if (value) fail(name + " takes no value (got " + util::quote(*value) + ")");
      value = "1";
    } else if (!value) {
      if (i_ >= args_.size() || args_[i_] == "--" || looks_like_flag(args_[i_])) {
        fail(name + " expects a value: " + std::string(spec.metavar));
      }
      value = args_[i_++];
    }
    // Actions that end parsing at once, as argparse's do.
    if (spec.id == Flag::kHelp) throw HelpRequested(help_text());
    if (spec.id == Flag::kPrintCompletion) throw HelpRequested(completion_script(*value));
    tokens_.given[static_cast<size_t>(spec.id)] = Raw{*value, name};
  }

  const std::vector<std::string>& args_;
  size_t i_ = 0;
  Tokens tokens_;
};

}  // namespace

Tokens tokenize(const std::vector<std::string>& args) {
  return Tokenizer(args).run();
}

}  // namespace elasticrun::cli
