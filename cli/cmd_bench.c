/* qmap bench — the command's entry: `qmap bench kernels …` (bench_kernels.c: the matmul kernels against this
 * machine's limits) or `qmap bench MODEL.qmap …` (bench_model.c: pp/tg of whole models beside the speed of
 * light). The measuring they share is bench_measure.c. */
#include <stdio.h>
#include <string.h>

#include "bench_kernels.h"
#include "bench_model.h"
#include "cli.h"

static void bench_help(FILE *fp)
{
    fprintf(fp,
            "usage: qmap bench MODEL.qmap [MODEL2.qmap ...] [options]\n"
            "       qmap bench kernels [options]\n"
            "\n"
            "qmap bench MODEL: prompt (pp) and generation (tg) tokens/s of decoder LMs beside the speed of light\n"
            "measured in the same run, as llama-bench prints them ('qmap bench MODEL.qmap --help').\n"
            "qmap bench kernels: the matmul kernels against this machine's read bandwidth and instruction peak,\n"
            "measured in the same run ('qmap bench kernels --help').\n"
            "\n"
            "exit status: 0 done, 1 a model or a measurement failed, 2 usage error\n");
}

int cmd_bench(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "qmap bench: name a benchmark: kernels, or one or more MODEL.qmap files\n\n");
        bench_help(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        bench_help(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "kernels")) return bench_kernels(argc, argv);
    return bench_model(argc, argv);
}
