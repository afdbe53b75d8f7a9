// The tensors the CLI reads and writes: --input and --expect files (numpy's .npy and .npz, ONNX's
// TensorProto .pb) and --output-dir's files.
#pragma once
#include <string>

#include "interp/graph.h"
#include "tiers/session.h"
#include "tools/cli_util.h"

namespace terrace::cli {

// The formats a tensor file may be in, for messages and --help.
inline constexpr const char* kTensorFileFormats =
    "a .npy file (numpy.save) or a TensorProto .pb file (ONNX test data)";

// The tensor in the file at `path`, told by its content: .npy, else a TensorProto. IoError when it
// cannot be read; InvalidArgument naming the file and the formats taken when it is neither (an
// .npz, which holds several, says how to give it).
Tensor load_tensor_file(const std::string& path);

// Every --input of `p`, in order: NAME=FILE (.npy or .pb), and FILE.npz, each of whose arrays is
// the input of its name. UsageError for a name given twice or that is not a graph input;
// InvalidArgument naming the file for a tensor whose dtype, rank or fixed dims differ from the
// graph input's.
NamedTensors input_files(const ParsedArgs& p, const Graph& graph);

// A tensor against the graph input `name` it feeds (the run would fail later, with less said):
// InvalidArgument "<what> is float64[3,4], but the model's input x is float32[N,4]" where its dtype,
// rank or a fixed dim differs. Nothing for a name that is no graph input.
void check_against_input(const Graph& graph, const std::string& name, const Tensor& t, const std::string& what);

// `inputs` with each of `files` in place of the input of its name, or added after them.
NamedTensors with_files(NamedTensors inputs, const NamedTensors& files);

// How --output-dir writes: NAME.npy (numpy) or output_N.pb (a TensorProto, ONNX's test-data layout).
enum class OutputFormat { Npy, Pb };
OutputFormat parse_output_format(const std::string& text);

// Writes each output into `dir` (created if need be), printing a line per file. A .npy file is
// named after its output, with every character but letters, digits, '.', '-' and '_' replaced by
// '_' (and a suffix where two names would meet); IoError naming the path on failure.
void write_output_files(const std::string& dir, const NamedTensors& outputs, OutputFormat format);

// The file name (without .npy) for output `name`, the `taken` names (lowercase) avoided and added to.
std::string output_file_stem(const std::string& name, size_t index, std::vector<std::string>& taken);

}  // namespace terrace::cli
