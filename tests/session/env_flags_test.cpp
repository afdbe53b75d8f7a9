// The on/off environment settings: every spelling of on and off, and a clear refusal of anything
// else when a session is created ('off' used to leave TERRACE_WINOGRAD and TERRACE_PACKED_GEMM on).
#include <gtest/gtest.h>
#include <stdlib.h>

#include "interp/env_flag.h"
#include "interp/graph_builder.h"
#include "tiers/session.h"

namespace terrace {
namespace {

struct EnvSet {
  const char* var;
  EnvSet(const char* v, const char* value) : var(v) { ::setenv(v, value, 1); }
  ~EnvSet() { ::unsetenv(var); }
};

TEST(EnvFlags, every_spelling_of_on_and_off_is_read_and_unset_or_empty_is_the_default) {
  for (const char* on : {"1", "on", "ON", "true", "True", "yes"}) {
    EnvSet e("TERRACE_WINOGRAD", on);
    EXPECT_TRUE(env_flag("TERRACE_WINOGRAD", false)) << on;
  }
  for (const char* off : {"0", "off", "Off", "false", "FALSE", "no"}) {
    EnvSet e("TERRACE_WINOGRAD", off);
    EXPECT_FALSE(env_flag("TERRACE_WINOGRAD", true)) << off;
  }
  EXPECT_TRUE(env_flag("TERRACE_WINOGRAD", true));
  EnvSet e("TERRACE_WINOGRAD", "");
  EXPECT_FALSE(env_flag("TERRACE_WINOGRAD", false));
}

TEST(EnvFlags, anything_else_fails_the_sessions_creation_naming_the_variable) {
  GraphBuilder b;
  b.output(b.op("Relu", {b.input("x", DType::Float32, {2})}));
  auto graph = b.build();
  for (const char* var : {"TERRACE_STRICT", "TERRACE_PACKED_GEMM", "TERRACE_WINOGRAD", "TERRACE_CUDNN_TUNE",
                          "TERRACE_GEMM_TUNE"}) {
    EnvSet e(var, "maybe");
    try {
      Session::from_graph(graph, Options::from_env());
      ADD_FAILURE() << var << "=maybe was accepted";
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), ErrorCode::InvalidArgument) << err.what();
      EXPECT_NE(err.message().find(var), std::string::npos) << err.what();
    }
  }
}

}  // namespace
}  // namespace terrace
