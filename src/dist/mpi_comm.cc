// Open MPI implementation of the communicator. Every collective is built from non-blocking point-to-point
// messages (MPI_Isend / MPI_Irecv on the group's own MPI communicator), for three reasons:
//   - a fixed reduction order: partial sums are added in rank order by the rank that owns a slice (reduce-
//     scatter, then all-gather), so results never depend on the algorithm MPI would pick by message size;
//   - waits that sleep: the requests are polled with MPI_Testall, yielding and then sleeping between polls
//     (growing to 1 ms), so an idle rank does not spin a core (mpirun --oversubscribe runs several ranks per core);
//   - bounded failure: a wait longer than the timeout names the ranks whose messages never came and aborts the
//     job, instead of hanging every rank on a peer that died or stopped.
// Message order between two ranks on one communicator is MPI's non-overtaking order, and every call completes
// all its requests before returning, so one tag per communicator is enough.
#define OMPI_SKIP_MPICXX 1  // the C API only (the C++ bindings are deprecated and need libmpi_cxx)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "base/logging.h"
#include "dist/communicator.h"

namespace deepinfer::dist {
namespace {

using Clock = std::chrono::steady_clock;

Options g_options;
bool g_mpi = false;
std::unique_ptr<Communicator> g_world;

constexpr int kTag = 7;
constexpr size_t kMaxMessage = static_cast<size_t>(1) << 30;  // MPI counts are int: keep messages under 1 GiB

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, std::string name) : comm_(comm), name_(std::move(name)) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm_group(comm_, &group_);
    MPI_Comm_group(MPI_COMM_WORLD, &world_group_);
  }
  ~MpiCommunicator() override {
    MPI_Group_free(&group_);
    MPI_Group_free(&world_group_);
    MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }

  Status AllReduceSum(float* data, size_t n) override {
    if (size_ == 1 || n == 0) return Status::Ok();
    // Reduce-scatter: rank r owns elements [lo(r), lo(r + 1)); it receives every rank's copy of that slice and
    // adds them in rank order. Then every rank gathers every owner's sums.
    auto lo = [&](int r) { return n * static_cast<size_t>(r) / size_; };
    const size_t mine = lo(rank_ + 1) - lo(rank_);
    scratch_.resize(mine * size_);
    Begin();
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      Recv(scratch_.data() + mine * r, mine * sizeof(float), r);
      Send(data + lo(r), (lo(r + 1) - lo(r)) * sizeof(float), r);
    }
    std::memcpy(scratch_.data() + mine * rank_, data + lo(rank_), mine * sizeof(float));
    DI_RETURN_IF_ERROR(Wait("all-reduce"));
    float* own = data + lo(rank_);
    std::memcpy(own, scratch_.data(), mine * sizeof(float));
    for (int r = 1; r < size_; ++r) {
      const float* p = scratch_.data() + mine * r;
      for (size_t i = 0; i < mine; ++i) own[i] += p[i];
    }
    Begin();
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      Recv(data + lo(r), (lo(r + 1) - lo(r)) * sizeof(float), r);
      Send(own, mine * sizeof(float), r);
    }
    return Wait("all-reduce");
  }

  Status AllReduceMax(int64_t* data, size_t n) override {
    if (size_ == 1 || n == 0) return Status::Ok();
    std::vector<int64_t> all(n * size_);
    DI_RETURN_IF_ERROR(AllGather(data, n * sizeof(int64_t), all.data()));
    for (int r = 0; r < size_; ++r)
      for (size_t i = 0; i < n; ++i) data[i] = std::max(data[i], all[r * n + i]);
    return Status::Ok();
  }

  Status AllGather(const void* send, size_t bytes, void* recv) override {
    auto* out = static_cast<uint8_t*>(recv);
    if (bytes) std::memmove(out + bytes * rank_, send, bytes);
    if (size_ == 1) return Status::Ok();
    Begin();
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      Recv(out + bytes * r, bytes, r);
      Send(out + bytes * rank_, bytes, r);
    }
    return Wait("all-gather");
  }

  Status AllGatherV(const void* send, size_t bytes, std::vector<uint8_t>* recv, std::vector<size_t>* sizes) override {
    std::vector<uint64_t> counts(size_);
    const uint64_t mine = bytes;
    DI_RETURN_IF_ERROR(AllGather(&mine, sizeof(mine), counts.data()));
    std::vector<size_t> off(size_ + 1, 0);
    for (int r = 0; r < size_; ++r) off[r + 1] = off[r] + counts[r];
    recv->resize(off[size_]);
    if (bytes) std::memcpy(recv->data() + off[rank_], send, bytes);
    if (sizes) sizes->assign(counts.begin(), counts.end());
    if (size_ == 1) return Status::Ok();
    Begin();
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      Recv(recv->data() + off[r], counts[r], r);
      Send(send, bytes, r);
    }
    return Wait("all-gather-v");
  }

  Status ReduceScatterSum(const float* send, float* recv, size_t n) override {
    scratch_.resize(n * size_);
    Begin();
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      Recv(scratch_.data() + n * r, n * sizeof(float), r);
      Send(send + n * r, n * sizeof(float), r);
    }
    std::memcpy(scratch_.data() + n * rank_, send + n * rank_, n * sizeof(float));
    DI_RETURN_IF_ERROR(Wait("reduce-scatter"));
    std::memcpy(recv, scratch_.data(), n * sizeof(float));
    for (int r = 1; r < size_; ++r)
      for (size_t i = 0; i < n; ++i) recv[i] += scratch_[n * r + i];
    return Status::Ok();
  }

  Status AllToAllV(const void* send, const size_t* send_bytes, void* recv, const size_t* recv_bytes) override {
    const auto* in = static_cast<const uint8_t*>(send);
    auto* out = static_cast<uint8_t*>(recv);
    size_t so = 0, ro = 0, self_so = 0, self_ro = 0;
    Begin();
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) {
        self_so = so, self_ro = ro;
      } else {
        // Zero-byte pairs are skipped on both sides (both know the count).
        if (recv_bytes[r]) Recv(out + ro, recv_bytes[r], r);
        if (send_bytes[r]) Send(in + so, send_bytes[r], r);
      }
      so += send_bytes[r];
      ro += recv_bytes[r];
    }
    if (send_bytes[rank_] != recv_bytes[rank_]) return Internal("all-to-all-v: a rank sends itself a different size than it expects");
    if (send_bytes[rank_]) std::memmove(out + self_ro, in + self_so, send_bytes[rank_]);
    return Wait("all-to-all-v");
  }

  Status AllToAll(const void* send, size_t bytes, void* recv) override {
    std::vector<size_t> counts(size_, bytes);
    return AllToAllV(send, counts.data(), recv, counts.data());
  }

  Status Broadcast(void* data, size_t bytes, int root, double timeout_seconds) override {
    if (root < 0 || root >= size_) return InvalidArgument("broadcast: root outside the group");
    if (size_ == 1 || bytes == 0) return Status::Ok();
    Begin();
    if (rank_ == root) {
      for (int r = 0; r < size_; ++r)
        if (r != root) Send(data, bytes, r);
    } else {
      Recv(data, bytes, root);
    }
    return Wait("broadcast", timeout_seconds);
  }

  Status Barrier() override {
    const uint8_t token = 1;
    std::vector<uint8_t> all(size_);
    return AllGather(&token, 1, all.data());
  }

  StatusOr<std::unique_ptr<Communicator>> Split(int color, int key, const std::string& name) override {
    MPI_Comm sub;
    if (MPI_Comm_split(comm_, color, key, &sub) != MPI_SUCCESS) return Internal("MPI_Comm_split failed");
    return std::unique_ptr<Communicator>(new MpiCommunicator(sub, name));
  }

 private:
  void Begin() {
    reqs_.clear();
    peers_.clear();
  }
  void Send(const void* p, size_t bytes, int r) {
    if (bytes > kMaxMessage) AbortJob(name_ + ": a message of " + std::to_string(bytes) + " bytes exceeds the 1 GiB limit");
    reqs_.emplace_back();
    peers_.push_back(-1 - r);
    MPI_Isend(p, static_cast<int>(bytes), MPI_BYTE, r, kTag, comm_, &reqs_.back());
    bytes_sent_ += static_cast<int64_t>(bytes);
  }
  void Recv(void* p, size_t bytes, int r) {
    if (bytes > kMaxMessage) AbortJob(name_ + ": a message of " + std::to_string(bytes) + " bytes exceeds the 1 GiB limit");
    reqs_.emplace_back();
    peers_.push_back(r);
    MPI_Irecv(p, static_cast<int>(bytes), MPI_BYTE, r, kTag, comm_, &reqs_.back());
  }
  int WorldRank(int r) const {
    int w = -1;
    MPI_Group_translate_ranks(group_, 1, &r, world_group_, &w);
    return w;
  }
  // Polls until every request of the call completed: a few yields (the peer is usually just behind), then
  // sleeps growing to 1 ms. Past the timeout, names the ranks whose messages are missing and ends the job.
  Status Wait(const char* what, double timeout_seconds = -1) {
    const double timeout = timeout_seconds < 0 ? g_options.timeout_seconds : timeout_seconds;
    if (reqs_.empty()) return Status::Ok();
    const auto t0 = Clock::now();
    int polls = 0;
    auto sleep = std::chrono::microseconds(20);
    for (;;) {
      int done = 0;
      MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &done, MPI_STATUSES_IGNORE);
      if (done) break;
      if (++polls < 64) {
        sched_yield();
        continue;
      }
      std::this_thread::sleep_for(sleep);
      sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
      if (timeout > 0 && (polls & 63) == 0 && std::chrono::duration<double>(Clock::now() - t0).count() > timeout) {
        // Name the ranks whose messages did not arrive; when every receive completed (a root whose broadcast
        // waits on a stopped peer's rendezvous), the ranks that have not taken our sends.
        std::string missing, unsent;
        for (size_t i = 0; i < reqs_.size(); ++i) {
          if (reqs_[i] == MPI_REQUEST_NULL) continue;
          int flag = 0;
          MPI_Request_get_status(reqs_[i], &flag, MPI_STATUS_IGNORE);
          if (flag) continue;
          std::string& list = peers_[i] >= 0 ? missing : unsent;
          list += (list.empty() ? "" : ", ") + std::to_string(WorldRank(peers_[i] >= 0 ? peers_[i] : -1 - peers_[i]));
        }
        if (missing.empty()) missing = unsent;
        AbortJob("the " + name_ + " " + what + " waited " + std::to_string(static_cast<int>(timeout)) +
                 " s for rank(s) " + (missing.empty() ? std::string("?") : missing) +
                 " (dead or hung); ending the job");
      }
    }
    wait_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
    return Status::Ok();
  }

  MPI_Comm comm_;
  MPI_Group group_, world_group_;
  std::string name_;
  int rank_ = 0, size_ = 1;
  std::vector<MPI_Request> reqs_;
  std::vector<int> peers_;  // per request: the source rank of a receive, -1 - the destination of a send
  std::vector<float> scratch_;
};

