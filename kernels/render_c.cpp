// render_c(): kernel IR -> C++ or CUDA C. The dialects differ in the entries of DialectTraits, in
// how a loop header is spelled (loop_header) and, in CUDA, in the Parallel loop, which the
// kernel's schedule (kernels/schedule_cuda.h, decided once per kernel) maps onto threads: a
// grid-stride loop per iteration, or per element with 16-byte vector loads and stores
// (emit_per_element), or a warp or a block per row of a reduction, which kernels/gpu's passes
// write into the IR (GPU loop kinds, shared arrays, fold nodes and barriers) for CRenderer to print.
#include "kernels/render_c.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "kernels/cpu/pipeline.h"
#include "kernels/gpu/pipeline.h"
#include "kernels/mutator.h"
#include "kernels/render_c_internal.h"
#include "kernels/schedule_cuda.h"
#include "kernels/visitor.h"


namespace terrace::kernels {
namespace render_detail {

const DialectTraits& traits(Dialect d) {
  // Four vectors in flight per iteration: LLVM's cost model declines to interleave a long math
  // chain (exp, a division), which then waits on its own latency. On one Zen 3 core,
  // bench/elementwise_bench's chain took 46 ms not interleaved, 36 by 2 (by 4 spilled registers
  // while tanh used exp), and with the rational tanh 28.5 by 2 and 20.6 by 4.
  static const DialectTraits cpp{"extern \"C\" void", "__restrict", true,
                                 "#pragma clang loop vectorize(enable) interleave_count(4)\n"};
  static const DialectTraits cuda{"extern \"C\" __global__ void", "__restrict__", false, ""};
  return d == Dialect::Cpp ? cpp : cuda;
}

const char* c_type(DType t) {
  switch (t) {
    case DType::Float32: return "float";
    case DType::Float64: return "double";
    case DType::Int8: return "int8_t";
    case DType::UInt8: return "uint8_t";
    case DType::Int16: return "int16_t";
    case DType::UInt16: return "uint16_t";
    case DType::Int32: return "int32_t";
    case DType::UInt32: return "uint32_t";
    case DType::Int64: return "int64_t";
    case DType::UInt64: return "uint64_t";
    case DType::Bool: return "bool";
    case DType::Float16: case DType::BFloat16: return "uint16_t";  // storage bits
    default: fail(ErrorCode::NotImplemented, "render_c: dtype ", dtype_name(t));
  }
}

// The unsigned type signed integer arithmetic wraps in (C leaves signed overflow undefined; the
// interpreter wraps).
const char* wrap_type(DType t) {
  switch (t) {
    case DType::Int8: case DType::Int16: case DType::Int32: return "uint32_t";
    case DType::Int64: return "uint64_t";
    default: return nullptr;
  }
}

std::string float_literal(double v, DType t) {
  const char* f = t == DType::Float32 ? "f" : "";
  if (std::isnan(v)) return std::string("(0.0") + f + " / 0.0" + f + ")";
  if (std::isinf(v)) return std::string(v < 0 ? "(-1.0" : "(1.0") + f + " / 0.0" + f + ")";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);  // hex: exact
  return std::string(buf) + f;
}

std::string int_literal(int64_t v, DType t) {
  if (t == DType::Bool) return v ? "true" : "false";
  std::string lit = v == std::numeric_limits<int64_t>::min() ? "(-9223372036854775807LL - 1)"
                                                             : std::to_string(v) + "LL";
  return std::string("((") + c_type(t) + ")" + lit + ")";
}

std::string lower_name(const char* s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// True when `s` reads variable `name` other than in the index of a vector access (a lane whose
// every access is a vector's needs no index of its own: NVRTC would warn of an unused variable).
bool reads_var(const Stmt& s, const std::string& name) {
  struct Finder : IRVisitor {
    const std::string& name;
    bool found = false;
    explicit Finder(const std::string& n) : name(n) {}
    void visit_node(const Var* op) override { found = found || op->name == name; }
    void visit_node(const Load* op) override {
      if (op->vector_lanes == 1) IRVisitor::visit_node(op);
    }
    void visit_node(const Store* op) override {
      if (op->vector_lanes == 1) visit(op->index);
      visit(op->value);
    }
  } f(name);
  f.visit(s);
  return f.found;
}


}  // namespace render_detail

using namespace render_detail;

namespace {

// The kernel alone, without the prelude; in CUDA, after the GPU passes with `schedule` (f's).
// `element_copy`: a kernel whose rows move by vectors (CudaSchedule::row_vector) rendered element
// by element instead, as cuda_element_copy_name(f.name) (same parameters, launch and results).
std::string render_kernel(const LoweredFunc& f, Dialect dialect, const CudaSchedule* schedule = nullptr,
                          bool element_copy = false) {
  const DialectTraits& t = traits(dialect);
  StoredBuffers stored;
  stored.visit(f.body);
  std::ostringstream os;
  auto decl = [&](const Buffer& b) {
    bool is_const = stored.slots.count(b.slot) == 0;
    return std::string(is_const ? "const " : "") + c_type(b.dtype) + "* " + t.restrict_kw + " " + b.name;
  };
  // Each dialect's pipeline makes the device-neutral kernel the IR its renderer prints.
  std::optional<gpu::GpuKernel> k;
  std::optional<LoweredFunc> c;
  if (dialect == Dialect::Cuda) {
    CudaSchedule s = *schedule;
    if (element_copy) s.row_vector = 1;
    k = gpu::run_gpu_passes(f, std::move(s));
    schedule = &k->schedule;
  } else {
    c = cpu::run_cpu_passes(f);
  }
  os << t.kernel_qualifier << " ";
  if (schedule && schedule->mapping == CudaMapping::PerRowBlock)
    os << "__launch_bounds__(" << schedule->block << ", " << row_block_min_blocks(*schedule) << ") ";
  os << (element_copy ? cuda_element_copy_name(f.name) : f.name) << "(";
  if (t.buffers_as_array) {
    os << "void** buffers, int64_t begin, int64_t end) {\n";
    for (const Buffer& b : f.buffers)
      os << "  " << decl(b) << " = (" << (stored.slots.count(b.slot) ? "" : "const ")
         << c_type(b.dtype) << "*)buffers[" << b.slot << "];\n";
  } else {
    for (const Buffer& b : f.buffers) os << decl(b) << ", ";
    os << "int64_t begin, int64_t end) {\n";
  }
  if (schedule && schedule->mapping == CudaMapping::Single)  // any launch: one thread runs it
    os << "  if (blockIdx.x != 0 || threadIdx.x != 0) return;\n";
  CRenderer r(os, dialect, schedule);
  r.emit(k ? k->func.body : c->body);
  os << "}\n";
  return os.str();
}

// TERRACE_RENDER_DUMP_DIR: every rendered source written there as <name>-<hash of the text>, so
// that two builds' renders of the same kernels compare file by file (tools and tests alike).
// Best effort: a dump that cannot be written changes nothing.
std::string dumped(const std::string& name, std::string source, Dialect d) {
  const char* dir = std::getenv("TERRACE_RENDER_DUMP_DIR");
  if (!dir || !*dir) return source;
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : source) h = (h ^ c) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::ofstream(std::filesystem::path(dir) / (name + "-" + hex + (d == Dialect::Cuda ? ".cu" : ".cpp")),
                std::ios::binary) << source;
  return source;
}

}  // namespace

