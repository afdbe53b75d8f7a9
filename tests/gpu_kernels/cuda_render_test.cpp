// render_c's CUDA dialect and its schedule (kernels/schedule_cuda.h): rendered kernels of every
// dtype and intrinsic compile through NVRTC for sm_90 (no GPU needed; skipped with NVRTC's reason
// where it cannot be loaded), and 16-byte vector accesses are chosen exactly where the innermost
// contiguous loop and the buffers' layout allow.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <string>
#include <vector>

#include "interp/error.h"
#include "kernels/lower.h"
#include "kernels/lower_op.h"
#include "kernels/render_c.h"
#include "kernels/schedule_cuda.h"
#include "kernels/split.h"
#include "tests/support/attrs.h"
#include "tests/support/kernel_builders.h"
#include "tests/support/node_runner.h"
#ifdef TERRACE_HAVE_CUDA
#include "jit/cuda/nvrtc.h"
#endif

namespace terrace::kernels {
namespace {

using testing::int_attr;
using testing::ints_attr;


Expr idx_var(const std::string& n) { return Var::make(DType::Int64, n); }

// A fusion group built op by op from signatures (no values: these tests only render).
struct Group {
  FusionGroup g;
  explicit Group(std::string name) { g.name = std::move(name); }
  Operand input(DType t, Shape s) {
    g.inputs.push_back({t, std::move(s)});
    return Operand::input(int(g.inputs.size()) - 1);
  }
  Operand op(Op op, std::vector<Operand> args, std::map<std::string, Attribute> attrs = {}) {
    FusedOp f;
    f.node.op = op;
    f.node.name = "n" + std::to_string(g.ops.size());
    f.node.attrs = std::move(attrs);
    f.node.outputs = {0};
    for (const Operand& a : args) f.node.inputs.push_back(a.kind == Operand::Kind::Absent ? -1 : 0);
    f.operands = std::move(args);
    g.ops.push_back(std::move(f));
    g.ops.back().result = infer_result(g, int(g.ops.size()) - 1);
    return Operand::result(int(g.ops.size()) - 1);
  }
  void output(Operand o) { g.outputs.push_back(o.index); }
  LoweredFunc lower() const { return kernels::lower(g); }
};

LoweredFunc add_kernel(const std::string& name, DType a, Shape sa, DType b, Shape sb) {
  Group gr(name);
  Operand x = gr.input(a, std::move(sa)), y = gr.input(b, std::move(sb));
  if (a != b) y = gr.op(Op::Cast, {y}, {{"to", int_attr(dtype_to_onnx(a))}});
  gr.output(gr.op(Op::Add, {x, y}));
  return gr.lower();
}

int vector_loads(const CudaSchedule& s) {
  int n = 0;
  for (const IRNode* a : s.vector_accesses) n += a->kind == IRNodeKind::Load;
  return n;
}
int vector_stores(const CudaSchedule& s) {
  return int(s.vector_accesses.size()) - vector_loads(s);
}

// ---- schedule: where vectors are and are not taken ----

TEST(CudaSchedule, contiguous_float32_kernel_moves_float4) {
  LoweredFunc f = add_kernel("add1d", DType::Float32, {1000}, DType::Float32, {1000});
  CudaSchedule s = schedule_cuda(f);
  EXPECT_EQ(s.mapping, CudaMapping::PerElement);
  EXPECT_EQ(s.inner, nullptr);
  EXPECT_EQ(s.vector_width, 4);
  EXPECT_EQ(vector_loads(s), 2);
  EXPECT_EQ(vector_stores(s), 1);
  std::string src = render_c(f, Dialect::Cuda);
  EXPECT_NE(src.find("tr_vec<float, 4>"), std::string::npos) << src;
  EXPECT_NE(src.find("& 15) == 0"), std::string::npos) << src;  // the run-time alignment check
}

TEST(CudaSchedule, half_kernel_moves_eight_lanes_and_mixed_kernel_sixteen_bytes_of_the_widest) {
  CudaSchedule h = schedule_cuda(add_kernel("addh", DType::Float16, {4096}, DType::Float16, {4096}));
  EXPECT_EQ(h.vector_width, 8);
  EXPECT_EQ(h.vector_accesses.size(), 3u);
  // float32 + float16: 4 lanes (16 bytes of float, 8 of half).
  CudaSchedule m = schedule_cuda(add_kernel("addm", DType::Float32, {4096}, DType::Float16, {4096}));
  EXPECT_EQ(m.vector_width, 4);
  EXPECT_EQ(m.vector_accesses.size(), 3u);
  CudaSchedule d = schedule_cuda(add_kernel("addd", DType::Float64, {4096}, DType::Float64, {4096}));
  EXPECT_EQ(d.vector_width, 2);
}

TEST(CudaSchedule, bias_add_flattens_rows_and_vectorises_both_operands) {
  // [64, 768] + [768]: a Parallel loop over rows around a Vectorized loop over 768 columns.
  LoweredFunc f = add_kernel("bias", DType::Float32, {64, 768}, DType::Float32, {768});
  CudaSchedule s = schedule_cuda(f);
  ASSERT_EQ(s.mapping, CudaMapping::PerElement);
  ASSERT_NE(s.inner, nullptr);
  EXPECT_EQ(s.inner_extent, 768);
  EXPECT_EQ(s.vector_width, 4);
  EXPECT_EQ(vector_loads(s), 2);
  EXPECT_EQ(vector_stores(s), 1);
  CudaLaunch l = cuda_launch(s, 0, 64, 132);
  EXPECT_EQ(l.block, 256u);
  EXPECT_EQ(l.grid, unsigned(64 * 768 / 4 / 256));
}

TEST(CudaSchedule, row_length_not_a_multiple_of_four_narrows_or_drops_the_vector) {
  // 6 columns: pairs (8 bytes) never cross a row; 7 columns: no vector at all.
  CudaSchedule six = schedule_cuda(add_kernel("six", DType::Float32, {10, 6}, DType::Float32, {6}));
  EXPECT_EQ(six.mapping, CudaMapping::PerElement);
  EXPECT_EQ(six.vector_width, 2);
  CudaSchedule seven = schedule_cuda(add_kernel("seven", DType::Float32, {10, 7}, DType::Float32, {7}));
  EXPECT_EQ(seven.mapping, CudaMapping::PerElement);
  EXPECT_EQ(seven.vector_width, 1);
  EXPECT_TRUE(seven.vector_accesses.empty());
  EXPECT_EQ(render_c(add_kernel("seven", DType::Float32, {10, 7}, DType::Float32, {7}), Dialect::Cuda).find("tr_vec<"),
            std::string::npos);
}

TEST(CudaSchedule, broadcast_operand_is_loaded_as_a_scalar) {
  // [64, 768] + [64, 1]: the second operand's index does not move with the column.
  LoweredFunc f = add_kernel("col", DType::Float32, {64, 768}, DType::Float32, {64, 1});
  CudaSchedule s = schedule_cuda(f);
  EXPECT_EQ(s.vector_width, 4);
  EXPECT_EQ(vector_loads(s), 1);
  EXPECT_EQ(vector_stores(s), 1);
}

TEST(CudaSchedule, conditional_store_stays_scalar) {
  // out0 = Neg(b) of shape [8] is written only in row 0 of the [4, 8] domain (under an if).
  Group gr("cond");
  Operand a = gr.input(DType::Float32, {4, 8}), b = gr.input(DType::Float32, {8});
  Operand nb = gr.op(Op::Neg, {b});
  gr.output(nb);
  gr.output(gr.op(Op::Add, {a, nb}));
  LoweredFunc f = gr.lower();
  CudaSchedule s = schedule_cuda(f);
  EXPECT_EQ(s.vector_width, 4);
  EXPECT_EQ(vector_loads(s), 2);
  EXPECT_EQ(vector_stores(s), 1);  // the Add's; Neg's store is conditional
  for (const IRNode* n : s.vector_accesses) {
    if (n->kind == IRNodeKind::Store) {
      EXPECT_EQ(static_cast<const Store*>(n)->buffer.name, "out1");
    }
  }
  EXPECT_COMPILES_FOR_SM90(render_c(f, Dialect::Cuda), "cond.cu");
}

OpKernels reduce_sum(int64_t rows, int64_t cols, int64_t axis = 1) {
  return testing::reduce_sum_kernels(rows, cols, axis);
}

TEST(CudaSchedule, row_reduction_takes_a_warp_per_long_row_and_a_thread_per_short_row_or_columns) {
  OpKernels k = reduce_sum(32, 100);
  ASSERT_EQ(k.calls.size(), 1u);
  CudaSchedule s = schedule_cuda(k.calls[0].func);
  ASSERT_EQ(s.mapping, CudaMapping::PerRowWarp);
  ASSERT_EQ(s.lane_loops.size(), 1u);
  const auto& folds = s.folds.at(*s.lane_loops.begin());
  ASSERT_EQ(folds.size(), 1u);
  EXPECT_TRUE(folds[0].identity.defined());  // a sum: lanes 1..31 start from 0
  EXPECT_EQ(cuda_launch(s, 0, 32, 132).grid, 4u);  // 8 warps (rows) per block of 256
  std::string src = render_c(k.calls[0].func, Dialect::Cuda);
  EXPECT_NE(src.find("__shfl_xor_sync"), std::string::npos) << src;
  EXPECT_NE(src.find("if (tr_lane == 0) out0["), std::string::npos) << src;
  EXPECT_COMPILES_FOR_SM90(src, "sum_rows.cu");
  OpKernels short_rows = reduce_sum(64, 8);
  EXPECT_EQ(schedule_cuda(short_rows.calls[0].func).mapping, CudaMapping::PerIteration);
  // Over the outer axis the fold runs in loops the lanes cannot share: a thread per block of columns.
  OpKernels columns = reduce_sum(100, 64, 0);
  EXPECT_EQ(schedule_cuda(columns.calls[0].func).mapping, CudaMapping::PerIteration);
}

// Softmax or LayerNormalization (its scale and bias of `cols`) over rows of `cols`: the kernel
// lower_op gives.
LoweredFunc row_kernel(Op op, int64_t rows, int64_t cols) {
  const bool norm = op == Op::LayerNormalization;
  Node n;
  n.op = op;
  n.name = norm ? "layernorm" : op == Op::LogSoftmax ? "logsoftmax" : "softmax";
  n.inputs = norm ? std::vector<int>{0, 1, 2} : std::vector<int>{0};
  n.outputs = {int(n.inputs.size())};
  n.attrs["axis"] = int_attr(-1);
  std::vector<OpInput> in{OpInput{{DType::Float32, {rows, cols}}}};
  if (norm) in.insert(in.end(), 2, OpInput{{DType::Float32, {cols}}});
  OpKernels k = lower_op(n, in, n.name);
  EXPECT_EQ(k.calls.size(), 1u);
  return k.calls.at(0).func;
}
LoweredFunc softmax_rows(int64_t rows, int64_t cols) { return row_kernel(Op::Softmax, rows, cols); }
LoweredFunc layernorm_rows(int64_t rows, int64_t cols) { return row_kernel(Op::LayerNormalization, rows, cols); }

TEST(CudaSchedule, long_rows_take_a_block_per_row_with_the_row_in_registers_or_shared_memory_read_once_written_once) {
  LoweredFunc f = softmax_rows(64, 4096);
  CudaSchedule s = schedule_cuda(f);
  ASSERT_EQ(s.mapping, CudaMapping::PerRowBlock);
  EXPECT_TRUE(s.rows_in_registers);
  EXPECT_EQ(s.row_vector, 4);  // float rows of a multiple of 4 elements, 16 slots: by vectors of 4
  // The input's row and the output's: 32 + 32 registers a thread at 128 threads, which a kernel
  // reading no per-column vectors may take.
  EXPECT_EQ(s.block, 128);
  EXPECT_TRUE(s.vector_loads.empty());
  EXPECT_EQ(cuda_launch(s, 0, 64, 132).grid, 64u);  // a block per row
  std::map<std::string, CudaSchedule::RowCache> caches;
  for (const auto& c : s.row_caches) caches[c.buffer.name] = c;
  ASSERT_EQ(caches.size(), 2u);
  EXPECT_TRUE(caches.at("in0").fill);    // the input: read once, kept for the max, exp and sum loops
  EXPECT_FALSE(caches.at("out0").fill);  // the output: e kept, then scaled
  EXPECT_EQ(caches.at("in0").length, 4096);
  // The max loop (a nest folding into the CPU's 16 vector slots), the exp-and-sum loop and the
  // scaling loop all visit element r on thread (r / 4) % 256; the max nest as one flattened range.
  ASSERT_EQ(s.register_loops.size(), 3u);
  int nests = 0;
  for (const auto& [loop, inner] : s.register_loops) nests += inner != nullptr;
  EXPECT_EQ(nests, 1);
  // e's store to memory is dead (the scaling loop writes the whole row again): one write a row.
  ASSERT_EQ(s.dead_stores.size(), 1u);
  std::string src = render_c(f, Dialect::Cuda);
  EXPECT_NE(src.find("float tr_reg_in0[32];"), std::string::npos) << src;
  EXPECT_EQ(src.find("__shared__ float tr_row_"), std::string::npos) << src;
  // Accesses to memory (not to tr_reg_...): the output's one store, the input's loads alone.
  auto in_memory = [&](const std::string& access) {
    size_t n = 0;
    for (size_t at = src.find(access); at != std::string::npos; at = src.find(access, at + 1)) n += src[at - 1] != '_';
    return n;
  };
  // By vectors: the row read by streaming 16-byte loads, the output written after the scaling
  // loop by streaming 16-byte stores; nothing else touches memory.
  auto count = [&](const std::string& text) {
    size_t n = 0;
    for (size_t at = src.find(text); at != std::string::npos; at = src.find(text, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("__ldcs((const float4*)(in0 + base) + tr_q)"), 1u) << src;
  EXPECT_EQ(count("__stcs((float4*)(out0 + base) + tr_q"), 1u) << src;
  // Buffers that are not 16-byte aligned take a copy of the kernel element by element, in the
  // same program: the launch picks it by the pointers of the parameters the vectors need.
  std::vector<std::string> aligned;
  for (size_t i : cuda_aligned_params(f)) aligned.push_back(f.buffers.at(i).name);
  std::sort(aligned.begin(), aligned.end());
  EXPECT_EQ(aligned, (std::vector<std::string>{"in0", "out0"}));
  const std::string program = render_cuda_program(std::span(&f, 1), "softmax");
  EXPECT_NE(program.find(" " + f.name + "("), std::string::npos) << program;
  EXPECT_NE(program.find(" " + cuda_element_copy_name(f.name) + "("), std::string::npos) << program;
  EXPECT_NE(program.find("tr_reg_in0[tr_k] = (in0 + base)[tr_x];"), std::string::npos) << program;
  EXPECT_COMPILES_FOR_SM90(program, "softmax_two_kernels.cu");
  EXPECT_EQ(in_memory("out0["), 0u) << src;
  EXPECT_EQ(in_memory("in0["), 0u) << "every read of the input from its registers:\n" << src;
  // The max's 16 slots: thread t folds into slots 4 (t % 4) + j, one register each, and since
  // the slots are read afterwards only by the max over all of them, the block combines one value
  // (a float a warp in shared memory) that every slot then holds.
  EXPECT_NE(src.find("float tr_slot_mlanes[4];"), std::string::npos) << src;
  int whole = 0;
  for (const auto& [loop, folds] : s.folds)
    for (const auto& fold : folds) whole += fold.whole && fold.accumulator.name == "mlanes";
  EXPECT_EQ(whole, 1);
  // (The parts are numbered in the order of the row's folds: the max's first.)
  EXPECT_NE(src.find("__shared__ float tr_part0[4];"), std::string::npos) << src;
  EXPECT_COMPILES_FOR_SM90(src, "softmax_block.cu");
  // A row not a multiple of the 16 slots: the max's last elements are a loop of their own, at an
  // offset the registers cannot follow; the row goes to shared memory (copied in with scalar
  // loads), still a block per row.
  LoweredFunc odd = softmax_rows(8, 5001);
  CudaSchedule so = schedule_cuda(odd);
  EXPECT_EQ(so.mapping, CudaMapping::PerRowBlock);
  EXPECT_FALSE(so.rows_in_registers);
  EXPECT_EQ(so.block, 128);
  std::string odd_src = render_c(odd, Dialect::Cuda);
  EXPECT_NE(odd_src.find("__shared__ float tr_row_in0[5157]"), std::string::npos) << odd_src;
  EXPECT_COMPILES_FOR_SM90(odd_src, "softmax_odd.cu");
  // Two rows of 16K floats: 32 registers a thread at 1,024 threads.
  CudaSchedule wide = schedule_cuda(softmax_rows(4, 16384));
  EXPECT_EQ(wide.mapping, CudaMapping::PerRowBlock);
  EXPECT_TRUE(wide.rows_in_registers);
  EXPECT_EQ(wide.block, 1024);
}

// A log-softmax's max over a long row folds into the CPU's 16 slots, read afterwards only by the
// max over every slot: the block combines one value, as for the softmax above. A row in shared
// memory keeps its slots combined slot by slot.
TEST(CudaSchedule, max_slots_read_only_by_their_total_max_combine_one_value_across_the_block) {
  auto whole_slots = [](const CudaSchedule& s) {
    std::map<std::string, bool> whole;
    for (const auto& [loop, folds] : s.folds)
      for (const auto& f : folds)
        if (f.slots) whole[f.accumulator.name] = f.whole;
    return whole;
  };
  LoweredFunc f = row_kernel(Op::LogSoftmax, 64, 4096);
  const CudaSchedule s = schedule_cuda(f);
  ASSERT_EQ(s.mapping, CudaMapping::PerRowBlock);
  ASSERT_TRUE(s.rows_in_registers);
  EXPECT_EQ(whole_slots(s), (std::map<std::string, bool>{{"mlanes", true}}));
  EXPECT_COMPILES_FOR_SM90(render_cuda_program(std::span(&f, 1), "logsoftmax"), "logsoftmax_rows.cu");
  const CudaSchedule shared = schedule_cuda(softmax_rows(8, 5001));
  ASSERT_FALSE(shared.rows_in_registers);
  for (const auto& [name, whole] : whole_slots(shared)) EXPECT_FALSE(whole) << name;
}

TEST(CudaSchedule, layernorm_rows_move_by_vectors_where_their_length_is_a_multiple_of_4) {
  LoweredFunc f = layernorm_rows(64, 4096);
  CudaSchedule s = schedule_cuda(f);
  ASSERT_EQ(s.mapping, CudaMapping::PerRowBlock);
  EXPECT_TRUE(s.rows_in_registers);
  EXPECT_EQ(s.row_vector, 4);
  EXPECT_EQ(s.block, 256);
  // The output, written once and never read, goes through registers too: its stores by vectors.
  std::map<std::string, CudaSchedule::RowCache> caches;
  for (const auto& c : s.row_caches) caches[c.buffer.name] = c;
  ASSERT_EQ(caches.size(), 2u);
  EXPECT_TRUE(caches.at("in0").fill);
  EXPECT_FALSE(caches.at("out0").fill);
  // The scale and bias, read at the row's element: by 16-byte vectors too, which needs them
  // aligned as well as the rows.
  std::set<std::string> vector_loads;
  for (const IRNode* n : s.vector_loads) vector_loads.insert(static_cast<const Load*>(n)->buffer.name);
  EXPECT_EQ(vector_loads, (std::set<std::string>{"in1", "in2"}));
  std::set<std::string> aligned;
  for (size_t i : cuda_aligned_params(f)) aligned.insert(f.buffers.at(i).name);
  EXPECT_EQ(aligned, (std::set<std::string>{"in0", "in1", "in2", "out0"}));
  const std::string src = render_c(f, Dialect::Cuda);
  EXPECT_NE(src.find("__stcs((float4*)(out0 + base) + tr_q"), std::string::npos) << src;
  EXPECT_NE(src.find("tr_ld4(in1, tr_lane + (tr_k / 4) * 256, tr_k % 4)"), std::string::npos) << src;
  // The affine step in float: the normalised value rounded once, then scale and bias.
  EXPECT_NE(src.find("((float)((((double)tr_reg_in0[tr_k]) - mean"), std::string::npos) << src;
  EXPECT_COMPILES_FOR_SM90(src, "layernorm_block.cu");
  // 3,001 columns: in registers, element by element (the last registers on some threads only).
  CudaSchedule odd = schedule_cuda(layernorm_rows(8, 3001));
  EXPECT_TRUE(odd.rows_in_registers);
  EXPECT_EQ(odd.row_vector, 1);
  EXPECT_EQ(odd.block, 128);
  EXPECT_COMPILES_FOR_SM90(render_c(layernorm_rows(8, 3001), Dialect::Cuda), "layernorm_odd.cu");
  // Rows too long for both: a warp per row, reading memory.
  EXPECT_EQ(schedule_cuda(softmax_rows(2, 65536)).mapping, CudaMapping::PerRowWarp);
  // Short rows stay a warp per row.
  EXPECT_EQ(schedule_cuda(softmax_rows(64, 128)).mapping, CudaMapping::PerRowWarp);
}

TEST(CudaSchedule, row_blocks_of_every_reduced_dtype_compile_for_sm90) {
  // The rows in shared memory are typed as the buffers: copies of 16 bytes hold 2, 4 or 16 elements.
  static const Tensor axes = Tensor::from_vector<int64_t>({1}, {1});
  for (DType t : {DType::Float64, DType::Int32, DType::Int64, DType::UInt8})
    for (Op op : {Op::ReduceSum, Op::ReduceMax}) {
      SCOPED_TRACE(std::string(op_name(op)) + " of " + dtype_name(t));
      Node n;
      n.op = op;
      n.name = "r";
      n.inputs = {0, 1};
      n.outputs = {2};
      n.attrs["keepdims"] = int_attr(0);
      std::vector<OpInput> in(2);
      in[0].sig = {t, {16, 2048}};
      in[1].sig = {DType::Int64, {1}};
      in[1].value = &axes;
      OpKernels k = lower_op(n, in, "r");
      ASSERT_EQ(k.calls.size(), 1u);
      if (op == Op::ReduceSum) {
        EXPECT_EQ(schedule_cuda(k.calls[0].func).mapping, CudaMapping::PerRowBlock);
      }
      EXPECT_COMPILES_FOR_SM90(render_c(k.calls[0].func, Dialect::Cuda), "rows.cu");
    }
}

TEST(CudaSchedule, argmax_folds_combine_the_index_by_min_and_the_lane_arrays_slot_by_slot) {
  Node n;
  n.op = Op::ArgMax;
  n.name = "argmax";
  n.inputs = {0};
  n.outputs = {1};
  n.attrs["axis"] = int_attr(1);
  OpKernels k = lower_op(n, {OpInput{{DType::Float32, {16, 77}}}}, "argmax");
  ASSERT_FALSE(k.calls.empty());
  CudaSchedule s = schedule_cuda(k.calls[0].func);
  ASSERT_EQ(s.mapping, CudaMapping::PerRowWarp);
  std::set<std::string> combined, by_slot;
  for (auto& [loop, folds] : s.folds)
    for (const auto& f : folds) {
      combined.insert(f.accumulator.name);
      if (f.slots) by_slot.insert(f.accumulator.name + "[" + std::to_string(f.slots) + "]");
    }
  EXPECT_TRUE(combined.count("at")) << "the first index holding the maximum";
  EXPECT_TRUE(combined.count("best"));
  // The 16-lane max and NaN flags of the CPU's first pass, spread and combined slot by slot.
  EXPECT_TRUE(by_slot.count("mlanes[16]"));
  EXPECT_TRUE(by_slot.count("mnans[16]"));
}

TEST(CudaSchedule, kernel_without_parallel_loop_runs_on_one_thread) {
  LoweredFunc one;
  one.name = "one";
  one.buffers = {{"out0", DType::Float32, 0}};
  one.body = Store::make(one.buffers[0], make_index(0), FloatImm::make(DType::Float32, 1.0));
  EXPECT_EQ(schedule_cuda(one).mapping, CudaMapping::Single);
  EXPECT_EQ(cuda_launch(schedule_cuda(one), 0, 1).grid, 1u);
  std::string src = render_c(one, Dialect::Cuda);
  EXPECT_NE(src.find("if (blockIdx.x != 0 || threadIdx.x != 0) return;"), std::string::npos) << src;
  EXPECT_COMPILES_FOR_SM90(src, "one.cu");
}

TEST(CudaRender, program_of_several_kernels_has_one_prelude_and_refuses_duplicate_names) {
  std::vector<LoweredFunc> fs = {add_kernel("k0", DType::Float32, {100}, DType::Float32, {100}),
                                 add_kernel("k1", DType::Float32, {10, 12}, DType::Float32, {12})};
  std::string src = render_cuda_program(fs, "region 0 (Add)");
  EXPECT_EQ(src.find("#define TR_FN"), src.rfind("#define TR_FN"));
  EXPECT_NE(src.find("void k0("), std::string::npos);
  EXPECT_NE(src.find("void k1("), std::string::npos);
  fs[1].name = "k0";
  try {
    render_cuda_program(fs, "region 0 (Add)");
    FAIL() << "two kernels named k0 rendered";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(e.message().find("'k0'"), std::string::npos) << e.message();
  }
}

// ---- NVRTC: every dtype and intrinsic ----

TEST(CudaRender, casts_between_every_dtype_compile_for_sm90) {
  const DType types[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int8,
                         DType::UInt8,   DType::Int16,   DType::UInt16,  DType::Int32,    DType::UInt32,
                         DType::Int64,   DType::UInt64,  DType::Bool};
  std::vector<LoweredFunc> fs;
  for (DType from : types) {  // one kernel per source type, one output per target type
    Group gr(std::string("cast_from_") + dtype_name(from));
    Operand x = gr.input(from, {257});
    for (DType to : types) gr.output(gr.op(Op::Cast, {x}, {{"to", int_attr(dtype_to_onnx(to))}}));
    fs.push_back(gr.lower());
  }
  EXPECT_COMPILES_FOR_SM90(render_cuda_program(fs, "casts"), "casts.cu");
}

TEST(CudaRender, arithmetic_of_every_numeric_dtype_compiles_for_sm90) {
  // Add, Mul, Neg, Max, Where and a comparison per dtype, in 1-D and 2-D broadcast forms.
  const DType types[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int8,
                         DType::UInt8,   DType::Int16,   DType::UInt16,  DType::Int32,    DType::UInt32,
                         DType::Int64,   DType::UInt64};
  std::vector<LoweredFunc> fs;
  for (DType t : types)
    for (bool two_d : {false, true}) {
      Group gr(std::string("arith_") + dtype_name(t) + (two_d ? "_2d" : "_1d"));
      Operand a = gr.input(t, two_d ? Shape{6, 40} : Shape{240});
      Operand b = gr.input(t, two_d ? Shape{40} : Shape{240});
      Operand s = gr.op(Op::Add, {a, b});
      Operand p = gr.op(Op::Mul, {s, a});
      Operand m = gr.op(Op::Max, {p, b});
      Operand lt = gr.op(Op::Less, {m, a});
      Operand w = gr.op(Op::Where, {lt, m, s});
      if (t != DType::UInt8 && t != DType::UInt16 && t != DType::UInt32 && t != DType::UInt64) w = gr.op(Op::Neg, {w});
      gr.output(w);
      gr.output(lt);
      fs.push_back(gr.lower());
    }
  EXPECT_COMPILES_FOR_SM90(render_cuda_program(fs, "arithmetic"), "arith.cu");
}

// One kernel per float type storing every intrinsic of one argument (and Pow, Fmod) of x[i].
LoweredFunc every_intrinsic(DType t) {
  LoweredFunc f;
  f.name = std::string("intrinsics_") + dtype_name(t);
  f.buffers = {{"in0", t, 0}, {"out0", t, 1}};
  const int64_t n = 1000;
  Expr x = Load::make(f.buffers[0], idx_var("i"));
  std::vector<Stmt> stores;
  int j = 0;
#define TERRACE_IR_INTRINSIC(name, arity, returns_bool)                                          \
  {                                                                                              \
    std::vector<Expr> args(arity, x);                                                            \
    if (arity == 2) args[1] = make_const(t, 0.75);                                               \
    Expr v = Call::make(Intrinsic::name, args);                                                  \
    if (returns_bool) v = Cast::make(t, v);                                                      \
    stores.push_back(Store::make(f.buffers[1], idx_var("i") + make_index(n * j++), v));          \
  }
#include "kernels/ir_nodes.def"
  f.body = For::make("i", idx_var("begin"), idx_var("end"), ForKind::Parallel, Block::make(stores));
  f.parallel_extent = n;
  return f;
}

TEST(CudaRender, every_intrinsic_compiles_for_sm90_in_float32_and_float64) {
  std::vector<LoweredFunc> fs = {every_intrinsic(DType::Float32), every_intrinsic(DType::Float64)};
  std::string src = render_cuda_program(fs, "intrinsics");
  for (int fn = 0; fn <= int(Intrinsic::IsInf); ++fn) {
    std::string name = std::string("tr_") + intrinsic_name(Intrinsic(fn));
    for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
    EXPECT_NE(src.find(name + "_f32("), std::string::npos) << name;
    EXPECT_NE(src.find(name + "_f64("), std::string::npos) << name;
  }
  EXPECT_COMPILES_FOR_SM90(src, "intrinsics.cu");
}

TEST(CudaRender, whole_prelude_compiles_for_sm90) {
  // Every prelude function, used or not, and the saturating cast instantiated for each integer.
  std::string src = render_prelude(Dialect::Cuda) +
                    "extern \"C\" __global__ void k(const float* __restrict__ x, int8_t* a, uint64_t* b, int64_t* c) {\n"
                    "  a[0] = tr_sat_cast<int8_t, float>(x[0], -128.0f, 127.0f, (int8_t)-128, (int8_t)127);\n"
                    "  b[0] = tr_sat_cast<uint64_t, double>((double)x[1], 0.0, 1.8446744073709552e19, 0ull, ~0ull);\n"
                    "  c[0] = (int64_t)tr_f2h(tr_h2f((uint16_t)x[2])) + tr_f2bf(tr_bf2f((uint16_t)x[3]));\n"
                    "}\n";
  EXPECT_COMPILES_FOR_SM90(src, "prelude.cu");
}

TEST(CudaRender, reductions_and_data_movement_compile_for_sm90) {
  std::vector<LoweredFunc> fs;
  auto add = [&](Op op, std::vector<OpInput> in, std::map<std::string, Attribute> attrs, const std::string& name) {
    Node n = testing::make_node(op, in.size());
    n.name = name;
    n.attrs = std::move(attrs);
    OpKernels k = lower_op(n, in, name);
    for (auto& c : k.calls) fs.push_back(c.func);
  };
  OpInput x{{DType::Float32, {8, 12, 64}}};
  add(Op::Softmax, {x}, {{"axis", int_attr(-1)}}, "softmax");
  add(Op::ReduceMax, {x}, {{"axes", ints_attr({1})}, {"keepdims", int_attr(1)}}, "rmax");
  add(Op::ArgMax, {x}, {{"axis", int_attr(2)}}, "argmax");
  add(Op::Transpose, {x}, {{"perm", ints_attr({0, 2, 1})}}, "transpose");
  add(Op::ReduceMean, {OpInput{{DType::Float32, {4, 100}}}}, {{"axes", ints_attr({0})}}, "rmean_columns");
  add(Op::LayerNormalization, {x, OpInput{{DType::Float32, {64}}}, OpInput{{DType::Float32, {64}}}},
      {{"axis", int_attr(-1)}}, "layernorm");
  ASSERT_GE(fs.size(), 5u);
  EXPECT_COMPILES_FOR_SM90(render_cuda_program(fs, "lowered ops"), "ops.cu");
}

}  // namespace
}  // namespace terrace::kernels
