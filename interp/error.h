// terrace::Error: the one exception type; every failure a caller can see carries a code and a message.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace terrace {

#define TERRACE_ERROR_CODES(X)                                                   \
  X(InvalidModel, "invalid model")       /* the model file or graph is malformed */ \
  X(InvalidArgument, "invalid argument") /* a call's arguments are wrong */      \
  X(NotImplemented, "not implemented")   /* a valid op or feature Terrace lacks */ \
  X(RuntimeError, "runtime error")       /* a kernel failed on valid input */    \
  X(CompileFailed, "compile failed")     /* a tier's compiler rejected a region */ \
  X(OutOfMemory, "out of memory")                                               \
  X(Cancelled, "cancelled")                                                     \
  X(IoError, "i/o error")                                                       \
  X(Internal, "internal error") /* a bug in Terrace */

enum class ErrorCode {
#define X(name, text) name,
  TERRACE_ERROR_CODES(X)
#undef X
};

const char* error_code_name(ErrorCode code);  // "InvalidModel", ...

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(std::string(error_code_name(code)) + ": " + message),
        code_(code), message_(message) {}
  ErrorCode code() const { return code_; }
  // The message without the code prefix.
  const std::string& message() const { return message_; }

 private:
  ErrorCode code_;
  std::string message_;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// Throws terrace::Error(code, concatenation of the message parts).
template <typename... Args>
[[noreturn]] void fail(ErrorCode code, const Args&... args) {
  throw Error(code, detail::concat(args...));
}

}  // namespace terrace

// A user error: the caller's input is wrong.
#define TERRACE_CHECK(cond, code, ...) \
  do {                                 \
    if (!(cond)) ::terrace::fail(::terrace::ErrorCode::code, __VA_ARGS__); \
  } while (0)

// An internal assertion: if it fails, Terrace has a bug.
#define TERRACE_ASSERT(cond, ...)                                                   \
  do {                                                                              \
    if (!(cond))                                                                    \
      ::terrace::fail(::terrace::ErrorCode::Internal, __FILE__, ":", __LINE__, ": ", \
                      "assertion '" #cond "' failed. " __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)
