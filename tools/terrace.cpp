// terrace: the command-line tool (run, conformance, explain, validate, bench).
#include <cstdio>

int main(int argc, char** argv) {
  std::fprintf(stderr, "usage: terrace run|conformance|explain MODEL ...\n");
  return 2;
}
