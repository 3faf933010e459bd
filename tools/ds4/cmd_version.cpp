// cmd_version.cpp — `ds4 version`: prints the ds4cpp version and build options.
#include <cstdio>

const char* ds4_cmd_version_help() { return "print version and build options"; }

int ds4_cmd_version(int argc, char** argv) {
  (void)argc;
  (void)argv;
#ifdef DS4_HAVE_CUDA
  std::printf("ds4cpp 0.1.0 (cuda)\n");
#else
  std::printf("ds4cpp 0.1.0 (cpu)\n");
#endif
  return 0;
}
