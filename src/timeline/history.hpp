// A run's history as `elasticctl timeline` draws it, read from one or more
// event logs (docs/events.md): the world size over time, each node's steps
// and throughput, and every other event as a mark. Several logs (a job's
// nodes) merge by wall-clock time; a round's start and end, which every
// member records, count once.
//
// The reader is lenient as the schema asks: a line that is not an event is
// skipped and counted, a type or field it does not know is kept as a mark
// with the type as its label.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace elasticrun::timeline {

struct Point {
  double t = 0;  // seconds since the history's first event
  double v = 0;
};

// One agent's own series (its progress lines).
struct NodeSeries {
  std::string node;  // the agent's node id
  std::string host;
  std::vector<Point> step;        // the highest local rank's step
  std::vector<Point> throughput;  // samples/s when the ranks report them, else steps/s
};

// What a mark is about; the chart gives each kind a colour and a lane.
enum class MarkKind {
  kRound,     // a round's end (its kind: scale_up, restart, ...)
  kFault,     // a health fault, a failed worker, a lost or excluded node
  kDecision,  // the policy's and the restart policy's decisions, operator requests
  kSection,   // a checkpoint save or another marked section; a rescue
  kNode,      // an agent starting, ending, leaving; spares waiting
};

struct Mark {
  double t = 0;
  MarkKind kind = MarkKind::kNode;
  std::string type;    // the event's type
  std::string host;    // the agent that recorded it
  std::string label;   // a short line: "scale_up -> 3 nodes", "Hang rank 2"
  std::string detail;  // the rest: the reason text, the fault's message
  std::string time;    // wall clock, as the log has it
  bool listed = true;  // worth a line in the PNG's list (a spare waiting is not)
  // A round's end: its kind (scale_up, restart, ...). Sections and rescues:
  // the section's name, or "rescue saved"; every rank of a checkpoint save
  // records one, so those of one group ending within a second make one mark.
  std::string group;
  double seconds = 0;  // the longest of them
  int count = 1;       // how many ranks' events the mark stands for
};

struct RunHistory {
  std::string run_id;    // from the first agent_start, when there is one
  int64_t start_ms = 0;  // wall clock of the first event
  double end_s = 0;      // the last event, in seconds from the first
  // The job's world size, a step function: each point holds until the next;
  // 0 while no round runs (between a round's end and the next one's start).
  std::vector<Point> world_size;
  bool samples = false;  // throughput is samples/s (else steps/s)
  std::vector<NodeSeries> nodes;
  std::vector<Mark> marks;  // in time order
  int64_t events = 0;       // lines read as events
  int64_t skipped = 0;      // lines that were not (a torn last line, garbage)
};

// Reads the logs; throws Error naming a file that cannot be read, or when
// no file holds a single event.
RunHistory read_history(const std::vector<std::string>& paths);

}  // namespace elasticrun::timeline
