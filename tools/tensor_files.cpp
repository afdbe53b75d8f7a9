// The CLI's tensor files: inputs and expected outputs read by their content, outputs written.
#include "tools/tensor_files.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>

#include "interp/onnx_import.h"
#include "interp/tensor_proto.h"
#include "tools/npy.h"

namespace terrace::cli {

Tensor load_tensor_file(const std::string& path) {
  const std::string bytes = read_file_bytes(path);
  if (is_npy(bytes)) return tensor_from_npy(bytes, path);
  TERRACE_CHECK(!is_zip(bytes), InvalidArgument, path, " is a zip archive (.npz), which holds several arrays "
                "where one tensor is wanted: give it to --input without NAME= (each array is the input of its name)");
  try {
    return tensor_from_pb_bytes(bytes, path);
  } catch (const Error& e) {  // the file is no model: a protobuf that does not parse is the argument's fault
    fail(e.code() == ErrorCode::InvalidModel ? ErrorCode::InvalidArgument : e.code(), e.message(),
         "; a tensor file is ", kTensorFileFormats, "; --input also takes an .npz archive (numpy.savez)");
  }
}

namespace {

// "float32[batch,8]": a graph input's declared type, symbolic dims by name.
std::string declared(const ValueInfo& info) {
  std::string s = info.dtype ? dtype_name(*info.dtype) : "?";
  if (!info.shape) return s + "[any shape]";
  s += "[";
  for (size_t d = 0; d < info.shape->size(); ++d) {
    const int64_t n = (*info.shape)[d];
    const std::string sym = d < info.dim_names.size() ? info.dim_names[d] : "";
    s += (d ? "," : "") + (n >= 0 ? std::to_string(n) : sym.empty() ? "?" : sym);
  }
  return s + "]";
}

}  // namespace

void check_against_input(const Graph& graph, const std::string& name, const Tensor& t, const std::string& what) {
  for (int id : graph.inputs) {
    const Value& v = graph.values[size_t(id)];
    if (v.name != name) continue;
    bool fits = !v.info.dtype || *v.info.dtype == t.dtype();
    if (v.info.shape) {
      fits = fits && v.info.shape->size() == t.shape().size();
      for (size_t d = 0; fits && d < t.shape().size(); ++d)
        fits = (*v.info.shape)[d] < 0 || (*v.info.shape)[d] == t.shape()[d];
    }
    TERRACE_CHECK(fits, InvalidArgument, what, " is ", dtype_name(t.dtype()),
                  shape_str(t.shape()), ", but the model's input ", name, " is ", declared(v.info));
  }
}

NamedTensors with_files(NamedTensors inputs, const NamedTensors& files) {
  for (const auto& [name, t] : files) {
    auto it = std::find_if(inputs.begin(), inputs.end(), [&](const auto& in) { return in.first == name; });
    if (it != inputs.end()) it->second = t;
    else inputs.emplace_back(name, t);
  }
  return inputs;
}

NamedTensors input_files(const ParsedArgs& p, const Graph& graph) {
  NamedTensors out;
  auto add = [&](const std::string& name, Tensor t, const std::string& file, const std::string& option) {
    for (auto& [n, v] : out)
      if (n == name) throw UsageError{"--input given twice for '" + name + "'"};
    check_input_name(graph, name, option);
    check_against_input(graph, name, t, "--input " + name + " (" + file + ")");
    out.emplace_back(name, std::move(t));
  };
  for (const std::string& text : p.all("--input")) {
    if (text.find('=') != std::string::npos) {
      auto [name, file] = split_assignment("--input", text);
      add(name, load_tensor_file(file), file, "--input");
      continue;
    }
    const std::string bytes = read_file_bytes(text);
    if (!is_zip(bytes))
      throw UsageError{"--input " + text + ": without NAME= the file must be an .npz archive (numpy.savez); give " +
                       "a single tensor as --input NAME=FILE (" + kTensorFileFormats + ")"};
    for (auto& [name, t] : tensors_from_npz(bytes, text)) add(name, std::move(t), text, "--input " + text + ":");
  }
  return out;
}

OutputFormat parse_output_format(const std::string& text) {
  if (text == "npy") return OutputFormat::Npy;
  if (text == "pb") return OutputFormat::Pb;
  throw UsageError{"--output-format expects npy or pb, got '" + text + "'"};
}

std::string output_file_stem(const std::string& name, size_t index, std::vector<std::string>& taken) {
  std::string stem;
  for (char c : name)
    stem += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ? c : '_';
  // A name that is all dots (".", "..") or none would leave the folder or hide the file.
  if (stem.find_first_not_of('.') == std::string::npos) stem = "output_" + std::to_string(index);
  if (stem[0] == '.') stem[0] = '_';
  auto lower = [](std::string s) {
    for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  std::string unique = stem;  // two names may meet once cleaned, or on a case-blind file system
  for (int k = 1; std::find(taken.begin(), taken.end(), lower(unique)) != taken.end(); ++k)
    unique = stem + "_" + std::to_string(k);
  taken.push_back(lower(unique));
  return unique;
}

void write_output_files(const std::string& dir, const NamedTensors& outputs, OutputFormat format) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  TERRACE_CHECK(!ec && std::filesystem::is_directory(dir), IoError, "--output-dir: cannot create '", dir,
                "': ", ec ? ec.message() : "not a folder");
  std::vector<std::string> taken;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto& [name, t] = outputs[i];
    const std::string file = format == OutputFormat::Npy ? output_file_stem(name, i, taken) + ".npy"
                                                         : "output_" + std::to_string(i) + ".pb";
    const std::string path = (std::filesystem::path(dir) / file).string();
    write_text_file(path, format == OutputFormat::Npy ? tensor_to_npy(t, "output '" + name + "'")
                                                      : tensor_to_pb_bytes(t, name));
    std::printf("wrote %s (output %s)\n", path.c_str(), name.c_str());
  }
}

}  // namespace terrace::cli
