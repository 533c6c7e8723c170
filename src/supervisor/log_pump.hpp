// Copies a worker's output from a pipe to a log file and to the console,
// prefixing each console line (torchrun's --tee).
//
// Whole lines only reach the console, written with one write(2) each, so
// lines of different workers never interleave mid-line. A worker that
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

  // Creates a pipe; returns the write end for the worker (close it after
  // spawning). Bytes read are appended to file_fd (if >= 0) and, line by
  // line with `prefix`, written to console_fd (if >= 0) and, when they
  // match, to copy (if given; it must outlive the pump). Throws on failure.
  int add(int file_fd, int console_fd, std::string prefix, const LineCopy* copy = nullptr);

  // Reads what is left without blocking, flushes partial lines and closes
  // every pipe. Called when the workers have exited, outside the loop's run;
  // descendants that still hold a write end do not delay it.
  void drain_and_close();

 private:
  struct Stream {
    uv_pipe_t pipe;
    LogPump* owner = nullptr;
    int read_fd = -1;
    int file_fd = -1;
    int console_fd = -1;
    std::string prefix;
    const LineCopy* copy = nullptr;
    std::string partial;
    bool after_cr = false;  // the last byte seen ended a line with "\r"
    bool closed = false;
  };
  void on_data(Stream& s, const char* data, size_t n);
  void flush_partial(Stream& s);
  // Writes `line`, which starts with the stream's prefix, to the console
  // and, when the text after the prefix matches, to the stream's copy.
  void emit(const Stream& s, const std::string& line);

  uv_loop_t* loop_;
  std::vector<std::unique_ptr<Stream>> streams_;
  char buffer_[64 * 1024];
};

}  // namespace elasticrun::supervisor
