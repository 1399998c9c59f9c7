#include "base/progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace deepinfer {

std::string FormatBytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", b, units[u]);
  return buf;
}

ProgressBar::ProgressBar(std::string label, uint64_t total, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total) {
  tty_ = isatty(STDERR_FILENO);
  const char* off = std::getenv("DEEPINFER_NO_PROGRESS");
  enabled_ = !(off && *off && *off != '0');
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

ProgressBar::~ProgressBar() { Finish(); }

void ProgressBar::Update(uint64_t done) {
  done_ = done;
  if (!enabled_ || finished_) return;
  auto now = std::chrono::steady_clock::now();
  if (tty_) {
    if (now - last_draw_ < std::chrono::milliseconds(100)) return;
  } else {
    int decile = total_ ? static_cast<int>(done_ * 10 / total_) : 0;
    if (decile == last_decile_) return;
    last_decile_ = decile;
  }
  last_draw_ = now;
  Draw(false);
}

void ProgressBar::Finish() {
  if (finished_) return;
  finished_ = true;
  // Off a terminal every line is final already: do not print the same 100% line twice.
  if (enabled_ && (tty_ || last_drawn_ != done_)) Draw(true);
}

void ProgressBar::Draw(bool final) {
  last_drawn_ = done_;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double frac = total_ ? static_cast<double>(done_) / total_ : 1.0;
  constexpr int kWidth = 30;
  std::string bar(kWidth, ' ');
  for (int i = 0; i < static_cast<int>(frac * kWidth) && i < kWidth; ++i) bar[i] = '=';
  std::string amount, rate;
  if (unit_ == "B") {
    amount = FormatBytes(static_cast<double>(done_)) + "/" + FormatBytes(static_cast<double>(total_));
    rate = secs > 0 ? FormatBytes(done_ / secs) + "/s" : "";
  } else {
    amount = std::to_string(done_) + "/" + std::to_string(total_) + (unit_.empty() ? "" : " " + unit_);
    char b[32];
    std::snprintf(b, sizeof b, "%.1f/s", secs > 0 ? done_ / secs : 0.0);
    rate = b;
  }
  std::fprintf(stderr, "%s%s [%s] %3d%% %s %s %.1fs%s", tty_ ? "\r" : "", label_.c_str(), bar.c_str(),
               static_cast<int>(frac * 100), amount.c_str(), rate.c_str(), secs, (final || !tty_) ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace deepinfer
