// Cancellation: one scope per thread, nested scopes restore the outer one.
#include "interp/cancel.h"

#include "interp/error.h"

namespace terrace {
namespace {
thread_local const CancelScope* current = nullptr;
}  // namespace

CancelScope::CancelScope(const std::atomic<bool>* flag, std::chrono::steady_clock::time_point deadline)
    : outer_(current), flag_(flag), deadline_(deadline) {
  current = this;
}

CancelScope::~CancelScope() { current = outer_; }

void check_cancelled() {
  const CancelScope* s = current;
  if (!s) return;
  if (s->flag_ && s->flag_->load(std::memory_order_relaxed))
    fail(ErrorCode::Cancelled, "the run was terminated (RunOptions::terminate)");
  if (s->deadline_ != std::chrono::steady_clock::time_point::max() && std::chrono::steady_clock::now() > s->deadline_)
    fail(ErrorCode::Cancelled, "the run passed its deadline (RunOptions::deadline)");
}

}  // namespace terrace
