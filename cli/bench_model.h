/* bench_model.h — `qmap bench MODEL.qmap…` (cli/bench_model.c): pp/tg speed of decoder LMs beside the
 * limits measured in the same run. argv[0] is "bench"; returns the exit code (0, 1 failure, 2 usage). */
#ifndef QM_BENCH_MODEL_H
#define QM_BENCH_MODEL_H

int bench_model(int argc, char **argv);

#endif
