/* run_model MODEL: loads an ONNX model through Terrace's C API, runs it once on random inputs of
 * the declared shapes (a symbolic dim taken as 1), prints each output's shape and the report.
 * Built against an installed Terrace: see tools/examples/CMakeLists.txt and README.md. */
#include <stdio.h>
#include <stdlib.h>

#include "capi/terrace_c.h"

static const TerraceApi* api;

/* Prints a failed status and says so. */
static int failed(TerraceStatus* status) {
  if (!status) return 0;
  fprintf(stderr, "error: %s\n", api->GetErrorMessage(status));
  api->ReleaseStatus(status);
  return 1;
}

static void fill_random(TerraceValue* value, TerraceDType dtype, size_t count) {
  void* data = NULL;
  size_t i;
  if (failed(api->GetTensorData(value, &data))) return;
  for (i = 0; i < count; ++i) {
    double r = (double)rand() / RAND_MAX * 2.0 - 1.0;
    if (dtype == TERRACE_FLOAT32) ((float*)data)[i] = (float)r;
    else if (dtype == TERRACE_FLOAT64) ((double*)data)[i] = r;
    /* other dtypes stay zero (indices, masks) */
  }
}

int main(int argc, char** argv) {
  TerraceSession* session = NULL;
  TerraceValue** inputs = NULL;
  TerraceValue** outputs = NULL;
  const char** names = NULL;
  size_t n_in = 0, n_out = 0, i, d;
  char* report = NULL;
  int rc = 1;

  if (argc != 2) {
    fprintf(stderr, "usage: %s MODEL.onnx\n", argv[0]);
    return 2;
  }
  api = TerraceGetApi(TERRACE_API_VERSION);
  if (!api) {
    fprintf(stderr, "error: this libterrace is older than API version %d\n", TERRACE_API_VERSION);
    return 1;
  }
  printf("terrace %s (C API version %d)\n", api->GetVersionString(), TERRACE_API_VERSION);
  if (failed(api->CreateSession(argv[1], NULL, &session))) return 1;
  if (failed(api->SessionGetInputCount(session, &n_in)) || failed(api->SessionGetOutputCount(session, &n_out))) goto done;
  inputs = calloc(n_in + 1, sizeof *inputs);
  outputs = calloc(n_out + 1, sizeof *outputs);
  names = calloc(n_in + 1, sizeof *names);
  if (!inputs || !outputs || !names) goto done;
  for (i = 0; i < n_in; ++i) {
    TerraceDType dtype;
    int64_t rank = 0, shape[16];
    const int64_t* dims = NULL;
    size_t count = 1;
    if (failed(api->SessionGetInputName(session, i, &names[i])) ||
        failed(api->SessionGetInputType(session, i, &dtype, &rank, &dims)))
      goto done;
    if (rank < 0 || rank > 16) {
      fprintf(stderr, "error: input '%s' has no usable rank\n", names[i]);
      goto done;
    }
    printf("input '%s': rank %d [", names[i], (int)rank);
    for (d = 0; d < (size_t)rank; ++d) {
      shape[d] = dims[d] < 0 ? 1 : dims[d];
      count *= (size_t)shape[d];
      printf(d ? ",%lld" : "%lld", (long long)shape[d]);
    }
    printf("]\n");
    if (failed(api->CreateTensor(dtype, shape, (size_t)rank, &inputs[i]))) goto done;
    fill_random(inputs[i], dtype, count);
  }
  if (failed(api->Run(session, NULL, names, (const TerraceValue* const*)inputs, n_in, outputs, n_out))) goto done;
  for (i = 0; i < n_out; ++i) {
    const char* name = NULL;
    size_t rank = 0;
    const int64_t* dims = NULL;
    if (failed(api->SessionGetOutputName(session, i, &name)) ||
        failed(api->GetTensorType(outputs[i], NULL, &rank, &dims)))
      goto done;
    printf("output '%s': shape [", name);
    for (d = 0; d < rank; ++d) printf(d ? ",%lld" : "%lld", (long long)dims[d]);
    printf("]\n");
  }
  if (failed(api->SessionGetReport(session, 0, &report))) goto done;
  printf("%s\n", report);
  rc = 0;
done:
  api->ReleaseString(report);
  for (i = 0; inputs && i < n_in; ++i) api->ReleaseValue(inputs[i]);
  for (i = 0; outputs && i < n_out; ++i) api->ReleaseValue(outputs[i]);
  free(inputs);
  free(outputs);
  free(names);
  api->ReleaseSession(session);
  return rc;
}
