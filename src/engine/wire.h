// The byte format requests and output events cross ranks in (the engine's control plane, dist_control.h): a
// flat little-endian encoding, written and read field by field in the same order. Never persisted, never
// exchanged between different builds (every rank runs the same binary), so it carries no version.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "deepinfer/status.h"
#include "engine/request.h"

namespace deepinfer::wire {

class Writer {
 public:
  template <class T>
  void Put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const size_t at = buf_.size();
    buf_.resize(at + sizeof(T));
    std::memcpy(buf_.data() + at, &v, sizeof(T));
  }
  template <class A, class B>
  void Put(const std::pair<A, B>& v) {
    Put(v.first);
    Put(v.second);
  }
  void PutString(const std::string& s) {
    Put<uint64_t>(s.size());
    buf_.insert(buf_.end(), s.begin(), s.end());
  }
  template <class T>
  void PutVector(const std::vector<T>& v) {
    Put<uint64_t>(v.size());
    for (const T& x : v) Put(x);
  }
  std::vector<uint8_t>& bytes() { return buf_; }

 private:
  std::vector<uint8_t> buf_;
};

// Reads what a Writer wrote; a read past the end sets !ok() and returns zeros (the caller reports it).
class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), end_(p + n) {}
  template <class T>
  T Get() {
    static_assert(std::is_trivially_copyable_v<T>);
    T v{};
    if (static_cast<size_t>(end_ - p_) < sizeof(T)) {
      ok_ = false;
      p_ = end_;
      return v;
    }
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  template <class T>
  void Read(T& v) {
    v = Get<T>();
  }
  template <class A, class B>
  void Read(std::pair<A, B>& v) {
    v.first = Get<A>();
    v.second = Get<B>();
  }
  std::string GetString() {
    const uint64_t n = Get<uint64_t>();
    if (static_cast<uint64_t>(end_ - p_) < n) {
      ok_ = false;
      p_ = end_;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  template <class T>
  std::vector<T> GetVector() {
    const uint64_t n = Get<uint64_t>();
    std::vector<T> v;
    if (n > static_cast<uint64_t>(end_ - p_) / sizeof(T)) {
      ok_ = false;
      p_ = end_;
      return v;
    }
    v.reserve(n);
    for (uint64_t i = 0; i < n; ++i) {
      T x{};
      Read(x);
      v.push_back(x);
    }
    return v;
  }
  bool ok() const { return ok_; }
  bool done() const { return p_ == end_; }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
  bool ok_ = true;
};

void PutParams(Writer& w, const RequestParams& p);
RequestParams GetParams(Reader& r);
void PutOutput(Writer& w, const RequestOutput& o);
RequestOutput GetOutput(Reader& r);

}  // namespace deepinfer::wire
