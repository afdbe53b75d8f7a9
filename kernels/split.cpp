#include "kernels/split.h"

#include <algorithm>

#include "kernels/lower.h"

namespace terrace::kernels {

SplitGroup split_by_domain(const FusionGroup& g) {
  const size_t n_ops = g.ops.size();
  std::vector<int> part_of(n_ops, -1);
  std::vector<Shape> domains;
  for (size_t i = 0; i < n_ops; ++i) {
    int lo = 0;
    for (const Operand& o : g.ops[i].operands)
      if (o.kind == Operand::Kind::Result) lo = std::max(lo, part_of[size_t(o.index)]);
    int p = lo;
    while (p < int(domains.size()) && !try_broadcast(domains[size_t(p)], g.ops[i].result.shape)) ++p;
    if (p == int(domains.size())) domains.push_back(g.ops[i].result.shape);
    part_of[i] = p;
  }

  // Slots: inputs, outputs, then results read by a later part.
  SplitGroup split;
  for (const TensorSig& s : g.inputs) split.slots.push_back(s);
  std::vector<int> slot_of(n_ops, -1);
  for (int o : g.outputs) {
    slot_of[size_t(o)] = int(split.slots.size());
    split.slots.push_back(g.ops[size_t(o)].result);
  }
  for (size_t i = 0; i < n_ops; ++i)
    for (const Operand& o : g.ops[i].operands)
      if (o.kind == Operand::Kind::Result && part_of[size_t(o.index)] != part_of[i] &&
          slot_of[size_t(o.index)] < 0) {
        slot_of[size_t(o.index)] = int(split.slots.size());
        split.slots.push_back(g.ops[size_t(o.index)].result);
      }

  for (size_t p = 0; p < domains.size(); ++p) {
    KernelPart part;
    part.group.name = domains.size() == 1 ? g.name : g.name + "_" + std::to_string(p);
    part.group.constants = g.constants;
    std::vector<int> local(n_ops, -1);  // op -> index in this part
    auto input_for_slot = [&](int slot) {
      auto it = std::find(part.input_slots.begin(), part.input_slots.end(), slot);
      if (it != part.input_slots.end()) return Operand::input(int(it - part.input_slots.begin()));
      part.input_slots.push_back(slot);
      part.group.inputs.push_back(split.slots[size_t(slot)]);
      return Operand::input(int(part.input_slots.size()) - 1);
    };
    for (size_t i = 0; i < n_ops; ++i) {
      if (part_of[i] != int(p)) continue;
      FusedOp op = g.ops[i];
      for (Operand& o : op.operands) {
        if (o.kind == Operand::Kind::Input) o = input_for_slot(o.index);
        else if (o.kind == Operand::Kind::Result && part_of[size_t(o.index)] == int(p))
          o = Operand::result(local[size_t(o.index)]);
        else if (o.kind == Operand::Kind::Result) o = input_for_slot(slot_of[size_t(o.index)]);
      }
      local[i] = int(part.group.ops.size());
      part.group.ops.push_back(std::move(op));
      if (slot_of[i] >= 0) {
        part.group.outputs.push_back(local[i]);
        part.output_slots.push_back(slot_of[i]);
      }
    }
    // A part whose results nobody reads (dead ops of the graph) is not run at all.
    if (!part.group.outputs.empty()) split.parts.push_back(std::move(part));
  }
  return split;
}

}  // namespace terrace::kernels
