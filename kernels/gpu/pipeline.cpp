// run_gpu_passes(): the GPU mapping passes in order, each verified and observable (pipeline.h).
#include "kernels/gpu/pipeline.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "kernels/gpu/cache_rows.h"
#include "kernels/gpu/map_elements.h"
#include "kernels/gpu/map_rows.h"
#include "kernels/plain_folds.h"
#include "kernels/printer.h"
#include "kernels/verify.h"

namespace terrace::kernels::gpu {
namespace {

void dump(const std::string& pass, int n, const LoweredFunc& f) {
  const char* dir = std::getenv("TERRACE_GPU_PASS_DUMP_DIR");
  if (!dir || !*dir) return;
  std::error_code ec;  // best effort: a dump that cannot be written changes nothing
  std::filesystem::create_directories(dir, ec);
  std::ofstream(std::filesystem::path(dir) / (f.name + "." + std::to_string(n) + "." + pass + ".ir")) << to_string(f);
}

}  // namespace

GpuKernel run_gpu_passes(const LoweredFunc& f, CudaSchedule s, const PassObserver& observe) {
  GpuKernel k{f, std::move(s), Stmt()};
  if (k.schedule.body.defined()) k.func.body = k.schedule.body;
  k.source = k.func.body;
  struct Pass {
    const char* name;
    Stmt (*run)(const Stmt&, const CudaSchedule&);
  };
  static const Pass passes[] = {{"map_elements", map_elements}, {"map_rows", map_rows}, {"cache_rows", cache_rows},
                                {"plain_folds", [](const Stmt& b, const CudaSchedule&) { return plain_folds(b); }}};
  int n = 0;
  dump("lowered", n++, k.func);
  for (const Pass& p : passes) {
    k.func.body = p.run(k.func.body, k.schedule);
    verify(k.func);
    if (observe) observe(p.name, k.func);
    dump(p.name, n++, k.func);
  }
  return k;
}

}  // namespace terrace::kernels::gpu
