#include "health/progress_monitor.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace elasticrun::health {
namespace {

std::string seconds(Millis d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

std::string rank_name(int lr) {
  return "local rank " + std::to_string(lr);
}

}  // namespace

ProgressMonitor::ProgressMonitor(ProgressConfig config, int local_ranks, Clock::time_point start)
    : config_(config), start_(start), ranks_(static_cast<size_t>(std::max(local_ranks, 0))) {
  for (auto& r : ranks_) r.last_progress = start;
}

void ProgressMonitor::record_interval(Millis per_step) {
  recent_.push_back(per_step);
  while (recent_.size() > std::max<size_t>(config_.hang.auto_window, 1)) recent_.pop_front();
  ++timed_;
}

std::optional<Millis> ProgressMonitor::slowest_step() const {
  if (recent_.empty()) return std::nullopt;
  return *std::max_element(recent_.begin(), recent_.end());
}

std::optional<Millis> ProgressMonitor::hang_limit() const {
  const HangLimit& h = config_.hang;
  switch (h.mode) {
    case HangLimit::Mode::kOff:
      return std::nullopt;
    case HangLimit::Mode::kFixed:
      return h.fixed;
    case HangLimit::Mode::kAuto: {
      if (timed_ < static_cast<size_t>(std::max(h.auto_min_steps, 1))) return std::nullopt;
      const auto scaled = Millis(static_cast<int64_t>(
          std::ceil(static_cast<double>(slowest_step()->count()) * h.auto_factor)));
      return std::max(h.auto_floor, scaled);
    }
  }
  return std::nullopt;
}

std::optional<Fault> ProgressMonitor::observe(Clock::time_point now,
                                              const std::vector<RankSample>& samples) {
  if (faulted_) return std::nullopt;
  bool any_attached = false;
  for (const auto& s : samples) any_attached = any_attached || s.attached;
  // Bookkeeping first, so that every rank's step counts before any limit is judged.
  for (size_t i = 0; i < samples.size() && i < ranks_.size(); ++i) {
    Rank& r = ranks_[i];
    const RankSample& s = samples[i];
    if (s.step > r.step) {
      // Time in a section is not step time; neither is the wait for the first step.
      if (r.step >= 0 && !r.in_section && !s.in_section) {
        const auto elapsed = std::chrono::duration_cast<Millis>(now - r.last_progress);
        record_interval(Millis(elapsed.count() / std::max<int64_t>(s.step - r.step, 1)));
      }
      r.step = s.step;
      r.last_progress = now;
    } else if (s.step < r.step) {
      // A worker that starts over (a new process in its slot) has made progress.
      r.step = s.step;
      r.last_progress = now;
    }
    if (s.in_section && !r.in_section) r.section_since = now;
    if (!s.in_section && r.in_section) r.last_progress = now;  // leaving a section is progress
    r.in_section = s.in_section;
  }
  // A non-finite loss is definite and wins; of the ranks past a limit, the
  // one that stopped first.
  std::optional<Fault> worst;
  Clock::time_point worst_since{};
  for (size_t i = 0; i < samples.size() && i < ranks_.size(); ++i) {
    auto f = check_rank(static_cast<int>(i), ranks_[i], samples[i], now, any_attached);
    if (!f) continue;
    if (f->kind == FaultKind::kNonFiniteLoss) {
      worst = std::move(f);
      break;
    }
    const Rank& r = ranks_[i];
    const Clock::time_point since = r.in_section ? r.section_since : r.last_progress;
    if (!worst || since < worst_since) {
      worst = std::move(f);
      worst_since = since;
    }
  }
  faulted_ = worst.has_value();
  return worst;
}

std::optional<Fault> ProgressMonitor::check_rank(int lr, const Rank& r, const RankSample& s,
                                                 Clock::time_point now, bool any_attached) const {
  if (!s.running) return std::nullopt;
  Fault f;
  f.local_rank = lr;
  f.last_step = r.step;
  if (config_.non_finite_loss && s.attached && s.loss_non_finite) {
    f.kind = FaultKind::kNonFiniteLoss;
    f.monitor = "non_finite_loss";
    f.message =
        rank_name(lr) + " reported a non-finite loss (seen by step " + std::to_string(s.step) + ")";
    if (!std::isfinite(s.loss)) {
      char value[32];
      std::snprintf(value, sizeof value, "%g", s.loss);
      f.message =
          rank_name(lr) + " reported a loss of " + value + " at step " + std::to_string(s.step);
    }
    return f;
  }
  if (r.in_section) {
    if (s.section_limit.count() <= 0) return std::nullopt;
    const auto in = std::chrono::duration_cast<Millis>(now - r.section_since);
    if (in <= s.section_limit) return std::nullopt;
    f.kind = FaultKind::kHang;
    f.monitor = "hang";
    f.message = rank_name(lr) + " has been in section '" + s.section + "' for " + seconds(in) +
                " (its limit " + seconds(s.section_limit) + ") after step " +
                std::to_string(r.step);
    return f;
  }
  if (r.step < 0) {
    if (config_.startup.count() <= 0 || !any_attached) return std::nullopt;
    const auto waited = std::chrono::duration_cast<Millis>(now - start_);
    if (waited <= config_.startup) return std::nullopt;
    f.kind = FaultKind::kStartup;
    f.monitor = "startup";
    f.message = rank_name(lr) + " published no step within " + seconds(waited) +
                " of its start (start-up limit " + seconds(config_.startup) + ")";
    return f;
  }
  const auto limit = hang_limit();
  if (!limit || !s.attached) return std::nullopt;
  const auto idle = std::chrono::duration_cast<Millis>(now - r.last_progress);
  if (idle <= *limit) return std::nullopt;
  f.kind = FaultKind::kHang;
  f.monitor = "hang";
  std::string how;
  if (config_.hang.mode == HangLimit::Mode::kAuto) {
    how = ", auto: " + std::to_string(static_cast<int>(config_.hang.auto_factor)) +
          " x the slowest recent step, " + seconds(*slowest_step()) + ", at least " +
          seconds(config_.hang.auto_floor);
  }
  f.message = rank_name(lr) + " made no progress for " + seconds(idle) + " after step " +
              std::to_string(r.step) + " (hang limit " + seconds(*limit) + how + ")";
  return f;
}

}  // namespace elasticrun::health
