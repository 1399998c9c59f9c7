// The disk tier of the KV store on its own (kv/kv_disk_tier.h): two stores sharing one directory while both write
// and read the same entries never read a torn or foreign payload; what a killed writer leaves behind is never
// served; eviction is least recently used by bytes.
#include <gtest/gtest.h>

#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
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

// A disk that fills below --kv-store-size: a 256 KiB tmpfs under a store told it may use 64 MiB. Each write
// that finds the disk full evicts the least recent entries and is retried, the store then stays below the size it
// reached, every write after the first full one succeeds, and whatever it holds reads back whole.
TEST(KvDiskTierTest, AFullDiskDegradesToWhatFits) {
  TempDir dir("full");
  // CI runs as root (as the multi-process tests do); a machine that cannot mount fails here, never skips.
  ASSERT_EQ(::mount("tmpfs", dir.path.c_str(), "tmpfs", 0, "size=256k"), 0)
      << "mounting a 256 KiB tmpfs on " << dir.path << " needs root (CAP_SYS_ADMIN): " << std::strerror(errno);
  struct Unmount {
    const fs::path& p;
    ~Unmount() { ::umount(p.c_str()); }
  } unmount{dir.path};
  const size_t file = sizeof(DiskBlockHeader) + kEntryBytes;
  auto t = Open(dir.path, size_t{64} << 20);
  ASSERT_TRUE(t);
  constexpr int kEntries = 200;  // ~840 KiB of files: more than three times the disk
  int first_full = -1, failed_after = 0;
  for (int i = 0; i < kEntries; ++i) {
    const std::vector<uint8_t> p = Payload(i);
    const size_t wrote = t->Put(Key(i), Chain(i), 0, kTokens, p.data(), p.size());
    if (first_full < 0 && t->disk_full_events() > 0) first_full = i;
    else if (first_full >= 0 && wrote != file) ++failed_after;
  }
  ASSERT_GE(first_full, 0) << "the disk never filled";
  EXPECT_GT(first_full, 10);  // it held something before it filled
  EXPECT_EQ(failed_after, 0) << "writes failed after the store adapted to the disk";
  EXPECT_LT(t->effective_capacity(), size_t{256} << 10);
  EXPECT_LE(t->bytes(), t->effective_capacity());
  EXPECT_LE(t->disk_full_events(), 3) << "the store kept running into the full disk instead of staying below it";
  EXPECT_GT(t->entries(), 10u);
  // The newest entries are there and whole; the oldest were evicted; nothing reads back wrong.
  std::vector<uint8_t> out, scratch;
  int present = 0;
  for (int i = 0; i < kEntries; ++i) {
    if (!t->Contains(Key(i))) continue;
    ++present;
    ASSERT_TRUE(Read(*t, i, &out, &scratch)) << i;
    EXPECT_EQ(out, Payload(i)) << i;
  }
  EXPECT_EQ(static_cast<size_t>(present), t->entries());
  EXPECT_TRUE(t->Contains(Key(kEntries - 1)));
  EXPECT_FALSE(t->Contains(Key(0)));
  EXPECT_EQ(t->rejected_reads(), 0);
  // No temporary file is left behind by the failed writes.
  for (const auto& e : fs::directory_iterator(dir.path)) EXPECT_EQ(e.path().extension(), ".kvb") << e.path();
}

// Files of another format version (a server of another deepinfer release sharing the directory) are neither
// indexed nor removed.
TEST(KvDiskTierTest, AnotherVersionsFilesAreLeftAlone) {
  TempDir dir("version");
  {
    auto t = Open(dir.path, size_t{64} << 20);
    ASSERT_TRUE(t);
    const std::vector<uint8_t> p = Payload(0);
    t->Put(Key(0), Chain(0), 0, kTokens, p.data(), p.size());
  }
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.kvb", static_cast<unsigned long long>(Key(0)));
  const fs::path f = dir.path / name;
  {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    DiskBlockHeader h;
    io.read(reinterpret_cast<char*>(&h), sizeof h);
    h.version = kDiskBlockVersion + 1;
    h.header_checksum = HeaderChecksum(h);
    io.seekp(0);
    io.write(reinterpret_cast<const char*>(&h), sizeof h);
  }
  KvDiskTier::OpenReport rep;
  auto t = Open(dir.path, size_t{64} << 20, &rep);
  ASSERT_TRUE(t);
  EXPECT_EQ(rep.entries, 0);
  EXPECT_EQ(rep.foreign, 1);
  EXPECT_EQ(rep.rejected, 0);
  EXPECT_TRUE(fs::exists(f));
}

// KV events: group 0's entries are announced (found at start-up, stored, evicted or failed on read), other
// groups' never; a version 1 entry (its group unknown: version 1 wrote 0 for every group) is served, not announced.
TEST(KvDiskTierTest, AnnouncesGroupZerosEntriesToTheKvEvents) {
  TempDir dir("events");
  const size_t file = sizeof(DiskBlockHeader) + kEntryBytes;
  {
    KvEventLog log;
    auto t = KvDiskTier::Open(dir.path.string(), 3 * file, kDigest, nullptr, &log);
    ASSERT_TRUE(t.ok());
    for (uint64_t i = 0; i < 4; ++i) {
      const std::vector<uint8_t> p = Payload(i);
      (*t)->Put(Key(i), Chain(i), /*parent=*/7, kTokens, p.data(), p.size(), /*group=*/i == 2 ? 1 : 0);
    }
    // 0, 1, 3 announced (2 is group 1's); the fourth Put evicted 0.
    std::vector<KvEventLog::Event> evs;
    ASSERT_TRUE(log.Since(0, 100, &evs));
    ASSERT_EQ(evs.size(), 4u);
    EXPECT_TRUE(evs[0].stored && evs[0].hash == Chain(0) && evs[0].medium == KvMedium::kDisk);
    EXPECT_TRUE(evs[1].stored && evs[1].hash == Chain(1) && evs[1].parent == 7u);
    EXPECT_TRUE(evs[2].stored && evs[2].hash == Chain(3));
    EXPECT_TRUE(!evs[3].stored && evs[3].hash == Chain(0));
  }
  // Entry 1 rewritten as version 1.
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.kvb", static_cast<unsigned long long>(Key(1)));
  {
    std::fstream io(dir.path / name, std::ios::in | std::ios::out | std::ios::binary);
    DiskBlockHeader h;
    io.read(reinterpret_cast<char*>(&h), sizeof h);
    h.version = 1;
    h.group = 0;
    h.header_checksum = HeaderChecksum(h);
    io.seekp(0);
    io.write(reinterpret_cast<const char*>(&h), sizeof h);
  }
  KvEventLog log;
  auto t = KvDiskTier::Open(dir.path.string(), 3 * file, kDigest, nullptr, &log);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->entries(), 3u);
  const KvEventLog::Snapshot s = log.TakeSnapshot();
  EXPECT_EQ(s.hashes, std::vector<uint64_t>{Chain(3)}) << "only the version 2 group 0 entry is announced at start-up";
  std::vector<uint8_t> out(kEntryBytes), scratch;
  const std::vector<uint8_t> p1 = Payload(1);
  EXPECT_TRUE((*t)->Get(Key(1), Chain(1), 7, p1.data(), kTokens * 4, out.data(), kEntryBytes, &scratch))
      << "a version 1 entry is still served";
  EXPECT_EQ(out, p1);
}

}  // namespace
}  // namespace deepinfer
