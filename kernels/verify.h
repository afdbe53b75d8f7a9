// Structural checks of a lowered kernel, run after lowering and after each pass.
#pragma once
#include "kernels/ir.h"

namespace terrace::kernels {

// Throws an Internal error naming the problem if `f` is malformed: a variable used out of scope
// or with two types, a name bound twice in one scope, a buffer that is not a parameter, a
// non-int64 index or bound, a Parallel loop that is not outermost, arithmetic on 16-bit float
// storage types (they are only loaded, stored and cast), or a fold whose value reads its accumulator.
void verify(const LoweredFunc& f);

}  // namespace terrace::kernels
