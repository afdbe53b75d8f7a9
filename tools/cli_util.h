// Helpers shared by the terrace subcommands: argument parsing, input generation, file output.
#pragma once
#include <string>

#include "tiers/session.h"
#include "tools/commands.h"

namespace terrace::cli {

// Parses a non-negative integer option value; UsageError naming the option otherwise.
int64_t parse_count(const std::string& option, const std::string& text);
// "NAME=VALUE" -> {NAME, VALUE}; UsageError otherwise.
std::pair<std::string, std::string> split_assignment(const std::string& option, const std::string& text);
// The value after args[i] (advancing i); UsageError if there is none.
const std::string& next_value(const Args& args, size_t& i);
// Parses --tier's value.
Tier parse_tier(const std::string& text);

// Deterministic random inputs for every graph input: unknown dims become 1 unless given in
// `dims` ("name=value" per symbolic dim name); floats uniform in [-1, 1], integers in [0, 10).
NamedTensors random_inputs(const Graph& graph, uint64_t seed,
                           const std::vector<std::pair<std::string, int64_t>>& dims = {});

void write_text_file(const std::string& path, const std::string& text);

}  // namespace terrace::cli
