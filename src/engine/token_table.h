// The "device-resident" token table: row `slot` holds a sequence's tokens by absolute position (prompt, then
// everything sampled). The host writes prompt tokens when it admits a sequence into a fresh slot; the sampler of
// step N writes each new token at (slot, position); step N+1 reads its input tokens from the table. That is how
// the next step gets its inputs before the host has seen them: no placeholder ids, no ring that can wrap.
#pragma once
#include <cstdint>
#include <vector>

namespace deepinfer {

class TokenTable {
 public:
  TokenTable(int num_slots, int width) : width_(width), slots_(num_slots), data_(static_cast<size_t>(num_slots) * width, -1) {}
  int num_slots() const { return slots_; }
  int width() const { return width_; }
  int32_t* row(int slot) { return data_.data() + static_cast<size_t>(slot) * width_; }
  const int32_t* row(int slot) const { return data_.data() + static_cast<size_t>(slot) * width_; }

 private:
  int width_, slots_;
  std::vector<int32_t> data_;
};

}  // namespace deepinfer
