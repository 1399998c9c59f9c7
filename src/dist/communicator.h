// The communicator every multi-process part of deepinfer talks through: a small set of collectives over a
// group of ranks, with two implementations, one process (local_comm.cc) and Open MPI (mpi_comm.cc). NCCL would
// be a third: the calls take plain host buffers and byte or element counts, nothing MPI-specific.
//
// Reproducibility: every reduction sums in a fixed order (rank 0, 1, ..., P-1 for each element, whoever computes
// it), never in an order the runtime picks by message size, so a result does not change from run to run or
// with the batch size (the ring and tree algorithms of MPI_Allreduce would: ../shared/research/moe_parallel.md 5.4, outside the repository).
//
// Every call is collective: all ranks of the group make the same calls in the same order. A rank that stops
// answering ends the job (the MPI implementation aborts every rank after Options::timeout_seconds and names the
// ranks it waited for) rather than leaving the others hung. Idle waits sleep: a rank waiting for a peer does not
// spin a core.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The group's name in logs and errors ("world", "tp", ...).
  virtual const std::string& name() const = 0;

  // In place: every element becomes the sum over ranks, added in rank order 0..P-1 (identical bits everywhere).
  virtual Status AllReduceSum(float* data, size_t n) = 0;
  // In place: element-wise maximum (integers: exact in any order).
  virtual Status AllReduceMax(int64_t* data, size_t n) = 0;
  // recv (size() * bytes) receives every rank's `bytes` bytes of send, in rank order.
  virtual Status AllGather(const void* send, size_t bytes, void* recv) = 0;
  // Variable-size all-gather: recv gets every rank's bytes in rank order; sizes (optional) each rank's count.
  virtual Status AllGatherV(const void* send, size_t bytes, std::vector<uint8_t>* recv, std::vector<size_t>* sizes) = 0;
  // send holds size() slices of n floats (slice r for rank r); recv (n floats) gets the sum of every rank's
  // slice rank(), in rank order.
  virtual Status ReduceScatterSum(const float* send, float* recv, size_t n) = 0;
  // send_bytes[r] bytes go to rank r (packed in rank order in send); recv_bytes[r] bytes arrive from rank r
  // (packed in rank order in recv). Both count arrays have size() entries; callers exchange counts first
  // (AllToAll of the counts) when the receiver does not know them.
  virtual Status AllToAllV(const void* send, const size_t* send_bytes, void* recv, const size_t* recv_bytes) = 0;
  // Fixed-size all-to-all: `bytes` to and from every rank.
  virtual Status AllToAll(const void* send, size_t bytes, void* recv) = 0;
  // timeout_seconds: < 0 the job's timeout (Options), 0 wait forever (an idle follower waiting for work).
  virtual Status Broadcast(void* data, size_t bytes, int root, double timeout_seconds = -1) = 0;
  virtual Status Barrier() = 0;
  // A new communicator over the ranks passing the same color, ordered by key (MPI_Comm_split).
  virtual StatusOr<std::unique_ptr<Communicator>> Split(int color, int key, const std::string& name) = 0;

  // Traffic through this communicator since creation (benchmarks): bytes this rank sent to other ranks.
  int64_t bytes_sent() const { return bytes_sent_; }
  double wait_seconds() const { return wait_seconds_; }

 protected:
  int64_t bytes_sent_ = 0;
  double wait_seconds_ = 0;
};

// The one-process group (size 1): every collective is a copy or nothing.
std::unique_ptr<Communicator> MakeLocalCommunicator(const std::string& name = "world");

struct Options {
  double timeout_seconds = 30;  // a collective waiting longer than this ends the job, naming who it waited for
};

// Process-wide start-up. Under mpirun (Open MPI's or PMIx's environment variables present) initializes MPI
// with thread support (the engine thread and the executor thread use different communicators) and returns the
// MPI world; otherwise (a plain run) the local group, and MPI is never initialized.
Communicator& InitWorld(int* argc, char*** argv);
Communicator& World();        // InitWorld's result (the local group if InitWorld never ran)
bool LaunchedByMpi();         // this process was started by mpirun
void SetOptions(const Options& o);
const Options& GetOptions();
// Under mpirun every rank joins a liveness round with all others each second (a thread of its own), so a peer that
// stops answering ends the job within the timeout even while the engine is idle. This is how long the current
// round has waited (0: every rank answered within the last second or so; always 0 without MPI).
double PeerSilenceSeconds();
// Ends the whole job from any rank: logs the reason on this rank and aborts every rank (MPI_Abort).
[[noreturn]] void AbortJob(const std::string& why, int code = 3);
// MPI_Finalize when MPI was initialized (call once, at exit, after every communicator is destroyed).
void FinalizeWorld();

}  // namespace deepinfer::dist
