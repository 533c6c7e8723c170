#include "ctl/watch.hpp"

#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <string>

#include "ctl/job_status.hpp"
#include "ctl/watch_model.hpp"
#include "ctl/watch_view.hpp"
#include "elasticrun/errors.hpp"

namespace elasticrun::ctl {
namespace {

void write_all(const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(STDOUT_FILENO, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the terminal is gone: nothing to show it on
    done += static_cast<size_t>(n);
  }
}

ViewSize terminal_size() {
  struct winsize w {};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0 && w.ws_row > 0) {
    return {w.ws_col, w.ws_row};
  }
  return {};
}

// The alternate screen with the cursor hidden, for as long as it lives.
class Screen {
 public:
  explicit Screen(bool tty) : tty_(tty) {
    if (tty_) write_all("\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J");
  }
  ~Screen() {
    if (tty_) write_all("\x1b[?25h\x1b[?1049l");
  }
  Screen(const Screen&) = delete;
  Screen& operator=(const Screen&) = delete;

  void draw(const std::vector<std::string>& lines) {
    std::string frame;
    if (tty_) {
      // Home, then every line over the last frame's, clearing what is left of it.
      frame = "\x1b[H";
      for (size_t i = 0; i < lines.size(); ++i) {
        frame += lines[i] + "\x1b[K";
        if (i + 1 < lines.size()) frame += "\r\n";
      }
      frame += "\x1b[J";
    } else {
      for (const auto& l : lines) frame += l + "\n";
      frame += "\n";
    }
    write_all(frame);
  }

 private:
  bool tty_;
};

// The signals the watch waits for, blocked so that sigtimedwait takes them.
sigset_t watched_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGWINCH}) sigaddset(&set, s);
  return set;
}

}  // namespace

int run_watch(const WatchOptions& o) {
  const sigset_t signals = watched_signals();
  sigset_t before;
  pthread_sigmask(SIG_BLOCK, &signals, &before);

  // The first look outside the screen: an error goes to a normal terminal.
  std::optional<StoreClient> client = connect_job(o.job, o.connect_timeout, o.call_timeout);
  JobStatus status = read_status(*client, o.job);
  WatchModel model;
  model.update(status, std::chrono::system_clock::now());

  const bool tty = ::isatty(STDOUT_FILENO) == 1;
  Screen screen(tty && !o.once);
  ViewOptions view;
  view.total_steps = o.total_steps;
  view.interval_s = std::chrono::duration<double>(o.interval).count();
  for (;;) {
    view.size = tty ? terminal_size() : ViewSize{80, 40};
    view.fill = tty && !o.once;
    screen.draw(render_watch(status, model, view, std::chrono::system_clock::now()));
    if (o.once) break;

    // Wait out the interval, or less for a signal.
    bool quit = false, redraw_only = false;
    const auto secs = std::chrono::duration_cast<std::chrono::seconds>(o.interval);
    const struct timespec wait {
      static_cast<time_t>(secs.count()),
          static_cast<long>(std::chrono::nanoseconds(o.interval - secs).count())
    };
    siginfo_t info;
    const int sig = sigtimedwait(&signals, &info, &wait);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) quit = true;
    if (sig == SIGWINCH) redraw_only = true;
    if (quit) break;
    if (redraw_only) continue;

    const auto now = std::chrono::system_clock::now();
    try {
      if (!client) client = connect_job(o.job, o.call_timeout, o.call_timeout);
      status = read_status(*client, o.job);
      model.update(status, now);
    } catch (const Error& e) {
      client.reset();
      model.unreachable(e.what(), now);
    }
  }
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  return 0;
}

}  // namespace elasticrun::ctl
