// Input binding and checks for Session::run.
#include "tiers/input_check.h"

#include <algorithm>

namespace terrace {

std::vector<RValue> bind_inputs(const Graph& g, const NamedTensors& inputs) {
  std::vector<RValue> bound(g.inputs.size());
  std::vector<bool> seen(g.inputs.size(), false);
  for (const auto& [name, t] : inputs) {
    auto it = std::find_if(g.inputs.begin(), g.inputs.end(),
                           [&](int id) { return g.values[size_t(id)].name == name; });
    if (it == g.inputs.end()) {
      std::string names;
      for (int id : g.inputs) names += (names.empty() ? "" : ", ") + g.values[size_t(id)].name;
      fail(ErrorCode::InvalidArgument, "'", name, "' is not an input of the model (inputs: ", names, ")");
    }
    size_t k = size_t(it - g.inputs.begin());
    TERRACE_CHECK(!seen[k], InvalidArgument, "input '", name, "' is given more than once");
    seen[k] = true;
    TERRACE_CHECK(t.defined(), InvalidArgument, "input '", name, "' is an undefined tensor");
    const ValueInfo& info = g.values[size_t(*it)].info;
    if (info.dtype)
      TERRACE_CHECK(*info.dtype == t.dtype(), InvalidArgument, "input '", name, "' must be ",
                    dtype_name(*info.dtype), ", got ", dtype_name(t.dtype()));
    if (info.shape) {
      const Shape& want = *info.shape;
      TERRACE_CHECK(int64_t(want.size()) == t.rank(), InvalidArgument, "input '", name,
                    "' must have rank ", want.size(), " (shape ", shape_str(want), "), got shape ",
                    shape_str(t.shape()));
      for (size_t d = 0; d < want.size(); ++d)
        TERRACE_CHECK(want[d] < 0 || want[d] == t.shape()[d], InvalidArgument, "input '", name,
                      "' dim ", d, " must be ", want[d], " (shape ", shape_str(want), "), got shape ",
                      shape_str(t.shape()));
    }
    bound[k] = RValue(t);
  }
  for (size_t k = 0; k < g.inputs.size(); ++k)
    TERRACE_CHECK(seen[k], InvalidArgument, "input '", g.values[size_t(g.inputs[k])].name,
                  "' is missing (", inputs.size(), " of ", g.inputs.size(), " inputs given)");
  return bound;
}

}  // namespace terrace
