/* `neargnn version`: the library version and what this build can do. */
#include "cli.h"

#define DEVICE_DESC_CAP 2048

int cmd_version(int argc, char **argv) {
  cli_spec spec = {
      .command = "version",
      .synopsis = "",
      .about = "Shows the library version and the build's features: whether the CUDA backend is "
               "built in and, when it is, the GPUs it sees.",
      .example = "neargnn version",
  };
  int rc = cli_parse(&spec, argc, argv);
  if (rc != CLI_CONTINUE)
    return rc;
  printf("neargnn %s\n", ng_version());
  if (ng_has_cuda()) {
    int count = 0;
    char desc[DEVICE_DESC_CAP] = "";
    ng_status st = ng_cuda_devices(&count, desc, sizeof desc);
    if (st != NG_OK) {
      printf("cuda: on (built with the CUDA backend)\n");
      fflush(stdout);
      return cli_runtime_error(st);
    }
    printf("cuda: on, %d visible device%s%s%s\n", count, count == 1 ? "" : "s", count ? ": " : "",
           desc);
  } else {
    printf("cuda: off (built without the CUDA backend; configure with -DNG_CUDA=ON to add it)\n");
  }
  printf("mpi: %s\n", ng_has_mpi() ? "on (ranks under mpirun; docs/distributed.md)"
                                   : "off (the built-in launcher, --ranks N, runs ranks on one "
                                     "host; install Open MPI and rebuild for mpirun)");
#if defined(__clang__)
  printf("compiler: %s\n", __VERSION__);
#elif defined(__GNUC__)
  printf("compiler: gcc %s\n", __VERSION__);
#endif
  return CLI_EXIT_OK;
}
