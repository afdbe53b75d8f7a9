// The session fuzz target: bytes -> Session::load_bytes -> several run() calls with random inputs
// of the declared dtypes and shapes, so that hot regions are promoted and tier 1 compiles them.
// A terrace::Error anywhere is a clean outcome; a crash, a sanitizer report or any other
// exception is a finding. Built as a libFuzzer binary by tools/fuzz.sh (TERRACE_FUZZ=ON, clang,
// ASan and UBSan); the normal build compiles it into test_fuzz, which replays the regressions.
#include "tests/fuzz/session_fuzzer.h"

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <type_traits>

#include "interp/error.h"
#include "tiers/session.h"

namespace terrace::fuzz {

namespace {

// Caps that keep one input from asking for gigabytes: elements per input and bytes in all.
constexpr int64_t kMaxInputElements = int64_t(1) << 16;
constexpr int64_t kMaxInputBytes = int64_t(1) << 20;

// FNV-1a of the model's bytes: the inputs' values and symbolic dims follow from the model alone,
// so a reproducer replays exactly.
uint64_t hash_bytes(const uint8_t* data, size_t size) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  return h;
}

// Mostly small values (indices, counts, shapes), sometimes negative or out of range: what index
// checks must refuse cleanly. Kept within +-2^20 so that arithmetic on a few of them stays far
// from overflow (wrapping integer arithmetic is not what this target looks for).
template <typename T>
T random_integer(std::mt19937_64& rng) {
  static const int64_t kEdges[] = {-1, -2, -7, 0, 1, 2, 3, 64, -64, -(1 << 20), 1 << 20};
  int64_t v;
  switch (rng() % 16) {
    case 0: v = kEdges[rng() % (sizeof kEdges / sizeof kEdges[0])]; break;
    case 1: v = int64_t(rng() % 41) - 20; break;
    default: v = int64_t(rng() % 10); break;
  }
  if constexpr (std::is_unsigned_v<T>) v = v < 0 ? -v : v;
  if (v < int64_t(std::numeric_limits<T>::lowest()) || v > int64_t(std::numeric_limits<T>::max()))
    v = int64_t(rng() % 10);
  return T(v);
}

// Mostly uniform in [-1, 1]; sometimes 0, -0, a large value, NaN or an infinity.
float random_real(std::mt19937_64& rng) {
  switch (rng() % 32) {
    case 0: return 0.0f;
    case 1: return -0.0f;
    case 2: return 1e30f;
    case 3: return std::numeric_limits<float>::quiet_NaN();
    case 4: return std::numeric_limits<float>::infinity();
    case 5: return -std::numeric_limits<float>::infinity();
    default: return float(std::uniform_real_distribution<double>(-1.0, 1.0)(rng));
  }
}

// Random inputs of the declared dtypes and shapes; symbolic or unknown dims get `dim`.
// False when an input cannot be made (no declared dtype or rank, not a tensor) or is too large.
bool make_inputs(const Graph& g, std::mt19937_64& rng, int64_t dim, NamedTensors* out) {
  int64_t bytes = 0;
  for (int id : g.inputs) {
    const Value& v = g.values[size_t(id)];
    if (v.info.kind != ValueKind::Tensor || !v.info.dtype || !v.info.shape) return false;
    Shape shape = *v.info.shape;
    int64_t numel = 1;
    for (int64_t& d : shape) {
      if (d < 0) d = dim;
      if (d > kMaxInputElements) return false;
      numel *= d;
      if (numel > kMaxInputElements) return false;
    }
    bytes += numel * int64_t(dtype_size(*v.info.dtype));
    if (bytes > kMaxInputBytes) return false;
    Tensor t = Tensor::empty(*v.info.dtype, shape);
    if (is_narrow(t.dtype())) {  // float8: any code (NaN and Inf included); 4-bit types: any nibble
      dispatch_dtype<false, true>(t.dtype(), [&](auto tag) {
        using T = decltype(tag);
        if constexpr (kIsNarrow<T>) {
          T* p = t.data<T>();
          for (int64_t i = 0; i < t.numel(); ++i)
            p[i] = kIsNarrowInt<T> || std::is_same_v<T, Float4E2M1> ? from_nibble<T>(uint8_t(rng())) : T(uint8_t(rng()));
        }
      });
      out->emplace_back(v.name, std::move(t));
      continue;
    }
    dispatch_dtype<true>(t.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* p = t.data<T>();
      for (int64_t i = 0; i < t.numel(); ++i) {
        if constexpr (std::is_same_v<T, std::string>) p[i] = std::string(rng() % 4, char('a' + rng() % 26));
        else if constexpr (std::is_same_v<T, bool>) p[i] = rng() & 1;
        else if constexpr (std::is_integral_v<T>) p[i] = random_integer<T>(rng);
        else p[i] = T(random_real(rng));
      }
    });
    out->emplace_back(v.name, std::move(t));
  }
  return true;
}

bool has_symbolic_dims(const Graph& g) {
  for (int id : g.inputs) {
    const ValueInfo& info = g.values[size_t(id)].info;
    if (info.shape)
      for (int64_t d : *info.shape)
        if (d < 0) return true;
  }
  return false;
}

}  // namespace

Options fuzz_options() {
  Options o;                 // not from_env: no disk cache, no tier chosen by the environment
  o.max_tier = Tier::Cpu;
  o.hot_threshold = 2;
  o.interp_threads = 1;      // the fuzzer's own parallelism is its processes
  o.compile_threads = 1;
  return o;
}

Outcome fuzz_one(const uint8_t* data, size_t size) {
  Outcome outcome;
  std::unique_ptr<Session> session;
  try {
    session = Session::load_bytes(std::string_view(reinterpret_cast<const char*>(data), size),
                                  fuzz_options());
  } catch (const Error&) {
    return outcome;  // not a model Terrace takes: a clean refusal
  }
  outcome.loaded = true;
  std::mt19937_64 rng(hash_bytes(data, size));
  const int64_t dim = 1 + int64_t(rng() % 3);
  // The calls: two on the interpreter (the second makes the regions hot), then, once the
  // compiles are done, two on tier 1 (shadow-validated) with the same and with new values; where
  // dims are symbolic, a last call with other dims fails the compiled versions' shape guards.
  try {
    NamedTensors inputs;
    if (!make_inputs(session->graph(), rng, dim, &inputs)) {
      session->run({});  // inputs we cannot make: only the refusal is checked
      return outcome;
    }
    for (int call = 0; call < 4; ++call) {
      if (call == 2) session->wait_for_compiles();
      if (call == 3) {
        inputs.clear();
        make_inputs(session->graph(), rng, dim, &inputs);
      }
      session->run(inputs);
      ++outcome.calls;
    }
    if (has_symbolic_dims(session->graph())) {
      inputs.clear();
      if (make_inputs(session->graph(), rng, dim == 1 ? 2 : dim - 1, &inputs)) {
        session->run(inputs);
        ++outcome.calls;
      }
    }
    session->wait_for_compiles();
  } catch (const Error&) {
    // a clean error from run(): the model is refused or its inputs are
  }
  return outcome;
}

}  // namespace terrace::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    terrace::fuzz::fuzz_one(data, size);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "session_fuzzer: a non-terrace exception escaped: %s\n", e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "session_fuzzer: a non-std exception escaped\n");
    std::abort();
  }
  return 0;
}
