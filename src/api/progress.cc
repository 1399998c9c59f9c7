#include "deepinfer/progress.h"

#include "base/progress.h"

namespace deepinfer::api {

struct ProgressBar::Impl {
  deepinfer::ProgressBar bar;
};

ProgressBar::ProgressBar(const std::string& label, uint64_t total, const std::string& unit)
    : impl_(new Impl{deepinfer::ProgressBar(label, total, unit)}) {}
ProgressBar::~ProgressBar() = default;
void ProgressBar::Update(uint64_t done) { impl_->bar.Update(done); }
void ProgressBar::Finish() { impl_->bar.Finish(); }

}  // namespace deepinfer::api
