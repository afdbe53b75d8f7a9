// The memory plan and executor loop both compiled tiers share (tiers/region_program.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tiers/region_program.h"

namespace terrace {
namespace {

// Inputs 0, outputs 1 (2 when `view_out`), then intermediates of `bytes` each (float32).
SlotTable table(size_t n_in, size_t n_out, const std::vector<int64_t>& intermediates) {
  SlotTable t;
  t.n_inputs = n_in;
  t.n_outputs = n_out;
  for (size_t i = 0; i < n_in + n_out; ++i) t.sigs.push_back({DType::Float32, {4}});
  for (int64_t n : intermediates) t.sigs.push_back({DType::Float32, {n}});
  t.alias.assign(t.sigs.size(), -1);
  return t;
}

TEST(MemoryPlan, intermediates_share_memory_only_when_their_lives_do_not_overlap) {
  // in 0, out 1; t2 = f(0); t3 = g(t2); t4 = h(t3); out = k(t4): t2 and t4 may share, t3 may not.
  SlotTable t = table(1, 1, {16, 16, 16});
  const MemoryPlan p = plan_memory(t, {{0, 2}, {2, 3}, {3, 4}, {4, 1}}, 64);
  ASSERT_EQ(p.planned.size(), 3u);
  EXPECT_EQ(p.offset[2], p.offset[4]);
  EXPECT_NE(p.offset[2], p.offset[3]);
  EXPECT_EQ(p.arena_bytes, 128u);  // two 64-byte buffers
}

TEST(MemoryPlan, absent_operands_are_skipped_and_an_escaping_intermediate_is_not_planned) {
  SlotTable t = table(1, 1, {8, 8});
  t.alias[1] = 3;  // the output views intermediate 3: it escapes the call
  // A library step with an absent operand (-1), as tier 2's cuBLASLt steps have.
  const MemoryPlan p = plan_memory(t, {{0, -1, 2, -1}, {2, 3}}, 256);
  EXPECT_EQ(p.escaping, (std::vector<size_t>{3}));
  EXPECT_EQ(p.planned, (std::vector<size_t>{2}));
  EXPECT_EQ(p.root[1], 3u);
  EXPECT_EQ(p.arena_bytes, 256u);
}

struct Recorder {
  std::vector<std::string> log;
  void zero_word(int slot) { log.push_back("zero " + std::to_string(slot)); }
  void copy(int from, int to) { log.push_back("copy " + std::to_string(from) + " " + std::to_string(to)); }
  void run(const ProgramStep<std::string>& s) { log.push_back("run " + *s.work); }
  void check(const ProgramStep<std::string>& s) { log.push_back("check " + s.node); }
};

TEST(RunProgram, zeroes_an_ops_error_word_before_its_first_step_and_checks_it_after_its_last) {
  std::vector<ProgramStep<std::string>> steps(3);
  steps[0].work = "a";
  steps[0].check_first = true;
  steps[0].error_slot = 5;
  steps[1].work = "b";
  steps[1].check_last = true;
  steps[1].node = "node 1 (Gather)";
  steps[2].slots = {2, 1};  // no work: a copy
  Recorder r;
  run_program(steps, r);
  EXPECT_EQ(r.log, (std::vector<std::string>{"zero 5", "run a", "run b", "check node 1 (Gather)", "copy 2 1"}));
}

TEST(RunProgram, a_set_error_word_raises_invalid_argument_naming_the_node) {
  const int64_t clear[2] = {0, 7}, set[2] = {1, 7};
  EXPECT_NO_THROW(raise_if_set(clear, "node 3 (Gather)", "index out of range"));
  try {
    raise_if_set(set, "node 3 (Gather)", "index out of range");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("node 3 (Gather): index out of range (got 7)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace terrace
