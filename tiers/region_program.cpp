// The memory plan and helpers every compiled tier's program shares (tiers/region_program.h).
#include "tiers/region_program.h"

#include <algorithm>
#include <utility>

#include "interp/error.h"
#include "tiers/plan_memory.h"

namespace terrace {

size_t SlotTable::root(size_t slot) const {
  while (slot >= n_inputs && alias[slot] >= 0) slot = size_t(alias[slot]);
  return slot;
}

SlotTable slot_table(LoweredRegion& lowered, size_t n_inputs, size_t n_outputs) {
  SlotTable t;
  t.sigs = std::move(lowered.slots);
  t.alias = std::move(lowered.alias);
  t.alias.resize(t.sigs.size(), -1);
  t.constants = std::move(lowered.constants);
  t.n_inputs = n_inputs;
  t.n_outputs = n_outputs;
  return t;
}

MemoryPlan plan_memory(const SlotTable& table, const std::vector<std::vector<int>>& uses, size_t align) {
  const size_t n = table.size();
  MemoryPlan plan;
  plan.root.resize(n);
  for (size_t s = 0; s < n; ++s) plan.root[s] = table.root(s);
  for (size_t s = table.n_inputs; s < table.n_inputs + table.n_outputs; ++s)
    if (plan.root[s] != s && table.intermediate(plan.root[s])) plan.escaping.push_back(plan.root[s]);
  std::sort(plan.escaping.begin(), plan.escaping.end());
  plan.escaping.erase(std::unique(plan.escaping.begin(), plan.escaping.end()), plan.escaping.end());
  std::vector<int> first(n, -1), last(n, -1);
  for (size_t k = 0; k < uses.size(); ++k)
    for (int slot : uses[k]) {
      if (slot < 0) continue;  // an operand the step has not (a product without bias)
      const size_t r = plan.root[size_t(slot)];
      if (first[r] < 0) first[r] = int(k);
      last[r] = std::max(last[r], int(k));
    }
  for (size_t s = table.n_inputs + table.n_outputs; s < n; ++s)
    if (table.alias[s] == -1 && !std::binary_search(plan.escaping.begin(), plan.escaping.end(), s))
      plan.planned.push_back(s);
  std::vector<size_t> bytes;
  std::vector<int> from, to;
  for (size_t s : plan.planned) {
    bytes.push_back(table.bytes(s));
    // Slots never named by a step (none expected) live through the whole call.
    from.push_back(first[s] < 0 ? 0 : first[s]);
    to.push_back(first[s] < 0 ? int(uses.size()) : last[s]);
  }
  std::vector<size_t> offset;
  plan.arena_bytes = pack_by_liveness(bytes, from, to, align, offset);
  plan.offset.assign(n, 0);
  for (size_t i = 0; i < plan.planned.size(); ++i) plan.offset[plan.planned[i]] = offset[i];
  return plan;
}

std::vector<int> storage_of_outputs(const SlotTable& table, const MemoryPlan& plan) {
  const size_t n_in = table.n_inputs, n_out = table.n_outputs;
  std::vector<int> storage(n_out, kSharedOutput);
  std::vector<int> roots_of_outputs(table.size(), 0);  // per slot: outputs whose buffer it is
  for (size_t o = 0; o < n_out; ++o) ++roots_of_outputs[plan.root[n_in + o]];
  for (size_t o = 0; o < n_out; ++o) {
    const size_t slot = n_in + o, root = plan.root[slot];
    if (root < n_in) storage[o] = int(root);
    else if (root == slot && table.alias[slot] == -1 && roots_of_outputs[slot] == 1) storage[o] = kOwnOutput;
  }
  return storage;
}

void raise_if_set(const int64_t word[2], const std::string& node, const std::string& message) {
  if (word[0] != 0) fail(ErrorCode::InvalidArgument, node, ": ", message, " (got ", word[1], ")");
}

void perturb_for_fault(Tensor& t) {
  if (t.numel() == 0) return;
  if (t.dtype() == DType::Float32) t.data<float>()[0] += 1.0f;
  else if (t.dtype() == DType::Float64) t.data<double>()[0] += 1.0;
  else if (t.dtype() == DType::Bool) t.data<bool>()[0] = !t.data<bool>()[0];
  else if (t.dtype() == DType::Int32) t.data<int32_t>()[0] += 1;
  else if (t.dtype() == DType::Int64) t.data<int64_t>()[0] += 1;
}

}  // namespace terrace
