/* exit_with_live_session MODEL CALLS: runs a float32 model of one input CALLS times through the C
 * API, then returns from main without releasing the session, its compiles still queued or running
 * (issue 32, F9: exit() destroyed oneDNN's and ONNX's statics under the compile thread). A symbolic
 * dim is taken as 2. Exits 0; any crash at exit is the failure. */
#include <stdio.h>
#include <stdlib.h>

#include "capi/terrace_c.h"

int main(int argc, char** argv) {
  const TerraceApi* api = TerraceGetApi(TERRACE_API_VERSION);
  TerraceSession* session = NULL;
  TerraceValue *in = NULL, *out = NULL;
  TerraceDType dtype;
  int64_t rank = 0, shape[8];
  const int64_t* dims = NULL;
  const char* name = NULL;
  TerraceStatus* st;
  int i, calls;
  if (argc != 3 || !api) return 2;
  calls = atoi(argv[2]);
  st = api->CreateSession(argv[1], NULL, &session);
  if (!st) st = api->SessionGetInputName(session, 0, &name);
  if (!st) st = api->SessionGetInputType(session, 0, &dtype, &rank, &dims);
  if (!st && (rank > 8 || dtype != TERRACE_FLOAT32)) return 2;
  for (i = 0; !st && i < rank; ++i) shape[i] = dims[i] < 0 ? 2 : dims[i];
  if (!st) st = api->CreateTensor(TERRACE_FLOAT32, shape, (size_t)rank, &in);
  for (i = 0; !st && i < calls; ++i) {
    const TerraceValue* inputs[1] = {in};
    st = api->Run(session, NULL, &name, inputs, 1, &out, 1);
    if (!st) api->ReleaseValue(out);
  }
  if (st) {
    fprintf(stderr, "%s\n", api->GetErrorMessage(st));
    return 1;
  }
  return 0; /* the session is left alive on purpose */
}
