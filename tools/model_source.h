// A model as validate and bench take it: an .onnx file (the CLI) or the model's bytes (Python).
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "interp/onnx_import.h"
#include "tiers/session.h"

namespace terrace::cli {

struct ModelSource {
  std::string path;        // the .onnx file, when bytes is empty
  std::string_view bytes;  // the model itself; the caller keeps them alive while this is used
  std::shared_ptr<const Graph> loaded;  // the graph, where the caller has loaded it already

  // How reports name it: the path, or "<N bytes>".
  std::string name() const { return bytes.empty() ? path : "<" + std::to_string(bytes.size()) + " bytes>"; }
  // The graph as loaded, before any graph pass.
  std::shared_ptr<const Graph> graph() const {
    if (loaded) return loaded;
    return bytes.empty() ? load_onnx_file(path).graph : load_onnx_bytes(bytes).graph;
  }
  std::unique_ptr<Session> session(Options options) const {
    return bytes.empty() ? Session::load(path, std::move(options)) : Session::load_bytes(bytes, std::move(options));
  }
};

}  // namespace terrace::cli
