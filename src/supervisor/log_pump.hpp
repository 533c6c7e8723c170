// Copies a worker's output from a pipe to a log file and to the console,
// prefixing each console line (torchrun's --tee).
//
// Whole lines only reach the console, written with one write(2) each, so
// lines of different workers never interleave mid-line (a raw stream, one a
// log rule reads that would otherwise have been inherited, passes its bytes
// through as they come instead). A worker that
// prints without a newline does not hold anything up: each pipe is an
// independent event on the loop, and a partial line longer than kMaxLine is
// emitted as it stands. Output of redirect-only streams never passes through
// the agent: the worker writes the file itself.
//
// Console lines end where torchrun's do: torchrun reads the log file in
// Python's universal-newlines mode, so "\r" and "\r\n" end a line as "\n"
// does, and a progress bar drawn with carriage returns (tqdm) shows one
// prefixed line per update instead of nothing until its final newline.
// Every console line ends with "\n". The file gets the bytes unchanged.
#pragma once

#include <uv.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace elasticrun::supervisor {

class LogPump {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;

  // The pump's handles live on loop; the loop must run their close
  // callbacks (after drain_and_close) before the pump is destroyed.
  explicit LogPump(uv_loop_t* loop) : loop_(loop) {}
  ~LogPump() = default;
  LogPump(const LogPump&) = delete;
  LogPump& operator=(const LogPump&) = delete;

  // Where lines that contain any of `needles` are copied as well, prefixed
  // as on the console (torchrun's --duplicate-stdout-filters: one file for
  // the tee'd streams of every rank).
  struct LineCopy {
    int fd = -1;
    std::vector<std::string> needles;
  };

  // Who else reads the lines (a health monitor's log rules): every line,
  // without its terminator, on the loop, tagged as its stream was.
  class LineObserver {
   public:
    virtual void on_line(int tag, std::string_view line) = 0;

   protected:
    ~LineObserver() = default;
  };

  // Where one stream's bytes go.
  struct Sink {
    int file_fd = -1;     // the log file: the bytes unchanged
    int console_fd = -1;  // the console: whole lines with `prefix` (tee), or
    bool raw = false;     //   with raw, the bytes unchanged, as if inherited
    std::string prefix;
    const LineCopy* copy = nullptr;    // lines that match also go there (must outlive the pump)
    LineObserver* observer = nullptr;  // must outlive the pump
    int tag = 0;
  };

  // Creates a pipe; returns the write end for the worker (close it after
  // spawning). Throws on failure.
  int add(Sink sink);
  // A tee'd stream: the bytes to file_fd (if >= 0), lines with `prefix` to
  // console_fd (if >= 0) and, when they match, to copy.
  int add(int file_fd, int console_fd, std::string prefix, const LineCopy* copy = nullptr) {
    return add(Sink{file_fd, console_fd, false, std::move(prefix), copy, nullptr, 0});
  }

  // Reads what is left without blocking, flushes partial lines and closes
  // every pipe. Called when the workers have exited, outside the loop's run;
  // descendants that still hold a write end do not delay it.
  void drain_and_close();

 private:
  struct Stream {
    uv_pipe_t pipe;
    LogPump* owner = nullptr;
    int read_fd = -1;
    Sink sink;
    std::string partial;
    bool after_cr = false;  // the last byte seen ended a line with "\r"
    bool closed = false;
  };
  void on_data(Stream& s, const char* data, size_t n);
  void flush_partial(Stream& s);
  // One whole line of the stream (no terminator): to the console with the
  // prefix (and to the copy when it matches), and to the observer.
  void emit(const Stream& s, std::string_view text);

  uv_loop_t* loop_;
  std::vector<std::unique_ptr<Stream>> streams_;
  char buffer_[64 * 1024];
};

}  // namespace elasticrun::supervisor
