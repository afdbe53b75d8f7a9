// The C-family renderer: kernel IR -> one self-contained C++ (tier 1) or CUDA C (tier 2) source.
#pragma once
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/ir.h"
#include "kernels/schedule_cuda.h"

namespace terrace::kernels {

enum class Dialect { Cpp, Cuda };

// Renders `f` as a translation unit that includes no header (so the compiler parses only a few
// hundred lines): a prelude of fixed-width typedefs, 16-bit float conversions and branch-free
// vectorisable float32 math (exp, log, tanh, erf, sigmoid, pow, sin, cos, ...; float64 math goes
// to libm), then the kernel.
//   Cpp:  extern "C" void <name>(void** buffers, int64_t begin, int64_t end)
//         buffers[slot] is the array of buffer `slot`; the outermost loop runs over [begin, end).
//   Cuda: extern "C" __global__ void <name>(T0* in0, ..., int64_t begin, int64_t end)
//         with the Parallel loop mapped onto threads as schedule_cuda(f) decides
//         (kernels/schedule_cuda.h) and kernels/gpu's passes write into the IR: correct for any
//         grid and any block of whole warps, fastest with cuda_launch's.
// Buffers must not overlap (they are declared __restrict).
std::string render_c(const LoweredFunc& f, Dialect dialect);

// One CUDA translation unit holding every kernel of `funcs` (a region's: NVRTC's cost is mostly
// per program) after one prelude with what they use; `comment` heads it ("region 3 (Add,Relu)").
// Throws InvalidArgument when two kernels share a name.
std::string render_cuda_program(std::span<const LoweredFunc> funcs, std::string_view comment);
// The same with each kernel's schedule_cuda() already decided (schedules[i] is funcs[i]'s), so that
// a caller that also launches the kernels decides each schedule once.
std::string render_cuda_program(std::span<const LoweredFunc> funcs, std::span<const CudaSchedule> schedules,
                                std::string_view comment);

// A kernel whose rows move by 16-byte vectors (CudaSchedule::row_vector) reads and writes them
// with vector accesses only, which need each row of those buffers 16-byte aligned: the
// parameters (indices into f.buffers) whose device pointers must be multiples of 16 for it to run
// (the schedule proved the rows' offsets are), empty for every other kernel. Where one is not, the
// launch takes cuda_element_copy_name(f.name) instead, which render_cuda_program renders beside it:
// the same kernel element by element (same parameters, launch and results). A test at every
// access inside the kernel kept both forms' values live, which cost registers and speed
// (bench/RESULTS.md).
std::vector<size_t> cuda_aligned_params(const LoweredFunc& f);
std::vector<size_t> cuda_aligned_params(const LoweredFunc& f, const CudaSchedule& schedule);  // f's
std::string cuda_element_copy_name(const std::string& kernel);

// The whole prelude (for tests of the math functions).
std::string render_prelude(Dialect dialect);
// The dialect's header and only those prelude functions that `code` calls, directly or through
// another prelude function: a kernel that uses tanh parses exp and abs, not erf or pow.
std::string render_prelude(Dialect dialect, std::string_view code);

}  // namespace terrace::kernels
