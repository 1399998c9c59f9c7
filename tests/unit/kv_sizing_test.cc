// KvPoolBlocks under mpirun: a fraction of the available memory is split between the ranks on one machine, so
// several --dp ranks on one host do not each claim it all.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/kv_sizing.h"

namespace deepinfer {
namespace {

// Rank 0 of a job whose other ranks report the given host ids (0: this machine's); collectives over one rank's
// data otherwise (the count agreement is the identity: every rank computes the same here).
class HostsControl final : public dist::Communicator {
 public:
  explicit HostsControl(std::vector<uint64_t> others) : others_(std::move(others)) {}
  int rank() const override { return 0; }
  int size() const override { return 1 + static_cast<int>(others_.size()); }
  const std::string& name() const override { return name_; }
  Status AllReduceSum(float*, size_t) override { return Status::Ok(); }
  Status AllReduceMax(int64_t*, size_t) override { return Status::Ok(); }
  Status AllGather(const void* send, size_t bytes, void* recv) override {
    if (bytes != sizeof(uint64_t)) return Internal("unexpected all-gather size");
    auto* out = static_cast<uint64_t*>(recv);
    std::memcpy(out, send, bytes);
    for (size_t i = 0; i < others_.size(); ++i) out[i + 1] = others_[i] ? others_[i] : HostId();
    ++gathers;
    return Status::Ok();
  }
  Status AllGatherV(const void*, size_t, std::vector<uint8_t>*, std::vector<size_t>*) override { return Internal("unused"); }
  Status ReduceScatterSum(const float*, float*, size_t) override { return Internal("unused"); }
  Status AllToAllV(const void*, const size_t*, void*, const size_t*) override { return Internal("unused"); }
  Status AllToAll(const void*, size_t, void*) override { return Internal("unused"); }
  Status Broadcast(void*, size_t, int, double) override { return Internal("unused"); }
  Status Barrier() override { return Status::Ok(); }
  StatusOr<std::unique_ptr<Communicator>> Split(int, int, const std::string&) override { return Internal("unused"); }
  int gathers = 0;

 private:
  std::vector<uint64_t> others_;
  std::string name_ = "control";
};

TEST(KvSizing, FractionIsSplitBetweenTheRanksOfOneMachine) {
  EngineOptions opt;
  opt.num_kv_blocks = 0;
  opt.kv_cache_bytes = 0;
  opt.kv_cache_fraction = 0.01;
  const size_t block = 4096, most = size_t{1} << 50;  // no cap
  auto alone = KvPoolBlocks(opt, block, most, nullptr);
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  ASSERT_GT(*alone, 1000);  // 1% of the available RAM in 4 KiB blocks
  const uint64_t other_host = HostId() ^ 0x9E3779B97F4A7C15ull;
  const struct {
    std::vector<uint64_t> others;  // 0: a rank on this machine
    int local;
  } cases[] = {{{0}, 2}, {{other_host}, 1}, {{0, other_host, 0}, 3}, {{other_host, other_host, other_host}, 1}};
  for (const auto& c : cases) {
    HostsControl control(c.others);
    auto blocks = KvPoolBlocks(opt, block, most, &control);
    ASSERT_TRUE(blocks.ok()) << blocks.status().ToString();
    EXPECT_EQ(control.gathers, 1);
    // The available memory moves a little between the two measurements: within 5%.
    const double expect = static_cast<double>(*alone) / c.local;
    EXPECT_NEAR(*blocks, expect, expect * 0.05) << c.local << " ranks on this machine of " << control.size();
  }
  // An explicit size is the user's per rank: not split.
  opt.kv_cache_bytes = size_t{64} << 20;
  HostsControl two({0});
  auto fixed = KvPoolBlocks(opt, block, most, &two);
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(*fixed, (64 << 20) / 4096);
}

}  // namespace
}  // namespace deepinfer
