// The C API (capi/terrace_c.h) over Session: handles wrap the C++ objects, every entry point
// catches everything and answers with a status.
#include "capi/terrace_c.h"

#include <chrono>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "tiers/session.h"

#ifndef TERRACE_VERSION_STRING
#define TERRACE_VERSION_STRING "0.1.0"
#endif

struct TerraceStatus {
  TerraceErrorCode code;
  std::string message;
};

struct TerraceOptions {
  terrace::Options options;
};

struct TerraceRunOptions {
  terrace::RunOptions options;
};

struct TerraceValue {
  terrace::Tensor tensor;
};

// A graph input's or output's type as the C API gives it.
struct TerraceValueType {
  TerraceDType dtype = TERRACE_DTYPE_UNKNOWN;
  int64_t rank = -1;
  std::vector<int64_t> dims;
  std::vector<std::string> dim_names;
};

struct TerraceSession {
  std::unique_ptr<terrace::Session> session;
  std::vector<std::string> input_names, output_names;
  std::vector<TerraceValueType> input_types, output_types;
};

namespace {

using terrace::ErrorCode;

// A status for when even a status cannot be allocated: ReleaseStatus leaves it alone.
TerraceStatus out_of_memory_status{TERRACE_OUT_OF_MEMORY, "OutOfMemory: out of memory"};

static_assert(int(ErrorCode::InvalidModel) + 1 == TERRACE_INVALID_MODEL && int(ErrorCode::Internal) + 1 == TERRACE_INTERNAL &&
              int(ErrorCode::Cancelled) + 1 == TERRACE_CANCELLED, "terrace_c.h's codes follow terrace::ErrorCode");

TerraceErrorCode c_code(ErrorCode code) {
  switch (code) {
#define X(name, text) \
  case ErrorCode::name: return TerraceErrorCode(int(ErrorCode::name) + 1);
    TERRACE_ERROR_CODES(X)
#undef X
  }
  return TERRACE_INTERNAL;
}

TerraceStatus* make_status(TerraceErrorCode code, const std::string& message) {
  try {
    return new TerraceStatus{code, message};
  } catch (...) {
    return &out_of_memory_status;
  }
}

// Runs f for the C function `function`, turning whatever it throws into a status whose message
// is "Code: function: what went wrong".
template <typename F>
TerraceStatus* guarded(const char* function, F&& f) noexcept {
  try {
    f();
    return nullptr;
  } catch (const terrace::Error& e) {
    try {
      return make_status(c_code(e.code()),
                         std::string(terrace::error_code_name(e.code())) + ": " + function + ": " + e.message());
    } catch (...) {
      return &out_of_memory_status;
    }
  } catch (const std::bad_alloc&) {
    return &out_of_memory_status;
  } catch (const std::exception& e) {
    return make_status(TERRACE_INTERNAL, std::string("Internal: ") + function + ": " + e.what());
  } catch (...) {
    return make_status(TERRACE_INTERNAL, std::string("Internal: ") + function + ": an unknown exception");
  }
}

#define TERRACE_C_NOT_NULL(p) TERRACE_CHECK((p) != nullptr, InvalidArgument, "argument '" #p "' is NULL")

terrace::DType dtype_of(TerraceDType d, const char* what) {
  terrace::DType t;
  TERRACE_CHECK(d != 8 && terrace::dtype_from_onnx(int(d), &t), InvalidArgument, what, ": dtype ", int(d),
                " is not a TerraceDType the C API supports");
  return t;
}

TerraceValueType type_of(const terrace::Value& v) {
  TerraceValueType t;
  if (v.info.kind == terrace::ValueKind::Tensor && v.info.dtype && *v.info.dtype != terrace::DType::String)
    t.dtype = TerraceDType(terrace::dtype_to_onnx(*v.info.dtype));
  if (v.info.shape) {
    t.rank = int64_t(v.info.shape->size());
    t.dims = *v.info.shape;
    t.dim_names = v.info.dim_names;
    t.dim_names.resize(t.dims.size());
  }
  return t;
}

TerraceSession* wrap(std::unique_ptr<terrace::Session> s) {
  auto out = std::make_unique<TerraceSession>();
  out->session = std::move(s);
  const terrace::Graph& g = out->session->graph();
  for (int v : g.inputs) {
    out->input_names.push_back(g.value(v).name);
    out->input_types.push_back(type_of(g.value(v)));
  }
  for (int v : g.outputs) {
    out->output_names.push_back(g.value(v).name);
    out->output_types.push_back(type_of(g.value(v)));
  }
  return out.release();
}

terrace::Options options_or_env(const TerraceOptions* options) {
  return options ? options->options : terrace::Options::from_env();
}

const TerraceValueType& type_at(const std::vector<TerraceValueType>& types, size_t index, const char* what) {
  TERRACE_CHECK(index < types.size(), InvalidArgument, what, " index ", index, " is out of range (",
                types.size(), " ", what, "s)");
  return types[index];
}

void get_type(const TerraceValueType& t, TerraceDType* dtype, int64_t* rank, const int64_t** dims) {
  if (dtype) *dtype = t.dtype;
  if (rank) *rank = t.rank;
  if (dims) *dims = t.rank >= 0 ? t.dims.data() : nullptr;
}

terrace::Shape shape_of(const int64_t* shape, size_t rank) {
  TERRACE_CHECK(shape || rank == 0, InvalidArgument, "a tensor of rank ", rank, " needs its shape (NULL given)");
  terrace::Shape s(shape, shape + rank);
  for (size_t i = 0; i < rank; ++i)
    TERRACE_CHECK(s[i] >= 0, InvalidArgument, "tensor dim ", i, " is ", s[i], " (must be 0 or more)");
  return s;
}

// ---- version 1 ----

TerraceErrorCode GetErrorCode(const TerraceStatus* s) { return s ? s->code : TERRACE_OK; }
const char* GetErrorMessage(const TerraceStatus* s) { return s ? s->message.c_str() : ""; }
void ReleaseStatus(TerraceStatus* s) {
  if (s != &out_of_memory_status) delete s;
}

TerraceStatus* CreateOptions(TerraceOptions** out) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(out);
    *out = new TerraceOptions{terrace::Options::from_env()};
  });
}
TerraceStatus* SetMaxTier(TerraceOptions* options, TerraceTier tier) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(options);
    TERRACE_CHECK(tier >= TERRACE_TIER_INTERP && tier <= TERRACE_TIER_GPU, InvalidArgument, "tier ",
                  int(tier), " is not a TerraceTier");
    options->options.max_tier = terrace::Tier(int(tier));
  });
}
TerraceStatus* SetThreads(TerraceOptions* options, int interp_threads, int compile_threads) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(options);
    TERRACE_CHECK(interp_threads >= 0 && compile_threads >= 1, InvalidArgument, "", interp_threads,
                  " interpreter and ", compile_threads, " compile threads (0 or more, and 1 or more)");
    options->options.interp_threads = interp_threads;
    options->options.compile_threads = compile_threads;
  });
}
TerraceStatus* SetCacheDir(TerraceOptions* options, const char* dir) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(options);
    TERRACE_C_NOT_NULL(dir);
    options->options.cache_dir = dir;
  });
}
TerraceStatus* SetOptimizeLevel(TerraceOptions* options, TerraceOptimizeLevel level) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(options);
    TERRACE_CHECK(level >= TERRACE_OPTIMIZE_NONE && level <= TERRACE_OPTIMIZE_EXTENDED, InvalidArgument,
                  "level ", int(level), " is not a TerraceOptimizeLevel");
    options->options.optimize = terrace::OptimizeLevel(int(level));
  });
}
TerraceStatus* SetMode(TerraceOptions* options, TerraceMode mode) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(options);
    TERRACE_CHECK(mode >= TERRACE_MODE_DEFAULT && mode <= TERRACE_MODE_MAX_AUTOTUNE, InvalidArgument, "mode ",
                  int(mode), " is not a TerraceMode");
    options->options.mode = terrace::Mode(int(mode));
  });
}
TerraceStatus* SetStrict(TerraceOptions* options, int strict) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(options);
    options->options.strict = strict != 0;
  });
}
TerraceStatus* SetProfileFile(TerraceOptions* options, const char* path) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(options);
    options->options.profile_file = path ? path : "";
  });
}
void ReleaseOptions(TerraceOptions* options) { delete options; }