// Liveness while the engine is idle (no collective would notice a dead or stopped peer then): a thread per rank
// joins a round with every other rank each second on its own communicator, an all-reduce-max of "I am stopping".
// A peer that stopped answering (SIGSTOP, a frozen machine) makes the round wait past the job timeout, which
// names the rank and ends the job like any other collective; the round's wait so far is what the server reports
// as 503 in the meantime. All ranks leave together: a rank that stops sets its flag, and the round that carries
// it ends every rank's loop.
class Heartbeat {
 public:
  explicit Heartbeat(MPI_Comm comm) : comm_(comm, "heartbeat") {
    thread_ = std::thread([this] { Run(); });
  }
  ~Heartbeat() { Stop(); }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  double Silence() const {
    const int64_t t = round_start_ns_.load(std::memory_order_relaxed);
    return t ? (Now() - t) / 1e9 : 0.0;
  }

 private:
  static int64_t Now() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }
  void Run() {
    for (;;) {
      int64_t stopping = 0;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, std::chrono::seconds(1), [&] { return stop_; });
        stopping = stop_;
      }
      round_start_ns_.store(Now(), std::memory_order_relaxed);
      const Status s = comm_.AllReduceMax(&stopping, 1);
      round_start_ns_.store(0, std::memory_order_relaxed);
      if (!s.ok()) AbortJob("heartbeat: " + s.ToString());
      if (stopping) return;
    }
  }

  MpiCommunicator comm_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<int64_t> round_start_ns_{0};
};