std::string render_c(const LoweredFunc& f, Dialect dialect) {
  std::optional<CudaSchedule> s;
  if (dialect == Dialect::Cuda) s = schedule_cuda(f);
  std::string kernel = render_kernel(f, dialect, s ? &*s : nullptr);
  return dumped(f.name, "// Generated by Terrace from kernel " + f.name + ".\n" + render_prelude(dialect, kernel) +
                            "\n" + kernel, dialect);
}

std::string cuda_element_copy_name(const std::string& kernel) { return kernel + "_e"; }

std::vector<size_t> cuda_aligned_params(const LoweredFunc& f) { return cuda_aligned_params(f, schedule_cuda(f)); }

std::vector<size_t> cuda_aligned_params(const LoweredFunc& f, const CudaSchedule& s) {
  std::vector<size_t> params;
  if (s.row_vector == 1) return params;
  std::set<std::string> names;
  for (const CudaSchedule::RowCache& c : s.row_caches) names.insert(c.buffer.name);
  for (const IRNode* n : s.vector_loads) names.insert(static_cast<const Load*>(n)->buffer.name);
  for (size_t i = 0; i < f.buffers.size(); ++i)
    if (names.count(f.buffers[i].name)) params.push_back(i);
  return params;
}

std::string render_cuda_program(std::span<const LoweredFunc> funcs, std::string_view comment) {
  std::vector<CudaSchedule> schedules;
  for (const LoweredFunc& f : funcs) schedules.push_back(schedule_cuda(f));
  return render_cuda_program(funcs, schedules, comment);
}

std::string render_cuda_program(std::span<const LoweredFunc> funcs, std::span<const CudaSchedule> schedules,
                                std::string_view comment) {
  TERRACE_ASSERT(funcs.size() == schedules.size(), "render_cuda_program: a schedule per kernel");
  std::set<std::string> names;
  std::string kernels;
  for (size_t i = 0; i < funcs.size(); ++i) {
    const LoweredFunc& f = funcs[i];
    TERRACE_CHECK(names.insert(f.name).second, InvalidArgument, "render_cuda_program: two kernels are named '",
                  f.name, "' (", comment, ")");
    kernels += render_kernel(f, Dialect::Cuda, &schedules[i]) + "\n";
    if (!cuda_aligned_params(f, schedules[i]).empty())
      kernels += render_kernel(f, Dialect::Cuda, &schedules[i], true) + "\n";
  }
  return dumped("program", "// Generated by Terrace: " + std::string(comment) + " (" + std::to_string(funcs.size()) +
                               " kernels).\n" + render_prelude(Dialect::Cuda, kernels) + "\n" + kernels,
                Dialect::Cuda);
}

}  // namespace terrace::kernels
