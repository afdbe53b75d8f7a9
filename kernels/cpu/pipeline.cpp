// run_cpu_passes(): tier 1's passes in order, each verified (kernels/cpu/pipeline.h).
#include "kernels/cpu/pipeline.h"

#include "kernels/plain_folds.h"
#include "kernels/split_lanes.h"
#include "kernels/verify.h"

namespace terrace::kernels::cpu {

LoweredFunc run_cpu_passes(const LoweredFunc& f) {
  LoweredFunc out = f;
  for (Stmt (*pass)(const Stmt&) : {split_lanes, plain_folds}) {
    out.body = pass(out.body);
    verify(out);
  }
  return out;
}

}  // namespace terrace::kernels::cpu
