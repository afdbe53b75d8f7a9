// A short account of a tensor's values, for `terrace run`'s output lines and JSON (as a numpy user
// would print a[:5], a.min(), a.max(), a.mean() and np.isnan(a).sum()).
#pragma once
#include <string>
#include <vector>

#include "interp/tensor.h"
#include "tools/json_out.h"

namespace terrace::cli {

struct ValueSummary {
  std::vector<std::string> first;     // the first elements, as text
  int64_t count = 0;                  // elements in all
  bool numeric = false;               // min, max and mean are set (numbers and bools, not strings)
  double min = 0, max = 0, mean = 0;  // over the elements that are not NaN; NaN when there are none
  int64_t nans = 0;                   // NaN elements (float types only)
  bool has_nans = false;              // whether the dtype has NaN at all
};

// The summary of a host tensor's values, showing at most `shown` elements.
ValueSummary summarize_values(const Tensor& t, size_t shown = 5);

// "[0.5, -1, 2, ...] min -1, max 2, mean 0.5, NaN 0": one line's worth.
std::string summary_text(const ValueSummary& s);

// {"first": [...], "min": .., "max": .., "mean": .., "nan_count": ..} (the last four where numeric).
Json summary_json(const ValueSummary& s);

}  // namespace terrace::cli
