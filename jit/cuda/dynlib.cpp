// jit/cuda/dynlib.h: dlopen through a search order, every failure kept for the message.
#include "jit/cuda/dynlib.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>

namespace terrace::jit {

namespace {

// `tried` gathers the first failure in full (dlerror's message) and the other names.
void* try_open(const std::string& name, std::string* tried) {
  dlerror();
  void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    if (tried->empty()) *tried = e ? e : name + ": not loadable";
    else *tried += (tried->find(" (also tried ") == std::string::npos ? " (also tried " : ", ") + name;
  }
  return h;
}

std::string closed(std::string tried) {
  if (tried.find(" (also tried ") != std::string::npos) tried += ")";
  return tried;
}

}  // namespace

void* open_library(const LibrarySearch& search, std::string* path, std::string* why) {
  std::string tried;
  auto found = [&](void* h, const std::string& name) {
    if (path) *path = name;
    return h;
  };
  if (!search.env_var.empty()) {
    if (const char* v = std::getenv(search.env_var.c_str()); v && *v) {
      std::string over = v;
      std::vector<std::string> candidates;
      std::error_code ec;
      if (std::filesystem::is_directory(over, ec)) {
        for (const auto& so : search.sonames) candidates.push_back(over + "/" + so);
      } else {
        candidates.push_back(over);
      }
      for (const auto& c : candidates)
        if (void* h = try_open(c, &tried)) return found(h, c);
      if (why) *why = "$" + search.env_var + "=" + over + " does not load: " + closed(tried);
      return nullptr;
    }
  }
  for (const auto& so : search.sonames)
    if (void* h = try_open(so, &tried)) return found(h, so);
  for (const auto& dir : search.dirs)
    for (const auto& so : search.sonames) {
      std::string c = dir + "/" + so;
      if (void* h = try_open(c, &tried)) return found(h, c);
    }
  if (why) *why = closed(tried);
  return nullptr;
}

void* library_symbol(void* handle, const char* name) { return handle ? dlsym(handle, name) : nullptr; }

}  // namespace terrace::jit
