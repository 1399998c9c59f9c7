// The one-process communicator: with a single rank every collective is the identity (or a copy).
#include <cstring>

#include "dist/communicator.h"

namespace deepinfer::dist {
namespace {

class LocalCommunicator final : public Communicator {
 public:
  explicit LocalCommunicator(std::string name) : name_(std::move(name)) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }
  Status AllReduceSum(float*, size_t) override { return Status::Ok(); }
  Status AllReduceMax(int64_t*, size_t) override { return Status::Ok(); }
  Status AllGather(const void* send, size_t bytes, void* recv) override {
    if (bytes && send != recv) std::memmove(recv, send, bytes);
    return Status::Ok();
  }
  Status AllGatherV(const void* send, size_t bytes, std::vector<uint8_t>* recv, std::vector<size_t>* sizes) override {
    const auto* p = static_cast<const uint8_t*>(send);
    recv->assign(p, p + bytes);
    if (sizes) sizes->assign(1, bytes);
    return Status::Ok();
  }
  Status ReduceScatterSum(const float* send, float* recv, size_t n) override {
    if (n && send != recv) std::memmove(recv, send, n * sizeof(float));
    return Status::Ok();
  }
  Status AllToAllV(const void* send, const size_t* send_bytes, void* recv, const size_t* recv_bytes) override {
    if (send_bytes[0] != recv_bytes[0]) return Internal("all-to-all-v: a rank sends itself a different size than it expects");
    if (send_bytes[0] && send != recv) std::memmove(recv, send, send_bytes[0]);
    return Status::Ok();
  }
  Status AllToAll(const void* send, size_t bytes, void* recv) override {
    if (bytes && send != recv) std::memmove(recv, send, bytes);
    return Status::Ok();
  }
  Status Broadcast(void*, size_t, int root, double) override {
    return root == 0 ? Status::Ok() : InvalidArgument("broadcast: root outside the group");
  }
  Status Barrier() override { return Status::Ok(); }
  StatusOr<std::unique_ptr<Communicator>> Split(int, int, const std::string& name) override {
    return std::unique_ptr<Communicator>(new LocalCommunicator(name));
  }

 private:
  std::string name_;
};

}  // namespace

std::unique_ptr<Communicator> MakeLocalCommunicator(const std::string& name) {
  return std::make_unique<LocalCommunicator>(name);
}

}  // namespace deepinfer::dist
