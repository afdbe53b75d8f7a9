// Repro dumps: what a failed validation leaves in TERRACE_DUMP_DIR for a human to replay.
#pragma once
#include <string>
#include <vector>

#include "interp/graph.h"
#include "tiers/backend.h"

namespace terrace {

// The dump folder (TERRACE_DUMP_DIR), or "" when dumping is off.
std::string dump_dir();

// Writes a repro of a region whose compiled version disagreed with the interpreter, in the ONNX
// test-data layout so `terrace conformance DIR --tier cpu` replays it: model.onnx (the region),
// test_data_set_0/input_N.pb and output_N.pb (the interpreter's results), plus region.txt, the
// kernel IR, the generated code (for a library region: the primitive, its shapes, attributes and
// post-ops) and reason.txt. The judgement travels with it: tolerance.txt (each output's rtol and
// atol) and test_data_set_0/allowance_N.pb (the per-element rounding allowance, where the backend
// proves one), which `terrace conformance` applies when it replays the folder. The folder's name
// holds the graph's name, the region, the process and a counter, so dumps of several models,
// signatures or processes never overwrite each other. Returns the folder written, or "" when
// TERRACE_DUMP_DIR is unset or the dump failed (a dump never throws).
std::string dump_repro(const Graph& graph, const Region& region, const std::vector<Tensor>& inputs,
                       const std::vector<Tensor>& expected, const std::vector<Tensor>& allowance,
                       const CompiledRegion* code, const std::string& why);

}  // namespace terrace
