#include "deepinfer/status.h"

namespace deepinfer {

std::string Status::ToString() const {
  if (ok()) return "OK";
  const char* name = "error";
  switch (code_) {
    case StatusCode::kInvalidArgument: name = "invalid argument"; break;
    case StatusCode::kNotFound: name = "not found"; break;
    case StatusCode::kDataLoss: name = "corrupt data"; break;
    case StatusCode::kUnimplemented: name = "unsupported"; break;
    case StatusCode::kIoError: name = "I/O error"; break;
    case StatusCode::kOutOfRange: name = "out of range"; break;
    case StatusCode::kInternal: name = "internal error"; break;
    default: break;
  }
  return std::string(name) + ": " + msg_;
}

}  // namespace deepinfer
