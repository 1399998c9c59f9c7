// A progress bar on stderr for long work in programs over the library (`deepinfer generate --input` draws one
// per batch), the same bar the library draws while downloading and loading weights. On a terminal it redraws in
// place at most 10 times a second; otherwise it prints a line every 10%. DEEPINFER_NO_PROGRESS=1 hides it.
//
//   deepinfer::api::ProgressBar bar("generate", requests.size(), "req");
//   bar.Update(done);   // as work finishes
//   bar.Finish();       // the final line (also drawn when the bar is destroyed)
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace deepinfer::api {

class ProgressBar {
 public:
  // unit "B" formats sizes (KB/MB/GB); anything else prints plain counts followed by the unit.
  ProgressBar(const std::string& label, uint64_t total, const std::string& unit = "");
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;
  ~ProgressBar();
  void Update(uint64_t done);  // `done` of `total` finished
  void Finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer::api
