// control_tool COMMAND PATH ...: plays the agent (or a worker) on a control
// block file through control::ControlBlock, so the integration suite can
// check the Python SDK against the C++ side byte for byte:
//
//   create PATH N                    a block with N slots (the file must not exist)
//   publish PATH [--gen G] [--stop S] [--kind K] [--world W] [--deadline MS] [--reason R]
//                                    prints {"event_seq": n}; K is a name (scale_down) or number
//   set-stop PATH S                  the current event's stop step
//   reset PATH G                     a new generation: no event, empty slots
//   read-event PATH                  the event as JSON
//   read-slot PATH I                 slot I as JSON (NaN metrics as null)
//   write-slot PATH I --step S [--loss L] [--tps T] [--flags F] [--pid P]
//   max-step PATH                    prints {"max_step": n}
//   attached PATH [I]                prints {"attached": bool}: slot I, or any slot
//   unlink PATH
//
// Exit status: 0 done, 1 the block could not be created or opened (message
// on stderr), 2 bad arguments.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "control/control_block.hpp"

namespace {

using elasticrun::control::ControlBlock;
using elasticrun::control::EventKind;
using nlohmann::json;

json number_or_null(double x) {
  return std::isnan(x) ? json(nullptr) : json(x);
}

// A reason read from a file nobody validated may be invalid UTF-8.
void print(const json& j) {
  std::printf("%s\n", j.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
}

ControlBlock open_or_exit(const std::string& path) {
  auto r = ControlBlock::open(path);
  if (!r) {
    std::fprintf(stderr, "control_tool: %s\n", r.status().message().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

EventKind parse_kind(const std::string& s) {
  static const std::map<std::string, EventKind> names = {{"none", EventKind::none},
                                                         {"scale_up", EventKind::scale_up},
                                                         {"scale_down", EventKind::scale_down},
                                                         {"replace", EventKind::replace},
                                                         {"shutdown", EventKind::shutdown},
                                                         {"restart", EventKind::restart}};
  if (auto it = names.find(s); it != names.end()) return it->second;
  // A number, even one outside the enum: readers must cope with it.
  return static_cast<EventKind>(std::stoul(s));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"control_tool: read and write an elasticrun control block"};
  app.require_subcommand(1);
  std::string path;
  int slots = 0, index = -1;
  uint64_t generation = 0, deadline = 0;
  int64_t stop = -1, step = -1;
  int32_t world = -1;
  std::string kind = "none", reason;
  double loss = NAN, tps = NAN;
  uint32_t flags = 0, pid = 0, compute_us = 0, section_limit = 0;
  std::string section;

  auto* create = app.add_subcommand("create", "create a block");
  create->add_option("path", path)->required();
  create->add_option("slots", slots)->required();

  auto* publish = app.add_subcommand("publish", "publish an event");
  publish->add_option("path", path)->required();
  publish->add_option("--gen", generation);
  publish->add_option("--stop", stop);
  publish->add_option("--kind", kind);
  publish->add_option("--world", world);
  publish->add_option("--deadline", deadline);
  publish->add_option("--reason", reason);

  auto* set_stop = app.add_subcommand("set-stop", "set the stop step");
  set_stop->add_option("path", path)->required();
  set_stop->add_option("step", stop)->required();

  auto* reset = app.add_subcommand("reset", "start a new generation");
  reset->add_option("path", path)->required();
  reset->add_option("generation", generation)->required();

  auto* read_event = app.add_subcommand("read-event", "print the event");
  read_event->add_option("path", path)->required();

  auto* read_slot = app.add_subcommand("read-slot", "print a slot");
  read_slot->add_option("path", path)->required();
  read_slot->add_option("index", index)->required();

  auto* write_slot = app.add_subcommand("write-slot", "write a slot");
  write_slot->add_option("path", path)->required();
  write_slot->add_option("index", index)->required();
  write_slot->add_option("--step", step)->required();
  write_slot->add_option("--loss", loss);
  write_slot->add_option("--tps", tps);
  write_slot->add_option("--flags", flags);
  write_slot->add_option("--pid", pid);
  write_slot->add_option("--compute-us", compute_us);
  write_slot->add_option("--section", section);
  write_slot->add_option("--section-limit", section_limit);

  auto* max_step = app.add_subcommand("max-step", "print the highest published step");
  max_step->add_option("path", path)->required();

  auto* attached = app.add_subcommand("attached", "print whether slot I (or any) is attached");
  attached->add_option("path", path)->required();
  attached->add_option("index", index);

  auto* unlink = app.add_subcommand("unlink", "remove the file");
  unlink->add_option("path", path)->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  if (*create) {
    auto r = ControlBlock::create(path, slots);
    if (!r) {
      std::fprintf(stderr, "control_tool: %s\n", r.status().message().c_str());
      return 1;
    }
    print({{"path", path}, {"num_slots", r.value().num_slots()}});
    return 0;
  }

  ControlBlock cb = open_or_exit(path);
  // Indices are the caller's to get right; the block aborts on a bad one.
  if (index >= cb.num_slots()) {
    std::fprintf(stderr, "control_tool: slot %d of %d\n", index, cb.num_slots());
    return 2;
  }
  if (*publish) {
    ControlBlock::Event e;
    e.generation = generation;
    e.stop_step = stop;
    try {
      e.kind = parse_kind(kind);
    } catch (const std::exception&) {
      std::fprintf(stderr, "control_tool: unknown event kind %s\n", kind.c_str());
      return 2;
    }
    e.next_world_size = world;
    e.deadline_unix_ms = deadline;
    e.reason = reason;
    print({{"event_seq", cb.publish_event(e)}});
  } else if (*set_stop) {
    cb.set_stop_step(stop);
  } else if (*reset) {
    cb.reset(generation);
  } else if (*read_event) {
    auto e = cb.read_event();
    print({{"generation", e.generation},
           {"event_seq", e.event_seq},
           {"stop_step", e.stop_step},
           {"kind", elasticrun::control::to_string(e.kind)},
           {"kind_value", static_cast<uint32_t>(e.kind)},
           {"next_world_size", e.next_world_size},
           {"deadline_unix_ms", e.deadline_unix_ms},
           {"reason", e.reason}});
  } else if (*read_slot) {
    auto s = cb.read_slot(index);
    print({{"step", s.step},
           {"timestamp_ns", s.timestamp_ns},
           {"loss", number_or_null(s.loss)},
           {"tokens_per_s", number_or_null(s.tokens_per_s)},
           {"flags", s.flags},
           {"pid", s.pid},
           {"compute_us", s.compute_us},
           {"section_limit_s", s.section_limit_s},
           {"section", s.section}});
  } else if (*write_slot) {
    ControlBlock::SlotView v;
    v.step = step;
    v.timestamp_ns = ControlBlock::now_realtime_ns();
    v.loss = loss;
    v.tokens_per_s = tps;
    v.flags = flags;
    v.pid = pid;
    v.compute_us = compute_us;
    v.section = section;
    v.section_limit_s = section_limit;
    cb.write_slot(index, v);
  } else if (*max_step) {
    print({{"max_step", cb.max_step()}});
  } else if (*attached) {
    print({{"attached", index >= 0 ? cb.attached(index) : cb.any_attached()}});
  } else if (*unlink) {
    if (auto st = cb.unlink(); !st) {
      std::fprintf(stderr, "control_tool: %s\n", st.message().c_str());
      return 1;
    }
  }
  return 0;
}
