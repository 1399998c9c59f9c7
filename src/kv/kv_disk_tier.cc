#include "kv/kv_disk_tier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "base/logging.h"
#include "kv/kv_tier_format.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
constexpr const char* kSuffix = ".kvb";

bool ParseKey(const std::string& name, uint64_t* key) {
  if (name.size() != 16 + 4 || name.compare(16, 4, kSuffix) != 0) return false;
  char* end = nullptr;
  const std::string hex = name.substr(0, 16);
  *key = std::strtoull(hex.c_str(), &end, 16);
  return end == hex.c_str() + 16;
}

bool WriteAll(int fd, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    b += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* p, size_t n) {
  auto* b = static_cast<uint8_t*>(p);
  while (n > 0) {
    const ssize_t r = ::read(fd, b, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    b += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// A full disk: the store's bound never goes under this many entries, and is lifted after this long without one.
constexpr size_t kMinFullFiles = 4;
constexpr int kFullRecoverySeconds = 300;

int64_t SteadySeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The header checks that need no payload: magic, version, layout, its own checksum.
bool HeaderValid(const DiskBlockHeader& h) {
  return std::memcmp(h.magic, kDiskBlockMagic, sizeof h.magic) == 0 && h.version >= kDiskBlockOldestVersion &&
         h.version <= kDiskBlockVersion &&
         h.header_bytes == sizeof(DiskBlockHeader) && h.header_checksum == HeaderChecksum(h);
}

}  // namespace

std::string KvDiskTier::PathOf(uint64_t key) const {
  char name[32];
  std::snprintf(name, sizeof name, "%016" PRIx64 "%s", key, kSuffix);
  return dir_ + "/" + name;
}

StatusOr<std::unique_ptr<KvDiskTier>> KvDiskTier::Open(const std::string& dir, size_t capacity_bytes,
                                                       uint64_t model_digest, OpenReport* report, KvEventLog* events) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) return InvalidArgument("--kv-store: cannot create or open directory '" + dir + "'" +
                                                          (ec ? ": " + ec.message() : ""));
  if (::access(dir.c_str(), W_OK | R_OK) != 0)
    return InvalidArgument("--kv-store: directory '" + dir + "' is not readable and writable: " + std::strerror(errno));
  std::unique_ptr<KvDiskTier> t(new KvDiskTier(dir, capacity_bytes, model_digest, events));
  OpenReport rep;
  struct Found {
    int64_t mtime_ns;
    uint64_t key;
    size_t bytes;
    uint64_t chain, parent;
    uint32_t group;
  };
  std::vector<Found> found;
  const auto now = fs::file_time_type::clock::now();
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) {
      // A writer killed between create and rename. Another live server may be writing it right now, so only
      // stale ones (an hour old) are removed.
      std::error_code e2;
      const auto mt = fs::last_write_time(it->path(), e2);
      if (!e2 && now - mt > std::chrono::hours(1) && fs::remove(it->path(), e2)) ++rep.temp_removed;
      continue;
    }
    uint64_t key;
    if (!ParseKey(name, &key)) continue;  // not ours: leave it
    const std::string path = it->path().string();
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // vanished (another server evicted it)
    DiskBlockHeader h;
    struct stat st {};
    const bool read_ok = ReadAll(fd, &h, sizeof h) && ::fstat(fd, &st) == 0;
    ::close(fd);
    if (read_ok && HeaderValid(h) && h.model_digest != model_digest) {
      ++rep.foreign;  // another model's entry: never served here, and not ours to delete
      continue;
    }
    if (read_ok && std::memcmp(h.magic, kDiskBlockMagic, sizeof h.magic) == 0 &&
        (h.version < kDiskBlockOldestVersion || h.version > kDiskBlockVersion)) {
      ++rep.foreign;  // another deepinfer version's entry (a server of that version may share the directory)
      continue;
    }
    const bool ok = read_ok && HeaderValid(h) && TierKey(model_digest, h.chain_hash) == key &&
                    static_cast<uint64_t>(st.st_size) == sizeof h + uint64_t{h.num_tokens} * 4 + h.kv_bytes;
    if (!ok) {
      ++rep.rejected;
      DI_LOG_WARN("kv store: rejected %s (%s); removed", path.c_str(),
                  !read_ok ? "short header" : !HeaderValid(h) ? "bad magic, version or header checksum"
                                                               : "size or name does not match its header");
      ::unlink(path.c_str());
      continue;
    }
    found.push_back({static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec, key,
                     static_cast<size_t>(st.st_size), h.chain_hash, h.parent_hash,
                     h.version >= 2 ? h.group : ~0u /* unknown: not announced */});
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.mtime_ns < b.mtime_ns; });
  std::lock_guard<std::mutex> lock(t->mu_);
  for (const Found& f : found) {
    Entry& e = t->map_[f.key];
    e.bytes = f.bytes;
    e.lru_pos = t->lru_.insert(t->lru_.end(), f.key);
    t->bytes_ += f.bytes;
  }
  t->Unlink(t->EvictDownTo(t->capacity_));
  if (events)  // what survived, oldest first (nothing was reported yet, so the evictions above reported nothing)
    for (const Found& f : found)
      if (f.group == 0)
        if (auto it = t->map_.find(f.key); it != t->map_.end()) {
          it->second.reported_hash = f.chain;
          events->Stored(f.chain, f.parent, KvMedium::kDisk);
        }
  rep.entries = static_cast<int64_t>(t->map_.size());
  rep.bytes = t->bytes_;
  if (report) *report = rep;
  return t;
}

