// Status / StatusOr: errors as values across module borders (no exceptions cross them).
#pragma once
#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace deepinfer {

enum class StatusCode { kOk = 0, kInvalidArgument, kNotFound, kDataLoss, kUnimplemented, kIoError, kOutOfRange, kInternal };

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string msg) : code_(code), msg_(std::move(msg)) {}
  static Status Ok() { return {}; }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return msg_; }
  std::string ToString() const;
  // Prefixes context ("while loading X: ") to the message of a failed status.
  Status WithContext(const std::string& ctx) const {
    return ok() ? *this : Status(code_, ctx + ": " + msg_);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string msg_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

template <typename T>
class StatusOr {
 public:
  StatusOr(Status s) : v_(std::move(s)) { assert(!std::get<Status>(v_).ok()); }
  StatusOr(T value) : v_(std::move(value)) {}
  bool ok() const { return v_.index() == 1; }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace deepinfer

#define DI_CONCAT_INNER(a, b) a##b
#define DI_CONCAT(a, b) DI_CONCAT_INNER(a, b)
#define DI_RETURN_IF_ERROR(expr)                  \
  do {                                            \
    ::deepinfer::Status _st = (expr);             \
    if (!_st.ok()) return _st;                    \
  } while (0)
#define DI_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
#define DI_ASSIGN_OR_RETURN(lhs, expr) DI_ASSIGN_OR_RETURN_IMPL(DI_CONCAT(_sor_, __LINE__), lhs, expr)
