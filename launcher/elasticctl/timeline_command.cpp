#include <cstdio>
#include <memory>

#include "commands.hpp"
#include "timeline/timeline.hpp"

namespace elasticrun::ctlcmd {
namespace {

int run_timeline(const timeline::TimelineOptions& o) {
  const timeline::RunHistory h = timeline::write_timeline(o);
  std::printf("elasticctl timeline: %s: %lld events over %.1f s", o.out.c_str(),
              static_cast<long long>(h.events), h.end_s);
  if (h.skipped > 0)
    std::printf(" (%lld lines that were not events skipped)", static_cast<long long>(h.skipped));
  std::printf("\n");
  return kExitOk;
}

}  // namespace

Command add_timeline(CLI::App& app) {
  auto o = std::make_shared<timeline::TimelineOptions>();
  auto* cmd = app.add_subcommand(
      "timeline",
      "Draw a run from its event logs (--event-log): world size, throughput, steps and every "
      "event over time, as a PNG or a self-contained HTML page");
  cmd->add_option("logs", o->logs, "Event logs (one or several nodes')")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", o->out, "The picture: FILE.png or FILE.html")->required();
  cmd->add_option("--title", o->title, "Its title (default: the run id, start time and length)");
  cmd->add_option("--width", o->width, "Its width in pixels")
      ->capture_default_str()
      ->check(CLI::Range(640, 20000));
  cmd->add_option("--list", o->list_lines,
                  "Events listed under the PNG's chart (the most important first)")
      ->capture_default_str()
      ->check(CLI::Range(0, 10000));
  return {cmd, [o] { return run_timeline(*o); }};
}

}  // namespace elasticrun::ctlcmd
