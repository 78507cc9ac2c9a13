/* qq_kernels_avx2.c — the quantize row kernels, compiled with per-file avx2 flags (Makefile ISA_FLAGS_qq_kernels_avx2). */
#define QQ_VARIANT avx2
#define QQ_VARIANT_NAME "avx2"
#include "qq_kernels_impl.h"