std::unique_ptr<Heartbeat> g_heartbeat;

}  // namespace

double PeerSilenceSeconds() { return g_heartbeat ? g_heartbeat->Silence() : 0.0; }

bool LaunchedByMpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_RANK");
}

Communicator& InitWorld(int* argc, char*** argv) {
  if (g_world) return *g_world;
  if (!LaunchedByMpi()) {
    g_world = MakeLocalCommunicator("world");
    return *g_world;
  }
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  g_mpi = true;
  if (provided < MPI_THREAD_MULTIPLE) {
    DI_LOG_ERROR("this MPI library provides thread level %d, not MPI_THREAD_MULTIPLE (the engine and executor "
                 "threads communicate concurrently)", provided);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  MPI_Comm dup, hb;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  MPI_Comm_dup(MPI_COMM_WORLD, &hb);
  g_world = std::make_unique<MpiCommunicator>(dup, "world");
  g_heartbeat = std::make_unique<Heartbeat>(hb);
  return *g_world;
}

Communicator& World() {
  if (!g_world) g_world = MakeLocalCommunicator("world");
  return *g_world;
}

void SetOptions(const Options& o) { g_options = o; }
const Options& GetOptions() { return g_options; }

void AbortJob(const std::string& why, int code) {
  int rank = 0;
  if (g_mpi) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "deepinfer: rank %d: %s\n", rank, why.c_str());
  std::fflush(stderr);
  if (g_mpi) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

void FinalizeWorld() {
  g_heartbeat.reset();  // the last round, with every rank
  g_world.reset();
  if (g_mpi) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
}

}  // namespace deepinfer::dist