TerraceStatus* CreateSession(const char* model_path, const TerraceOptions* options, TerraceSession** out) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(out);
    *out = nullptr;
    TERRACE_C_NOT_NULL(model_path);
    *out = wrap(terrace::Session::load(model_path, options_or_env(options)));
  });
}
TerraceStatus* CreateSessionFromBytes(const void* model_bytes, size_t size, const TerraceOptions* options,
                                      TerraceSession** out) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(out);
    *out = nullptr;
    TERRACE_C_NOT_NULL(model_bytes);
    *out = wrap(terrace::Session::load_bytes(std::string_view(static_cast<const char*>(model_bytes), size),
                                             options_or_env(options)));
  });
}
void ReleaseSession(TerraceSession* session) { delete session; }

TerraceStatus* SessionGetInputCount(const TerraceSession* session, size_t* out) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(session);
    TERRACE_C_NOT_NULL(out);
    *out = session->input_names.size();
  });
}
TerraceStatus* SessionGetOutputCount(const TerraceSession* session, size_t* out) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(session);
    TERRACE_C_NOT_NULL(out);
    *out = session->output_names.size();
  });
}
TerraceStatus* SessionGetInputName(const TerraceSession* session, size_t index, const char** out) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(session);
    TERRACE_C_NOT_NULL(out);
    type_at(session->input_types, index, "input");
    *out = session->input_names[index].c_str();
  });
}
TerraceStatus* SessionGetOutputName(const TerraceSession* session, size_t index, const char** out) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(session);
    TERRACE_C_NOT_NULL(out);
    type_at(session->output_types, index, "output");
    *out = session->output_names[index].c_str();
  });
}
TerraceStatus* SessionGetInputType(const TerraceSession* session, size_t index, TerraceDType* dtype, int64_t* rank,
                                   const int64_t** dims) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(session);
    get_type(type_at(session->input_types, index, "input"), dtype, rank, dims);
  });
}
TerraceStatus* SessionGetOutputType(const TerraceSession* session, size_t index, TerraceDType* dtype,
                                    int64_t* rank, const int64_t** dims) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(session);
    get_type(type_at(session->output_types, index, "output"), dtype, rank, dims);
  });
}
TerraceStatus* SessionGetInputDimName(const TerraceSession* session, size_t index, size_t dim, const char** out) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(session);
    TERRACE_C_NOT_NULL(out);
    const TerraceValueType& t = type_at(session->input_types, index, "input");
    TERRACE_CHECK(dim < t.dim_names.size(), InvalidArgument, "input '", session->input_names[index], "' has no dim ",
                  dim, " (rank ", t.rank, ")");
    *out = t.dim_names[dim].c_str();
  });
}

