// The disk tier of the KV store on its own (kv/kv_disk_tier.h): two stores sharing one directory while both write
// and read the same entries never read a torn or foreign payload; what a killed writer leaves behind is never
// served; eviction is least recently used by bytes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "kv/kv_disk_tier.h"
#include "kv/kv_tier_format.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kDigest = 0x1234abcd5678ef00ull;
constexpr uint32_t kTokens = 8;
constexpr size_t kEntryBytes = kTokens * 4 + 4096;

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag)
      : path(fs::temp_directory_path() / ("deepinfer_disktier_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// Entry i's payload: tokens then bytes, all from a generator seeded by i (so any reader can check it).
std::vector<uint8_t> Payload(uint64_t i) {
  std::mt19937 rng(static_cast<uint32_t>(i * 7919 + 1));
  std::vector<uint8_t> p(kEntryBytes);
  for (auto& b : p) b = static_cast<uint8_t>(rng());
  return p;
}
uint64_t Chain(uint64_t i) { return 0xfeed0000ull + i; }
uint64_t Key(uint64_t i) { return TierKey(kDigest, Chain(i)); }

std::unique_ptr<KvDiskTier> Open(const fs::path& dir, size_t capacity, KvDiskTier::OpenReport* rep = nullptr) {
  auto t = KvDiskTier::Open(dir.string(), capacity, kDigest, rep);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

bool Read(KvDiskTier& t, uint64_t i, std::vector<uint8_t>* out, std::vector<uint8_t>* scratch) {
  const std::vector<uint8_t> p = Payload(i);
  out->assign(kEntryBytes, 0);
  return t.Get(Key(i), Chain(i), 0, p.data(), kTokens * 4, out->data(), kEntryBytes, scratch);
}

// Two servers on one directory: both write every entry (renames over each other's files) while readers of both
// read them; a read either misses or returns exactly the payload, and the directory ends whole.
TEST(KvDiskTierTest, TwoStoresShareADirectoryWithoutCorruption) {
  TempDir dir("shared");
  auto a = Open(dir.path, size_t{64} << 20), b = Open(dir.path, size_t{64} << 20);
  ASSERT_TRUE(a && b);
  constexpr int kEntries = 40;
  std::atomic<bool> done{false};
  std::atomic<int> bad{0}, hits{0};
  auto writer = [&](KvDiskTier* t, int order) {
    for (int k = 0; k < kEntries; ++k) {
      const int i = order ? kEntries - 1 - k : k;
      const std::vector<uint8_t> p = Payload(i);
      t->Put(Key(i), Chain(i), 0, kTokens, p.data(), p.size());
    }
  };
  auto reader = [&](KvDiskTier* t) {
    std::vector<uint8_t> out, scratch;
    while (!done) {
      for (int i = 0; i < kEntries; ++i) {
        if (!Read(*t, i, &out, &scratch)) continue;
        ++hits;
        if (out != Payload(i)) ++bad;
      }
    }
  };
  std::thread r1(reader, a.get()), r2(reader, b.get());
  std::thread w1(writer, a.get(), 0), w2(writer, b.get(), 1);
  w1.join();
  w2.join();
  done = true;
  r1.join();
  r2.join();
  EXPECT_EQ(bad.load(), 0);
  KvDiskTier::OpenReport rep;
  auto c = Open(dir.path, size_t{64} << 20, &rep);
  ASSERT_TRUE(c);
  EXPECT_EQ(rep.entries, kEntries);
  EXPECT_EQ(rep.rejected, 0);
  std::vector<uint8_t> out, scratch;
  for (int i = 0; i < kEntries; ++i) {
    ASSERT_TRUE(Read(*c, i, &out, &scratch)) << i;
    EXPECT_EQ(out, Payload(i));
  }
}

// What a writer killed at any moment leaves: a temporary file (ignored, never indexed) or, from a writer that did
// not rename, a torn file under a final name (rejected and removed at start-up).
TEST(KvDiskTierTest, KilledWriterLeftoversAreNeverServed) {
  TempDir dir("killed");
  {
    auto t = Open(dir.path, size_t{64} << 20);
    ASSERT_TRUE(t);
    for (int i = 0; i < 3; ++i) {
      const std::vector<uint8_t> p = Payload(i);
      t->Put(Key(i), Chain(i), 0, kTokens, p.data(), p.size());
    }
  }
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.kvb", static_cast<unsigned long long>(Key(1)));
  const fs::path torn = dir.path / name;
  fs::resize_file(torn, fs::file_size(torn) / 2);
  std::ofstream(dir.path / (std::string(name) + ".999.0.tmp")) << "half a write";
  KvDiskTier::OpenReport rep;
  auto t = Open(dir.path, size_t{64} << 20, &rep);
  ASSERT_TRUE(t);
  EXPECT_EQ(rep.entries, 2);
  EXPECT_EQ(rep.rejected, 1);
  EXPECT_FALSE(fs::exists(torn));
  std::vector<uint8_t> out, scratch;
  EXPECT_TRUE(Read(*t, 0, &out, &scratch));
  EXPECT_FALSE(Read(*t, 1, &out, &scratch));
  EXPECT_TRUE(Read(*t, 2, &out, &scratch));
}

// Least recently used by bytes: reading an entry keeps it; the oldest untouched one goes first.
TEST(KvDiskTierTest, EvictsLeastRecentlyUsed) {
  TempDir dir("lru");
  const size_t file = sizeof(DiskBlockHeader) + kEntryBytes;
  auto t = Open(dir.path, 3 * file);
  ASSERT_TRUE(t);
  std::vector<uint8_t> out, scratch;
  for (int i = 0; i < 3; ++i) {
    const std::vector<uint8_t> p = Payload(i);
    EXPECT_EQ(t->Put(Key(i), Chain(i), 0, kTokens, p.data(), p.size()), file);
  }
  ASSERT_TRUE(Read(*t, 0, &out, &scratch));  // 0 is now the most recent; 1 the least
  const std::vector<uint8_t> p = Payload(3);
  t->Put(Key(3), Chain(3), 0, kTokens, p.data(), p.size());
  EXPECT_EQ(t->entries(), 3u);
  EXPECT_LE(t->bytes(), 3 * file);
  EXPECT_EQ(t->evictions(), 1);
  EXPECT_TRUE(Read(*t, 0, &out, &scratch));
  EXPECT_FALSE(Read(*t, 1, &out, &scratch));
  EXPECT_TRUE(Read(*t, 3, &out, &scratch));
}

}  // namespace
}  // namespace deepinfer
