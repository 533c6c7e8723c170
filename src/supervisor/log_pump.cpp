#include "supervisor/log_pump.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "elasticrun/errors.hpp"

namespace elasticrun::supervisor {
namespace {

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;  // a closed console or full disk must not stop supervision
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

int LogPump::add(Sink sink) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(std::string("log pipe: ") + std::strerror(errno));
  auto s = std::make_unique<Stream>();
  s->owner = this;
  s->read_fd = fds[0];
  s->sink = std::move(sink);
  uv_pipe_init(loop_, &s->pipe, 0);
  s->pipe.data = s.get();
  uv_pipe_open(&s->pipe, fds[0]);
  uv_read_start(
      reinterpret_cast<uv_stream_t*>(&s->pipe),
      [](uv_handle_t* h, size_t, uv_buf_t* buf) {
        auto* st = static_cast<Stream*>(h->data);
        *buf = uv_buf_init(st->owner->buffer_, sizeof(st->owner->buffer_));
      },
      [](uv_stream_t* h, ssize_t n, const uv_buf_t* buf) {
        auto* st = static_cast<Stream*>(h->data);
        if (n > 0) {
          st->owner->on_data(*st, buf->base, static_cast<size_t>(n));
        } else if (n < 0) {
          st->owner->flush_partial(*st);
          uv_read_stop(h);
        }
      });
  streams_.push_back(std::move(s));
  return fds[1];
}

void LogPump::on_data(Stream& s, const char* data, size_t n) {
  const Sink& k = s.sink;
  if (k.file_fd >= 0) write_all(k.file_fd, data, n);
  if (k.raw && k.console_fd >= 0) write_all(k.console_fd, data, n);
  const bool lines_to_console = !k.raw && k.console_fd >= 0;
  if (!lines_to_console && k.observer == nullptr) return;
  size_t start = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool crlf_tail = s.after_cr && data[i] == '\n';
    s.after_cr = false;
    if (crlf_tail) {
      start = i + 1;  // the "\r" before it already ended the line
      continue;
    }
    if (data[i] != '\n' && data[i] != '\r') continue;
    if (s.partial.empty()) {
      emit(s, std::string_view(data + start, i - start));
    } else {
      s.partial.append(data + start, i - start);
      emit(s, s.partial);
      s.partial.clear();
    }
    start = i + 1;
    s.after_cr = data[i] == '\r';
  }
  s.partial.append(data + start, n - start);
  if (s.partial.size() >= kMaxLine) flush_partial(s);
}

void LogPump::flush_partial(Stream& s) {
  if (!s.partial.empty()) emit(s, s.partial);
  s.partial.clear();
}

void LogPump::emit(const Stream& s, std::string_view text) {
  const Sink& k = s.sink;
  if (k.observer) k.observer->on_line(k.tag, text);
  if (k.raw || k.console_fd < 0) return;
  // One write per line, prefix included: the kernel keeps it whole.
  std::string line = k.prefix;
  line.append(text);
  line += '\n';
  write_all(k.console_fd, line.data(), line.size());
  if (k.copy == nullptr || k.copy->fd < 0) return;
  // The worker's text is matched, not the prefix.
  for (const auto& needle : k.copy->needles) {
    if (text.find(needle) != std::string_view::npos) {
      write_all(k.copy->fd, line.data(), line.size());
      return;
    }
  }
}

void LogPump::drain_and_close() {
  for (auto& s : streams_) {
    if (s->closed) continue;
    // The loop may not have seen the last bytes yet: read them directly.
    int flags = ::fcntl(s->read_fd, F_GETFL);
    ::fcntl(s->read_fd, F_SETFL, flags | O_NONBLOCK);
    for (;;) {
      ssize_t n = ::read(s->read_fd, buffer_, sizeof(buffer_));
      if (n > 0) {
        on_data(*s, buffer_, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      break;
    }
    flush_partial(*s);
    s->closed = true;
    uv_close(reinterpret_cast<uv_handle_t*>(&s->pipe), nullptr);
  }
}

}  // namespace elasticrun::supervisor
