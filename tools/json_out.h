// The CLI's JSON files, through nlohmann-json (Debian: nlohmann-json3-dev): objects keep the order
// their keys were set in.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace terrace::cli {

using Json = nlohmann::ordered_json;

// `j` as one line of text: doubles in the shortest form that reads back exactly, NaN and
// infinities as null, bytes that are not UTF-8 replaced (U+FFFD) rather than thrown on.
std::string json_text(const Json& j);
// Writes json_text(j) and a newline to `path`; IoError naming the path on failure.
void write_json_file(const std::string& path, const Json& j);

}  // namespace terrace::cli