TerraceStatus* CreateTensor(TerraceDType dtype, const int64_t* shape, size_t rank, TerraceValue** out) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(out);
    *out = nullptr;
    *out = new TerraceValue{terrace::Tensor::zeros(dtype_of(dtype, "tensor"), shape_of(shape, rank))};
  });
}
TerraceStatus* CreateTensorOverData(TerraceDType dtype, const int64_t* shape, size_t rank, void* data, size_t size,
                                    TerraceValue** out) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(out);
    *out = nullptr;
    *out = new TerraceValue{
        terrace::Tensor::borrow(dtype_of(dtype, "tensor"), shape_of(shape, rank), data, size)};
  });
}
TerraceStatus* GetTensorData(TerraceValue* value, void** out) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(value);
    TERRACE_C_NOT_NULL(out);
    *out = value->tensor.raw();
  });
}
TerraceStatus* GetTensorType(const TerraceValue* value, TerraceDType* dtype, size_t* rank, const int64_t** dims) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(value);
    if (dtype) *dtype = TerraceDType(terrace::dtype_to_onnx(value->tensor.dtype()));
    if (rank) *rank = value->tensor.shape().size();
    if (dims) *dims = value->tensor.shape().data();
  });
}
TerraceStatus* GetTensorSize(const TerraceValue* value, size_t* out) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(value);
    TERRACE_C_NOT_NULL(out);
    *out = value->tensor.nbytes();
  });
}
void ReleaseValue(TerraceValue* value) { delete value; }

