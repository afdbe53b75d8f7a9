/* The C API used from C (compiled as C99, -pedantic-errors): this file only compiles if
 * capi/terrace_c.h is C. capi_from_c runs a model whose one input is float32 [batch, 3] on a
 * [2, 3] tensor over caller memory and writes "rank R dims D0 D1 sum S" or the error to `out`. */
#include <stdio.h>

#include "capi/terrace_c.h"

int capi_from_c(const void* model, size_t size, char* out, size_t out_size) {
  const TerraceApi* api = TerraceGetApi(TERRACE_API_VERSION);
  TerraceSession* session = NULL;
  TerraceOptions* options = NULL;
  TerraceValue* input = NULL;
  TerraceValue* output = NULL;
  TerraceStatus* status = NULL;
  float data[6] = {1, 2, 3, -1, 0, 1};
  int64_t shape[2] = {2, 3};
  const char* name = NULL;
  const TerraceValue* inputs[1];
  const int64_t* dims = NULL;
  size_t rank = 0, i, bytes = 0;
  float* y = NULL;
  double sum = 0;
  int ok = 0;

  if (!api) {
    snprintf(out, out_size, "no API version %d", TERRACE_API_VERSION);
    return 0;
  }
  if ((status = api->CreateOptions(&options)) != NULL) goto done;
  if ((status = api->SetMaxTier(options, TERRACE_TIER_INTERP)) != NULL) goto done;
  if ((status = api->SetCacheDir(options, "")) != NULL) goto done;
  if ((status = api->CreateSessionFromBytes(model, size, options, &session)) != NULL) goto done;
  if ((status = api->SessionGetInputName(session, 0, &name)) != NULL) goto done;
  if ((status = api->CreateTensorOverData(TERRACE_FLOAT32, shape, 2, data, sizeof data, &input)) != NULL) goto done;
  inputs[0] = input;
  if ((status = api->Run(session, NULL, &name, inputs, 1, &output, 1)) != NULL) goto done;
  if ((status = api->GetTensorType(output, NULL, &rank, &dims)) != NULL) goto done;
  if ((status = api->GetTensorSize(output, &bytes)) != NULL) goto done;
  if ((status = api->GetTensorData(output, (void**)&y)) != NULL) goto done;
  for (i = 0; i < bytes / sizeof(float); ++i) sum += y[i];
  snprintf(out, out_size, "rank %d dims %d %d sum %g", (int)rank, (int)dims[0], (int)dims[1], sum);
  ok = 1;
done:
  if (status) snprintf(out, out_size, "%d %s", (int)api->GetErrorCode(status), api->GetErrorMessage(status));
  api->ReleaseStatus(status);
  api->ReleaseValue(output);
  api->ReleaseValue(input);
  api->ReleaseSession(session);
  api->ReleaseOptions(options);
  return ok;
}
