// kernels/gpu's passes (pipeline.h, map_rows.h): the IR each leaves, printed by the IR printer;
// the GPU nodes through the verifier, the printer and the mutator; and a kernel rendered twice
// from two lowerings gives one source.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "interp/error.h"
#include "kernels/gpu/pipeline.h"
#include "kernels/lower.h"
#include "kernels/lower_op.h"
#include "kernels/mutator.h"
#include "kernels/plain_folds.h"
#include "kernels/printer.h"
#include "kernels/render_c.h"
#include "kernels/verify.h"
#include "kernels/visitor.h"
#include "tests/support/attrs.h"
#include "tests/support/kernel_builders.h"

namespace terrace::kernels {
namespace {

using testing::int_attr;

LoweredFunc reduce_sum_rows(int64_t rows, int64_t cols) { return testing::reduce_sum_kernels(rows, cols).calls.at(0).func; }

LoweredFunc layernorm_rows(int64_t rows, int64_t cols) {
  Node n;
  n.op = Op::LayerNormalization;
  n.name = "layernorm";
  n.inputs = {0, 1, 2};
  n.outputs = {3};
  n.attrs["axis"] = int_attr(-1);
  std::vector<OpInput> in{OpInput{{DType::Float32, {rows, cols}}}};
  in.insert(in.end(), 2, OpInput{{DType::Float32, {cols}}});
  return lower_op(n, in, "layernorm").calls.at(0).func;
}

LoweredFunc softmax_rows(int64_t rows, int64_t cols) {
  Node n;
  n.op = Op::Softmax;
  n.name = "softmax";
  n.inputs = {0};
  n.outputs = {1};
  n.attrs["axis"] = int_attr(-1);
  return lower_op(n, {OpInput{{DType::Float32, {rows, cols}}}}, "softmax").calls.at(0).func;
}

// The passes' names and the IR after each, as the observer sees them.
struct Seen {
  std::vector<std::string> passes, ir;
  gpu::PassObserver observer() {
    return [this](const std::string& pass, const LoweredFunc& f) {
      passes.push_back(pass);
      ir.push_back(to_string(f));
    };
  }
};

// Counts the nodes of each GPU kind in a body.
struct GpuNodes : IRVisitor {
  std::map<std::string, int> count;
  void visit_node(const For* op) override {
    ++count[for_kind_name(op->for_kind)];
    IRVisitor::visit_node(op);
  }
  void visit_node(const Allocate* op) override {
    count[op->scope == MemoryScope::Shared ? "shared" : "local"] += 1;
    IRVisitor::visit_node(op);
  }
  void visit_node(const Barrier* op) override { ++count[op->scope == BarrierScope::Block ? "barrier block" : "barrier warp"]; }
  void visit_node(const FirstThread* op) override {
    ++count["first_thread"];
    IRVisitor::visit_node(op);
  }
  void visit_node(const FoldStart*) override { ++count["fold_start"]; }
  void visit_node(const WarpReduce*) override { ++count["warp_reduce"]; }
  void visit_node(const BlockReduce* op) override { ++count[op->read_back ? "read_back" : "block_reduce"]; }
};

TEST(GpuPasses, warp_row_sum_spreads_its_loop_over_lanes_and_combines_by_shuffles) {
  const LoweredFunc f = reduce_sum_rows(32, 100);
  Seen seen;
  const gpu::GpuKernel k = gpu::run_gpu_passes(f, schedule_cuda(f), seen.observer());
  EXPECT_EQ(seen.passes, (std::vector<std::string>{"map_elements", "map_rows", "cache_rows", "plain_folds"}));
  ASSERT_EQ(seen.ir.size(), 4u);
  EXPECT_EQ(seen.ir[0], to_string(f));  // not an elementwise kernel
  EXPECT_EQ(seen.ir[2], seen.ir[1]);    // nor a block's row
  // The fold, its combines across the lanes written, stays a fold until plain_folds makes it a store.
  EXPECT_NE(seen.ir[1].find("    fold r: acc[0] <- add(float64(in0[(base + r0)]))\n"), std::string::npos) << seen.ir[1];
  EXPECT_EQ(seen.ir[3], R"(kernel sum(out0: float32*, in0: float32*) over [0, 32), 100 elements per iteration
for u in [begin, end) gpu_warp {
  let base: int64 = (0 + (u * 100))
  let obase: int64 = u
  allocate acc: float64[1]
  acc[0] = 0
  fold_start acc[0] by (acc[0] + tr_other) from 0
  for r0 in [0, 100) gpu_lane {
    acc[0] = (acc[0] + float64(in0[(base + r0)]))
  }
  warp_reduce acc[0] by (acc[0] + tr_other) from 0
  barrier warp
  first_thread {
    out0[(obase + 0)] = float32(acc[0])
  }
  barrier warp
}
)");
  // The lowered kernel is untouched: the passes build a new body around its unchanged nodes.
  EXPECT_NE(to_string(f).find("parallel"), std::string::npos);
  EXPECT_EQ(to_string(k.func.body), seen.ir[3].substr(seen.ir[3].find('\n') + 1));
}

TEST(GpuPasses, softmax_block_row_in_registers_folds_its_slots_in_registers_and_combines_one_max) {
  const LoweredFunc f = softmax_rows(64, 4096);
  const gpu::GpuKernel k = gpu::run_gpu_passes(f, schedule_cuda(f));
  GpuNodes n;
  n.visit(k.func.body);
  EXPECT_EQ(n.count["gpu_block"], 1);
  EXPECT_EQ(n.count["parallel"], 0);
  // The max nest, the exp-and-sum loop and the scaling loop: each over the row in registers.
  EXPECT_EQ(n.count["gpu_registers"], 3);
  EXPECT_EQ(n.count["gpu_thread"], 0);
  // The max's slots and the sum: a shared part each (the rows are in registers, not shared).
  EXPECT_EQ(n.count["shared"], 2);
  EXPECT_EQ(n.count["warp_reduce"], 2);
  EXPECT_EQ(n.count["block_reduce"], 2);
  EXPECT_EQ(n.count["read_back"], 0);  // the max's slots combine as one value (a whole fold)
  const std::string ir = to_string(k.func);
  EXPECT_NE(ir.find("allocate shared tr_part0: float32[4]\nallocate shared tr_part1: float64[4]\n"), std::string::npos)
      << ir;
  EXPECT_NE(ir.find("fold_start mlanes[tr_s] by select((tr_other > mlanes[tr_s]), tr_other, mlanes[tr_s]) slots 16 "
                    "whole via tr_part0 of 4 warps in registers 4 of 16"),
            std::string::npos)
      << ir;
}

// The IR's accesses of `buffer` itself (not of its copies tr_reg_<buffer>, tr_row_<buffer>).
size_t accesses_of(const std::string& ir, const std::string& buffer) {
  size_t n = 0;
  for (size_t at = ir.find(buffer + "["); at != std::string::npos; at = ir.find(buffer + "[", at + 1))
    n += at == 0 || ir[at - 1] != '_';
  return n;
}

TEST(GpuPasses, rows_in_registers_are_read_once_and_written_once_by_vectors) {
  const LoweredFunc f = softmax_rows(64, 4096);
  const std::string ir = to_string(gpu::run_gpu_passes(f, schedule_cuda(f)).func);
  EXPECT_NE(ir.find("  let obase: int64 = u\n  allocate tr_reg_in0: float32[32]\n  row_copy tr_reg_in0 <- in0 at base, "
                    "4096 elements by 128 threads in registers by 4\n  allocate tr_reg_out0: float32[32]\n"),
            std::string::npos)
      << ir;
  EXPECT_NE(ir.find("row_copy out0 <- tr_reg_out0 at base, 4096 elements by 128 threads in registers by 4"),
            std::string::npos)
      << ir;
  EXPECT_NE(ir.find("Exp((tr_reg_in0[tr_k] - mx[0]))"), std::string::npos) << ir;
  EXPECT_EQ(accesses_of(ir, "in0"), 0u) << ir;
  EXPECT_EQ(accesses_of(ir, "out0"), 0u) << ir;
  // Without vectors (the kernel's element-by-element twin) every store writes memory as well.
  CudaSchedule element = schedule_cuda(f);
  element.row_vector = 1;
  const std::string twin = to_string(gpu::run_gpu_passes(f, element).func);
  EXPECT_EQ(twin.find("row_copy out0"), std::string::npos) << twin;
  EXPECT_NE(twin.find("out0[(base + r0)] = tr_reg_out0[tr_k]"), std::string::npos) << twin;
  // A layernorm's scale and bias: read by 16-byte vectors in its register loop.
  const LoweredFunc norm = layernorm_rows(64, 4096);
  const std::string norm_ir = to_string(gpu::run_gpu_passes(norm, schedule_cuda(norm)).func);
  EXPECT_NE(norm_ir.find("in1[r0]<4>"), std::string::npos) << norm_ir;
  EXPECT_NE(norm_ir.find("in2[r0]<4>"), std::string::npos) << norm_ir;
}

TEST(GpuPasses, shared_rows_and_slot_folds_read_back_after_a_second_barrier) {
  const LoweredFunc f = softmax_rows(8, 5001);
  const gpu::GpuKernel k = gpu::run_gpu_passes(f, schedule_cuda(f));
  GpuNodes n;
  n.visit(k.func.body);
  EXPECT_EQ(n.count["shared"], 4);  // the input's row, the slots' part, the tail max's and the sum's
  EXPECT_EQ(n.count["read_back"], 1);
  EXPECT_EQ(n.count["gpu_thread"], 4);
  const std::string ir = to_string(k.func);
  EXPECT_EQ(ir.find("allocate shared tr_row_in0: float32[5157]\nallocate shared tr_part0: float32[64]\n"),
            ir.find('\n') + 1)
      << ir;
  // The input's row copied in (by 16 bytes where aligned) before the block reads it from there.
  EXPECT_NE(ir.find("  let obase: int64 = u\n  row_copy tr_row_in0 <- in0 at base, 5001 elements by 128 threads\n"
                    "  barrier block\n"),
            std::string::npos)
      << ir;
  EXPECT_EQ(accesses_of(ir, "in0"), 0u) << ir;
}

// [rows, cols] + [cols] as one fusion group.
LoweredFunc bias_add(int64_t rows, int64_t cols) {
  return testing::binary_kernel("bias", Op::Add, DType::Float32, {rows, cols}, {cols});
}

TEST(GpuPasses, elementwise_rows_flatten_into_one_range_with_their_accesses_by_four_lanes) {
  const LoweredFunc f = bias_add(64, 768);
  Seen seen;
  gpu::run_gpu_passes(f, schedule_cuda(f), seen.observer());
  ASSERT_EQ(seen.ir.size(), 4u);
  EXPECT_EQ(seen.ir[0], seen.ir[3]);  // not a row-wise kernel, and without folds
  EXPECT_EQ(seen.ir[0], R"(kernel bias(in0: float32*, in1: float32*, out0: float32*) over [0, 64), 768 elements per iteration
for o in [begin, end) gpu_elements {
  let base0: int64 = (o * 768)
  let base2: int64 = (o * 768)
  for i in [0, 768) gpu_elements {
    let x0: float32 = in0[(base0 + i)]<4>
    let x1: float32 = in1[i]<4>
    let v0: float32 = (x0 + x1)
    out0[(base2 + i)]<4> = v0
  }
}
)");
  // 7 columns: no vector divides the rows, nothing is marked.
  const LoweredFunc seven = bias_add(10, 7);
  const std::string ir = to_string(gpu::run_gpu_passes(seven, schedule_cuda(seven)).func);
  EXPECT_NE(ir.find("gpu_elements"), std::string::npos) << ir;
  EXPECT_EQ(ir.find("<"), std::string::npos) << ir;
}

TEST(GpuPasses, other_mappings_leave_the_kernel_as_scheduled_with_its_folds_as_stores) {
  for (const LoweredFunc& f : {reduce_sum_rows(64, 8), softmax_rows(64, 16)}) {
    const CudaSchedule s = schedule_cuda(f);
    ASSERT_EQ(s.mapping, CudaMapping::PerIteration);
    Seen seen;
    const gpu::GpuKernel k = gpu::run_gpu_passes(f, s, seen.observer());
    ASSERT_EQ(seen.ir.size(), 4u);
    EXPECT_TRUE(k.source.same_as(s.body));
    EXPECT_EQ(seen.ir[0], seen.ir[2]);
    EXPECT_EQ(to_string(k.func.body), to_string(plain_folds(s.body))) << to_string(f);
    EXPECT_EQ(seen.ir[3].find("fold "), std::string::npos) << seen.ir[3];
  }
}

TEST(GpuPasses, a_kernel_renders_one_source_whatever_the_heap) {
  // The shared parts are numbered by their folds' order in the row, not by any address, so that
  // two lowerings of one kernel render one source (and hit the code cache).
  for (const int64_t cols : {int64_t(4096), int64_t(5001)}) {
    std::vector<std::string> sources;
    std::vector<LoweredFunc> keep;  // every lowering alive at once, at addresses of its own
    for (int i = 0; i < 6; ++i) {
      keep.push_back(softmax_rows(8, cols));
      sources.push_back(render_c(keep.back(), Dialect::Cuda));
    }
    for (const std::string& s : sources) EXPECT_EQ(s, sources[0]) << cols << " columns";
  }
}

// A kernel body of `body` over out0 (float32) for the verifier.
LoweredFunc kernel_of(Stmt body) {
  LoweredFunc f;
  f.name = "k";
  f.buffers = {{"out0", DType::Float32, 0}};
  f.body = std::move(body);
  return f;
}

GpuFold sum_fold(const Buffer& acc, const Buffer& part) {
  GpuFold g;
  g.accumulator = acc;
  g.index = make_index(0);
  g.combined = Load::make(acc, make_index(0)) + Var::make(DType::Float32, "tr_other");
  g.combined_mine = Var::make(DType::Float32, "tr_mine") + Var::make(DType::Float32, "tr_other");
  g.identity = make_zero(DType::Float32);
  g.part = part;
  g.warps = 4;
  return g;
}

TEST(GpuPasses, verifier_wants_fold_parts_shared_accumulators_in_scope_and_gpu_nodes_in_their_row) {
  const Buffer acc{"acc", DType::Float32, kLocalSlot}, part{"tr_part0", DType::Float32, kLocalSlot};
  const Stmt reduce = Block::make({WarpReduce::make(sum_fold(acc, part)), Barrier::make(BarrierScope::Block),
                                   BlockReduce::make(sum_fold(acc, part), false)});
  auto row = [](ForKind kind, Stmt body) {
    return For::make("u", Var::make(DType::Int64, "begin"), Var::make(DType::Int64, "end"), kind, std::move(body));
  };
  auto in = [&](MemoryScope part_scope) {
    return Allocate::make(part, 4, row(ForKind::GpuBlock, Allocate::make(acc, 1, reduce)), part_scope);
  };
  EXPECT_NO_THROW(verify(kernel_of(in(MemoryScope::Shared))));
  try {
    verify(kernel_of(in(MemoryScope::Local)));
    FAIL() << "a thread's own array taken as the warps' meeting place";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("fold part 'tr_part0' is not shared"), std::string::npos) << e.message();
  }
  EXPECT_THROW(verify(kernel_of(Allocate::make(part, 4, row(ForKind::GpuBlock, reduce), MemoryScope::Shared))),
               Error);  // no accumulator
  // The GPU nodes and loops need their row: a block's for its parts and barriers, a warp's for lanes.
  auto why = [](const LoweredFunc& f) {
    try {
      verify(f);
    } catch (const Error& e) {
      return e.message();
    }
    return std::string();
  };
  EXPECT_NE(why(kernel_of(Allocate::make(part, 4, Allocate::make(acc, 1, reduce), MemoryScope::Shared)))
                .find("warp_reduce outside a GPU row"),
            std::string::npos);
  EXPECT_NE(why(kernel_of(Allocate::make(part, 4, row(ForKind::GpuWarp, Allocate::make(acc, 1, reduce)),
                                         MemoryScope::Shared)))
                .find("barrier outside a block's row"),
            std::string::npos);
  const Stmt store = Store::make(Buffer{"out0", DType::Float32, 0}, make_index(0), make_zero(DType::Float32));
  EXPECT_NE(why(kernel_of(row(ForKind::GpuBlock, For::make("r", make_index(0), make_index(8), ForKind::GpuLane, store))))
                .find("lane loop 'r' outside a warp's row"),
            std::string::npos);
  EXPECT_EQ(why(kernel_of(row(ForKind::GpuWarp, For::make("r", make_index(0), make_index(8), ForKind::GpuLane, store)))),
            "");
  // The mutator keeps a shared array shared when it rebuilds it.
  struct Renames : IRMutator {
    Stmt visit(const Barrier*, const Stmt&) override { return Barrier::make(BarrierScope::Warp); }
  } renames;
  const Stmt rebuilt = renames.mutate(in(MemoryScope::Shared));
  ASSERT_FALSE(rebuilt.same_as(in(MemoryScope::Shared)));
  EXPECT_EQ(rebuilt.as<Allocate>()->scope, MemoryScope::Shared);
  EXPECT_EQ(to_string(rebuilt), R"(allocate shared tr_part0: float32[4]
for u in [begin, end) gpu_block {
  allocate acc: float32[1]
  warp_reduce acc[0] by (acc[0] + tr_other) from 0f via tr_part0 of 4 warps
  barrier warp
  block_reduce acc[0] by (acc[0] + tr_other) from 0f via tr_part0 of 4 warps
}
)");
}

TEST(GpuPasses, the_cpp_dialect_refuses_shared_memory) {
  const Buffer a{"a", DType::Float32, kLocalSlot};
  LoweredFunc f = kernel_of(Allocate::make(
      a, 4, Store::make(Buffer{"out0", DType::Float32, 0}, make_index(0), Load::make(a, make_index(0))),
      MemoryScope::Shared));
  EXPECT_THROW(render_c(f, Dialect::Cpp), Error);
}

}  // namespace
}  // namespace terrace::kernels
