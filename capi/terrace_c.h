/* terrace_c.h: Terrace's C API (C99 and C++): sessions, tensors, runs, reports, through a
 * versioned table of function pointers.
 *
 *   const TerraceApi* api = TerraceGetApi(TERRACE_API_VERSION);
 *   TerraceSession* session = NULL;
 *   TerraceStatus* st = api->CreateSession("model.onnx", NULL, &session);
 *   if (st) { fprintf(stderr, "%s\n", api->GetErrorMessage(st)); api->ReleaseStatus(st); }
 *
 * Every function that can fail returns a TerraceStatus*: NULL on success, else a status holding a
 * code and a message (the code's name, then what is at fault, as terrace::Error says it), which
 * the caller releases with ReleaseStatus. No C++ exception crosses this boundary. Objects a
 * function creates are the caller's to release with the matching Release function; Release
 * functions accept NULL. Strings a session returns (names) live as long as the session.
 *
 * Compatibility: the table only grows. A program built against version N asks for N and gets a
 * table whose first N versions' entries are those it knows, from this library or any later one;
 * TerraceGetApi returns NULL for a version newer than the library's.
 */
#ifndef TERRACE_C_H
#define TERRACE_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TERRACE_API_VERSION 2

/* terrace::ErrorCode, in its order; TERRACE_OK is never held by a status. */
typedef enum TerraceErrorCode {
  TERRACE_OK = 0,
  TERRACE_INVALID_MODEL = 1,
  TERRACE_INVALID_ARGUMENT = 2,
  TERRACE_NOT_IMPLEMENTED = 3,
  TERRACE_RUNTIME_ERROR = 4,
  TERRACE_COMPILE_FAILED = 5,
  TERRACE_OUT_OF_MEMORY = 6,
  TERRACE_CANCELLED = 7,
  TERRACE_IO_ERROR = 8,
  TERRACE_INTERNAL = 9
} TerraceErrorCode;

/* Element types, numbered as ONNX's TensorProto.DataType (strings are not in the C API). */
typedef enum TerraceDType {
  TERRACE_DTYPE_UNKNOWN = 0,
  TERRACE_FLOAT32 = 1,
  TERRACE_UINT8 = 2,
  TERRACE_INT8 = 3,
  TERRACE_UINT16 = 4,
  TERRACE_INT16 = 5,
  TERRACE_INT32 = 6,
  TERRACE_INT64 = 7,
  TERRACE_BOOL = 9,
  TERRACE_FLOAT16 = 10,
  TERRACE_FLOAT64 = 11,
  TERRACE_UINT32 = 12,
  TERRACE_UINT64 = 13,
  TERRACE_BFLOAT16 = 16,
  /* The narrow types (version 2): one byte per element in a tensor's memory, the 4-bit ones
   * unpacked (one value per byte: int4 sign-extended, so the byte reads as an int8; uint4 and
   * float4's code in the low nibble). */
  TERRACE_FLOAT8E4M3FN = 17,
  TERRACE_FLOAT8E4M3FNUZ = 18,
  TERRACE_FLOAT8E5M2 = 19,
  TERRACE_FLOAT8E5M2FNUZ = 20,
  TERRACE_UINT4 = 21,
  TERRACE_INT4 = 22,
  TERRACE_FLOAT4E2M1 = 23
} TerraceDType;

typedef enum TerraceTier { TERRACE_TIER_INTERP = 0, TERRACE_TIER_CPU = 1, TERRACE_TIER_GPU = 2 } TerraceTier;

typedef enum TerraceOptimizeLevel {
  TERRACE_OPTIMIZE_NONE = 0,
  TERRACE_OPTIMIZE_BASIC = 1,
  TERRACE_OPTIMIZE_EXTENDED = 2
} TerraceOptimizeLevel;

/* Options::mode: presets named as torch.compile's (README, "Modes"). */
typedef enum TerraceMode {
  TERRACE_MODE_DEFAULT = 0,
  TERRACE_MODE_REDUCE_OVERHEAD = 1,
  TERRACE_MODE_MAX_AUTOTUNE = 2
} TerraceMode;

typedef struct TerraceStatus TerraceStatus;
typedef struct TerraceOptions TerraceOptions;
typedef struct TerraceSession TerraceSession;
typedef struct TerraceValue TerraceValue; /* a tensor */
typedef struct TerraceRunOptions TerraceRunOptions;

