// A compiled region as every compiled tier runs it: one slot table, one step type, one memory plan
// and one executor loop. A tier fills each step's work with its own (tier 1: a JIT'd kernel or a
// oneDNN primitive; tier 2: a CUDA launch, a cuBLASLt product or a cuDNN call) and provides the
// few device operations run_program needs; the copies, the run-time error words, the liveness of
// intermediates and the fault hook are written here once.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "interp/tensor.h"
#include "kernels/fusion_group.h"
#include "tiers/plan_memory.h"
#include "tiers/region_lowering.h"

namespace terrace {

// The region's inputs, its outputs (Region order), then intermediates.
struct SlotTable {
  std::vector<kernels::TensorSig> sigs;
  // Per slot: -1 (a buffer of its own, or a region input), the slot whose buffer it views (>= 0),
  // or -2 - i: it holds constants[i], computed at compile time (LoweredRegion::alias).
  std::vector<int> alias;
  std::vector<Tensor> constants;
  size_t n_inputs = 0, n_outputs = 0;

  size_t size() const { return sigs.size(); }
  size_t bytes(size_t slot) const { return size_t(shape_numel(sigs[slot].shape)) * dtype_size(sigs[slot].dtype); }
  bool output(size_t slot) const { return slot >= n_inputs && slot < n_inputs + n_outputs; }
  bool intermediate(size_t slot) const { return slot >= n_inputs + n_outputs; }
  // The slot whose buffer `slot` is: itself, or the source its chain of views ends at.
  size_t root(size_t slot) const;
};

// The table of a lowered region (its slots, aliases and constants).
SlotTable slot_table(LoweredRegion& lowered, size_t n_inputs, size_t n_outputs);

// One step over the slot table. `work` is the tier's; none: a copy of slot slots[0] into slots[1]
// (a region output that is a view of another value, made a buffer of its own).
template <class Work>
struct ProgramStep {
  std::optional<Work> work;
  std::vector<int> slots;  // the work's operands, as the tier orders them (-1: an operand it has not)
  std::string node;        // the op's node, for errors
  // A lowered op's run-time check (LoweredStep): its two-int64 error word, zeroed before the op's
  // first step and read after its last.
  int error_slot = -1;
  bool check_first = false, check_last = false;
  std::string error_message;

  // The step's slots, node and checks as lowered; the tier sets `work` for a kernel step.
  static ProgramStep lowered(LoweredStep& s) {
    ProgramStep p;
    p.slots = std::move(s.slots);
    p.node = std::move(s.node);
    p.error_slot = s.error_slot;
    p.check_first = s.check_first;
    p.check_last = s.check_last;
    p.error_message = std::move(s.error_message);
    return p;
  }
};

// Where a call's intermediates live: one arena, each intermediate at an offset such that two share
// memory only when no step uses both while both hold values (first to last step naming them, their
// views' uses included). Intermediates an output views escape the call: each call gives them
// buffers of their own.
struct MemoryPlan {
  std::vector<size_t> root;      // per slot: SlotTable::root
  std::vector<size_t> offset;    // per slot: its offset in the arena (planned slots)
  std::vector<size_t> planned;   // the intermediates in the arena
  std::vector<size_t> escaping;  // the intermediates an output views, sorted
  size_t arena_bytes = 0;
};
// `uses[k]`: the slots step k names (-1: none, skipped). Each buffer is rounded up to `align` bytes. Placement: largest
// first, at the lowest offset free over its life.
MemoryPlan plan_memory(const SlotTable& table, const std::vector<std::vector<int>>& uses, size_t align);

template <class Work>
MemoryPlan plan_memory(const SlotTable& table, const std::vector<ProgramStep<Work>>& steps, size_t align) {
  std::vector<std::vector<int>> uses;
  for (const ProgramStep<Work>& s : steps) {
    uses.push_back(s.slots);
    if (s.error_slot >= 0) uses.back().push_back(s.error_slot);
  }
  return plan_memory(table, uses, align);
}

// Per region output, how its storage relates to the rest (CompiledRegion::output_storage).
std::vector<int> storage_of_outputs(const SlotTable& table, const MemoryPlan& plan);
// True for a placed output buffer (CompiledRegion::run_into) a version may write slot `sig` into.
inline bool fits(const Tensor& t, const kernels::TensorSig& sig, bool on_device) {
  return t.defined() && t.on_device() == on_device && t.dtype() == sig.dtype && t.shape() == sig.shape;
}

// Runs `steps` in order on `device`, which provides
//   void zero_word(int slot);                          an op's error word, before its first step
//   void copy(int from, int to);                       a copy step
//   void run(const ProgramStep<Work>&);                a step's work
//   void check(const ProgramStep<Work>&);              after an op's last step (now, or at the end)
template <class Work, class Device>
void run_program(const std::vector<ProgramStep<Work>>& steps, Device& device) {
  for (const ProgramStep<Work>& s : steps) {
    if (s.check_first) device.zero_word(s.error_slot);
    if (s.work) device.run(s);
    else device.copy(s.slots[0], s.slots[1]);
    if (s.check_last) device.check(s);
  }
}

// The error a fired run-time check raises: InvalidArgument "<node>: <message> (got <word[1]>)".
// Nothing when word[0] is 0.
void raise_if_set(const int64_t word[2], const std::string& node, const std::string& message);

// TERRACE_FAULT=miscompile:<tier>: a deliberately wrong result (one element changed), for tests
// of validation. `t` must be a host tensor no one else reads.
void perturb_for_fault(Tensor& t);

}  // namespace terrace