void KvDiskTier::Forget(uint64_t key) {
  auto it = map_.find(key);
  if (it == map_.end()) return;
  if (it->second.reported_hash) events_->Removed(it->second.reported_hash, KvMedium::kDisk);
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru_pos);
  map_.erase(it);
}

std::vector<uint64_t> KvDiskTier::EvictDownTo(size_t limit) {
  std::vector<uint64_t> victims;
  while (bytes_ > limit && !lru_.empty()) {
    victims.push_back(lru_.front());
    Forget(lru_.front());
    ++evictions_;
  }
  return victims;
}

void KvDiskTier::Unlink(const std::vector<uint64_t>& keys) const {
  for (uint64_t key : keys) ::unlink(PathOf(key).c_str());
}

size_t KvDiskTier::Put(uint64_t key, uint64_t chain_hash, uint64_t parent_hash, uint32_t num_tokens,
                       const uint8_t* data, size_t n, uint32_t group) {
  const size_t file_bytes = sizeof(DiskBlockHeader) + n;
  const size_t token_bytes = size_t{num_tokens} * 4;
  if (file_bytes > capacity_ || n < token_bytes) return 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      lru_.splice(lru_.end(), lru_, it->second.lru_pos);
      return 0;
    }
    if (found_full_ && SteadySeconds() - full_at_s_ >= kFullRecoverySeconds) {
      found_full_ = false;
      DI_LOG_INFO("kv store: no full disk under %s for %d s; the store may grow to --kv-store-size again", dir_.c_str(),
                  kFullRecoverySeconds);
    }
    if (found_full_ && file_bytes > full_limit_) return 0;  // would be evicted as soon as written
  }
  DiskBlockHeader h{};
  std::memcpy(h.magic, kDiskBlockMagic, sizeof h.magic);
  h.version = kDiskBlockVersion;
  h.header_bytes = sizeof h;
  h.model_digest = digest_;
  h.chain_hash = chain_hash;
  h.parent_hash = parent_hash;
  h.num_tokens = num_tokens;
  h.group = group;
  h.kv_bytes = n - token_bytes;
  h.payload_checksum = Checksum64(data, n);
  h.header_checksum = HeaderChecksum(h);
  const std::string path = PathOf(key);
  int err = 0;
  bool ok = WriteFile(path, h, data, n, &err);
  if (!ok && (err == ENOSPC || err == EDQUOT)) {
    // The disk (or a quota) filled below --kv-store-size: other files, another server, or a capacity larger than
    // the disk. Make room by evicting the least recent entries (this entry's size, or a sixteenth of what is
    // stored, whichever is more, so that a full disk does not cost one failed write per block), retry once, and
    // for a while keep the store below the size it reached: the disk's real room for it. The bound never goes
    // under kMinFullFiles entries (a disk filled by someone else would otherwise shrink the store to nothing: each
    // write then deleted at once) and is lifted after kFullRecoverySeconds without a full disk (that someone may
    // have freed the room).
    std::vector<uint64_t> victims;
    size_t limit;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const size_t room = std::max(file_bytes, bytes_ / 16);
      const size_t target = bytes_ > room ? bytes_ - room : 0;
      limit = std::max(target, kMinFullFiles * file_bytes);
      if (!found_full_ || limit < full_limit_) full_limit_ = limit;
      found_full_ = true;
      full_at_s_ = SteadySeconds();
      if (disk_full_events_++ == 0)
        DI_LOG_WARN("kv store: the disk under %s is full at %.1f MiB stored (--kv-store-size %.1f MiB); evicting the "
                    "least recent entries and keeping the store below %.1f MiB until the disk has had room for %d s",
                    dir_.c_str(), static_cast<double>(bytes_) / (1 << 20), static_cast<double>(capacity_) / (1 << 20),
                    static_cast<double>(full_limit_) / (1 << 20), kFullRecoverySeconds);
      victims = EvictDownTo(target);
    }
    Unlink(victims);
    ok = !victims.empty() && WriteFile(path, h, data, n, &err);
  }
  if (!ok) {
    std::lock_guard<std::mutex> lock(mu_);
    if (write_errors_++ == 0)  // once: a failing disk would otherwise log every block
      DI_LOG_WARN("kv store: cannot write %s (%s); entries that do not fit are skipped", path.c_str(), std::strerror(err));
    return 0;
  }
  std::vector<uint64_t> victims;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!map_.count(key)) {
      Entry& e = map_[key];
      e.bytes = file_bytes;
      e.lru_pos = lru_.insert(lru_.end(), key);
      e.time_s = SteadySeconds();
      bytes_ += file_bytes;
      if (events_ && group == 0) {
        e.reported_hash = chain_hash;
        events_->Stored(chain_hash, parent_hash, KvMedium::kDisk);
      }
    }
    victims = EvictDownTo(found_full_ ? std::min(capacity_, full_limit_) : capacity_);
  }
  // Outside the lock: the engine thread's reads never wait on the unlinks. Only this (the writer) thread stores,
  // so no Put of an evicted key can run between the eviction and its unlink.
  Unlink(victims);
  return file_bytes;
}

