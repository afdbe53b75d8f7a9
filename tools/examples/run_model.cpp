// run_model MODEL: loads an ONNX model through Terrace's C++ API, runs it once on random inputs of
// the declared shapes (a symbolic dim taken as 1), prints each output's shape and the report.
// Built against an installed Terrace: see tools/examples/CMakeLists.txt and README.md.
#include <iostream>
#include <random>

#include "tiers/session.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " MODEL.onnx\n";
    return 2;
  }
  try {
    auto session = terrace::Session::load(argv[1]);
    const terrace::Graph& graph = session->graph();
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> uniform(-1, 1);
    terrace::NamedTensors inputs;
    for (int id : graph.inputs) {
      const terrace::Value& v = graph.value(id);
      if (!v.info.dtype || !v.info.shape) {
        std::cerr << "error: input '" << v.name << "' has no declared dtype and rank\n";
        return 1;
      }
      terrace::Shape shape = *v.info.shape;
      for (int64_t& d : shape) d = d < 0 ? 1 : d;
      terrace::Tensor t = terrace::Tensor::zeros(*v.info.dtype, shape);
      if (t.dtype() == terrace::DType::Float32)
        for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = uniform(rng);
      std::cout << "input '" << v.name << "': " << terrace::shape_str(t.shape()) << "\n";
      inputs.emplace_back(v.name, t);
    }
    for (const auto& [name, t] : session->run(inputs))
      std::cout << "output '" << name << "': shape " << terrace::shape_str(t.shape()) << "\n";
    std::cout << session->report() << "\n";
  } catch (const terrace::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
