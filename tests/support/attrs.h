// Attribute values for hand-built nodes in tests.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "interp/graph.h"

namespace terrace::testing {

inline Attribute int_attr(int64_t v) { Attribute a; a.kind = Attribute::Kind::Int; a.i = v; return a; }
inline Attribute float_attr(float v) { Attribute a; a.kind = Attribute::Kind::Float; a.f = v; return a; }
inline Attribute str_attr(std::string s) { Attribute a; a.kind = Attribute::Kind::String; a.s = std::move(s); return a; }
inline Attribute ints_attr(std::vector<int64_t> v) {
  Attribute a; a.kind = Attribute::Kind::Ints; a.ints = std::move(v); return a;
}
inline Attribute floats_attr(std::vector<float> v) {
  Attribute a; a.kind = Attribute::Kind::Floats; a.floats = std::move(v); return a;
}
inline Attribute graph_attr(std::shared_ptr<Graph> g) {
  Attribute a; a.kind = Attribute::Kind::Graph; a.g = std::move(g); return a;
}

}  // namespace terrace::testing