bool KvDiskTier::WriteFile(const std::string& path, const DiskBlockHeader& h, const uint8_t* data, size_t n,
                           int* err) {
  char tmp_suffix[64];
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::snprintf(tmp_suffix, sizeof tmp_suffix, ".%d.%" PRIu64 ".tmp", static_cast<int>(::getpid()), temp_seq_++);
  }
  const std::string tmp = path + tmp_suffix;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  bool ok = fd >= 0 && WriteAll(fd, &h, sizeof h) && WriteAll(fd, data, n) && ::fsync(fd) == 0;
  *err = ok ? 0 : errno;
  if (fd >= 0 && ::close(fd) != 0 && ok) ok = false, *err = errno;
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) ok = false, *err = errno;  // the cause named is the step that failed
  if (!ok) ::unlink(tmp.c_str());
  return ok;
}

bool KvDiskTier::Get(uint64_t key, uint64_t chain_hash, uint64_t parent_hash, const uint8_t* prefix, size_t prefix_n,
                     uint8_t* out, size_t n, std::vector<uint8_t>* scratch) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return false;
    lru_.splice(lru_.end(), lru_, it->second.lru_pos);
  }
  const std::string path = PathOf(key);
  const size_t want = sizeof(DiskBlockHeader) + n;
  scratch->resize(want);  // capacity kept between calls: no allocation once warm
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  bool ok = false, vanished = fd < 0;
  if (fd >= 0) {
    struct stat st {};
    ok = ::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == want && ReadAll(fd, scratch->data(), want);
    ::close(fd);
  }
  const uint8_t* payload = scratch->data() + sizeof(DiskBlockHeader);
  if (ok) {
    DiskBlockHeader h;
    std::memcpy(&h, scratch->data(), sizeof h);
    ok = HeaderValid(h) && h.model_digest == digest_ && h.chain_hash == chain_hash && h.parent_hash == parent_hash &&
         size_t{h.num_tokens} * 4 + h.kv_bytes == n && h.payload_checksum == Checksum64(payload, n) &&
         prefix_n <= n && (prefix_n == 0 || std::memcmp(payload, prefix, prefix_n) == 0);
  }
  if (!ok) {
    std::lock_guard<std::mutex> lock(mu_);
    ++rejected_reads_;
    if (!vanished) {
      DI_LOG_WARN("kv store: %s failed validation on read (truncated, corrupt or another prefix); removed, served "
                  "as a miss", path.c_str());
      ::unlink(path.c_str());
    }
    Forget(key);
    return false;
  }
  if (out) std::memcpy(out, payload, n);
  return true;
}

void KvDiskTier::Prefetch(uint64_t key) const {
  if (!Contains(key)) return;
  const int fd = ::open(PathOf(key).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;  // removed meanwhile: the read will miss
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
  ::close(fd);
}

void KvDiskTier::SyncDirectory() {
  const int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

bool KvDiskTier::Touch(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return false;
  lru_.splice(lru_.end(), lru_, it->second.lru_pos);
  const int64_t now = SteadySeconds();
  if (now - it->second.time_s < 60) return false;
  it->second.time_s = now;
  return true;
}

void KvDiskTier::RefreshTime(uint64_t key) const {
  (void)::utimensat(AT_FDCWD, PathOf(key).c_str(), nullptr, 0);  // gone meanwhile (evicted): nothing to order
}

bool KvDiskTier::Contains(uint64_t key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.count(key) != 0;
}

size_t KvDiskTier::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t KvDiskTier::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}

int64_t KvDiskTier::rejected_reads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rejected_reads_;
}

int64_t KvDiskTier::write_errors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return write_errors_;
}

int64_t KvDiskTier::evictions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return evictions_;
}

int64_t KvDiskTier::disk_full_events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return disk_full_events_;
}

size_t KvDiskTier::effective_capacity() const {
  std::lock_guard<std::mutex> lock(mu_);
  return found_full_ ? std::min(capacity_, full_limit_) : capacity_;
}

}  // namespace deepinfer
