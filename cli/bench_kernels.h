/* bench_kernels.h — `qmap bench kernels` (cli/bench_kernels.c): the matmul kernels against this machine's
 * limits, measured in the same run. */
#ifndef QM_BENCH_KERNELS_H
#define QM_BENCH_KERNELS_H

/* `qmap bench kernels …` (argv[0] is "bench", argv[1] "kernels"): the exit code (0, 1 failure, 2 usage). */
int bench_kernels(int argc, char **argv);

#endif /* QM_BENCH_KERNELS_H */