TerraceStatus* CreateRunOptions(TerraceRunOptions** out) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(out);
    *out = new TerraceRunOptions;
  });
}
TerraceStatus* RunOptionsTerminate(TerraceRunOptions* options) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(options);
    options->options.terminate();
  });
}
TerraceStatus* RunOptionsSetDeadline(TerraceRunOptions* options, int64_t milliseconds_from_now) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(options);
    TERRACE_CHECK(milliseconds_from_now >= 0, InvalidArgument, "", milliseconds_from_now,
                  " ms (must be 0 or more)");
    // A deadline past the clock's range (INT64_MAX as "no deadline") is none, not an overflow.
    using Clock = std::chrono::steady_clock;
    const Clock::time_point now = Clock::now();
    const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now);
    options->options.deadline = milliseconds_from_now >= room.count()
                                    ? Clock::time_point::max()
                                    : now + std::chrono::milliseconds(milliseconds_from_now);
  });
}
void ReleaseRunOptions(TerraceRunOptions* options) { delete options; }

TerraceStatus* Run(TerraceSession* session, const TerraceRunOptions* run_options, const char* const* input_names,
                   const TerraceValue* const* inputs, size_t input_count, TerraceValue** outputs,
                   size_t output_count) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(session);
    TERRACE_CHECK((input_names && inputs) || input_count == 0, InvalidArgument,
                  "input_names and inputs must be given for ", input_count, " inputs");
    TERRACE_CHECK(outputs || output_count == 0, InvalidArgument, "argument 'outputs' is NULL");
    TERRACE_CHECK(output_count == session->output_names.size(), InvalidArgument, output_count,
                  " outputs asked; the model has ", session->output_names.size());
    terrace::NamedTensors in;
    for (size_t i = 0; i < input_count; ++i) {
      TERRACE_CHECK(input_names[i], InvalidArgument, "input name ", i, " is NULL");
      TERRACE_CHECK(inputs[i], InvalidArgument, "input '", input_names[i], "' is NULL");
      in.emplace_back(input_names[i], inputs[i]->tensor);
    }
    terrace::NamedTensors out = run_options ? session->session->run(in, run_options->options)
                                            : session->session->run(in);
    TERRACE_ASSERT(out.size() == output_count, "the session gave ", out.size(), " outputs");
    std::vector<std::unique_ptr<TerraceValue>> made;
    for (auto& [name, t] : out)
      // An output that is an input (Identity) or a view of one would outlive the caller's memory.
      made.push_back(std::make_unique<TerraceValue>(TerraceValue{t.borrowed() ? t.clone() : std::move(t)}));
    for (size_t i = 0; i < output_count; ++i) outputs[i] = made[i].release();
  });
}

TerraceStatus* SessionGetReport(const TerraceSession* session, int json, char** out) {
  return guarded(__func__, [&] {
    TERRACE_C_NOT_NULL(session);
    TERRACE_C_NOT_NULL(out);
    *out = nullptr;
    const std::string text = json ? session->session->report_json() : session->session->report();
    char* s = new char[text.size() + 1];
    std::memcpy(s, text.c_str(), text.size() + 1);
    *out = s;
  });
}
void ReleaseString(char* s) { delete[] s; }

const char* GetVersionString() { return TERRACE_VERSION_STRING; }

constexpr TerraceApi kApi = {
    GetErrorCode, GetErrorMessage, ReleaseStatus,
    CreateOptions, SetMaxTier, SetThreads, SetCacheDir, SetOptimizeLevel, ReleaseOptions,
    CreateSession, CreateSessionFromBytes, ReleaseSession,
    SessionGetInputCount, SessionGetOutputCount, SessionGetInputName, SessionGetOutputName,
    SessionGetInputType, SessionGetOutputType, SessionGetInputDimName,
    CreateTensor, CreateTensorOverData, GetTensorData, GetTensorType, GetTensorSize, ReleaseValue,
    CreateRunOptions, RunOptionsTerminate, RunOptionsSetDeadline, ReleaseRunOptions,
    Run,
    SessionGetReport, ReleaseString,
    GetVersionString,
    SetMode, SetStrict, SetProfileFile,
};

}  // namespace

extern "C" const TerraceApi* TerraceGetApi(uint32_t version) {
  return version >= 1 && version <= TERRACE_API_VERSION ? &kApi : nullptr;
}
