// A terminal progress bar on stderr for long work (downloads, loading, batch runs). On a terminal it redraws
// in place at most 10 times a second; otherwise it prints a line every 10%. DEEPINFER_NO_PROGRESS=1 hides it.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace deepinfer {

class ProgressBar {
 public:
  // unit "B" formats sizes (KB/MB/GB); anything else prints plain counts.
  ProgressBar(std::string label, uint64_t total, std::string unit = "");
  ~ProgressBar();
  void Update(uint64_t done);
  void Add(uint64_t delta) { Update(done_ + delta); }
  void Finish();

 private:
  void Draw(bool final);
  std::string label_, unit_;
  uint64_t total_, done_ = 0, last_drawn_ = UINT64_MAX;
  bool tty_, enabled_, finished_ = false;
  int last_decile_ = -1;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

std::string FormatBytes(double bytes);

}  // namespace deepinfer