typedef struct TerraceApi {
  /* ---- version 1 ---- */

  /* Statuses. */
  TerraceErrorCode (*GetErrorCode)(const TerraceStatus* status);  /* TERRACE_OK for NULL */
  const char* (*GetErrorMessage)(const TerraceStatus* status);    /* "" for NULL; lives as the status */
  void (*ReleaseStatus)(TerraceStatus* status);

  /* Options: created with the environment's defaults (TERRACE_MAX_TIER, TERRACE_CACHE_DIR, ...). */
  TerraceStatus* (*CreateOptions)(TerraceOptions** out);
  TerraceStatus* (*SetMaxTier)(TerraceOptions* options, TerraceTier tier);
  /* Interpreter threads during a run (0: OMP_NUM_THREADS or all cores) and background compile
   * threads (at least 1); a session uses at most the machine's hardware threads of each (and says
   * so when it cuts a count down). */
  TerraceStatus* (*SetThreads)(TerraceOptions* options, int interp_threads, int compile_threads);
  /* The disk cache of compiled code; "" turns it off. */
  TerraceStatus* (*SetCacheDir)(TerraceOptions* options, const char* dir);
  TerraceStatus* (*SetOptimizeLevel)(TerraceOptions* options, TerraceOptimizeLevel level);
  void (*ReleaseOptions)(TerraceOptions* options);

  /* Sessions. `options` may be NULL (the environment's defaults); the session copies them. */
  TerraceStatus* (*CreateSession)(const char* model_path, const TerraceOptions* options, TerraceSession** out);
  TerraceStatus* (*CreateSessionFromBytes)(const void* model_bytes, size_t size, const TerraceOptions* options,
                                           TerraceSession** out);
  void (*ReleaseSession)(TerraceSession* session);

  /* The graph's inputs and outputs, in declaration order. A type's dims are sizes, -1 where a
   * dim is symbolic or unknown; rank is -1 where even the rank is unknown (then dims is NULL).
   * Names and dims live as long as the session. */
  TerraceStatus* (*SessionGetInputCount)(const TerraceSession* session, size_t* out);
  TerraceStatus* (*SessionGetOutputCount)(const TerraceSession* session, size_t* out);
  TerraceStatus* (*SessionGetInputName)(const TerraceSession* session, size_t index, const char** out);
  TerraceStatus* (*SessionGetOutputName)(const TerraceSession* session, size_t index, const char** out);
  TerraceStatus* (*SessionGetInputType)(const TerraceSession* session, size_t index, TerraceDType* dtype,
                                        int64_t* rank, const int64_t** dims);
  TerraceStatus* (*SessionGetOutputType)(const TerraceSession* session, size_t index, TerraceDType* dtype,
                                         int64_t* rank, const int64_t** dims);
  /* The symbolic name of an input's dim ("batch"), or "" where it has none. */
  TerraceStatus* (*SessionGetInputDimName)(const TerraceSession* session, size_t index, size_t dim,
                                           const char** out);

  /* Tensors. CreateTensor allocates zeroed memory the value owns. CreateTensorOverData uses the
   * caller's `data` of `size` bytes (exactly the shape's elements) without copying: the caller
   * keeps it alive and unchanged until the value is released and any run reading it returned. */
  TerraceStatus* (*CreateTensor)(TerraceDType dtype, const int64_t* shape, size_t rank, TerraceValue** out);
  TerraceStatus* (*CreateTensorOverData)(TerraceDType dtype, const int64_t* shape, size_t rank, void* data,
                                         size_t size, TerraceValue** out);
  TerraceStatus* (*GetTensorData)(TerraceValue* value, void** out);
  TerraceStatus* (*GetTensorType)(const TerraceValue* value, TerraceDType* dtype, size_t* rank,
                                  const int64_t** dims);
  /* Bytes of the tensor's data. */
  TerraceStatus* (*GetTensorSize)(const TerraceValue* value, size_t* out);
  void (*ReleaseValue)(TerraceValue* value);

  /* Run options: Terminate (from any thread) stops the runs given these options at their next
   * step with TERRACE_CANCELLED, as does passing the deadline (milliseconds from now; one past the
   * clock's range, INT64_MAX included, means no deadline). */
  TerraceStatus* (*CreateRunOptions)(TerraceRunOptions** out);
  TerraceStatus* (*RunOptionsTerminate)(TerraceRunOptions* options);
  TerraceStatus* (*RunOptionsSetDeadline)(TerraceRunOptions* options, int64_t milliseconds_from_now);
  void (*ReleaseRunOptions)(TerraceRunOptions* options);

  /* Runs the session on `input_count` named inputs (each graph input exactly once, of its dtype,
   * rank and static dims) and fills `outputs[0..output_count)` with new values, the graph's outputs
   * in order (output_count must be their count); `run_options` may be NULL. Thread-safe. On
   * failure no output is set. */
  TerraceStatus* (*Run)(TerraceSession* session, const TerraceRunOptions* run_options,
                        const char* const* input_names, const TerraceValue* const* inputs, size_t input_count,
                        TerraceValue** outputs, size_t output_count);

  /* The session's report as text or as JSON, a new NUL-terminated string the caller releases
   * with ReleaseString. */
  TerraceStatus* (*SessionGetReport)(const TerraceSession* session, int json, char** out);
  void (*ReleaseString)(char* s);

  /* The library's version, "0.1.0". */
  const char* (*GetVersionString)(void);

  /* ---- version 2 ---- */

  /* Options::mode (TERRACE_MODE), Options::strict (TERRACE_STRICT: loading fails, listing every
   * graph break, instead of interpreting them) and Options::profile_file (TERRACE_PROFILE: a
   * Chrome trace of the session, written when it is released; NULL or "" for none). */
  TerraceStatus* (*SetMode)(TerraceOptions* options, TerraceMode mode);
  TerraceStatus* (*SetStrict)(TerraceOptions* options, int strict);
  TerraceStatus* (*SetProfileFile)(TerraceOptions* options, const char* path);
} TerraceApi;

/* The function table for `version` (TERRACE_API_VERSION of the header the program was built
 * with), or NULL when the library is older than that version. */
const TerraceApi* TerraceGetApi(uint32_t version);

#ifdef __cplusplus
}
#endif

#endif /* TERRACE_C_H */
