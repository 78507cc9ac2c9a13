/* qq_kernels_avx512.c — the quantize row kernels, compiled with per-file avx512 flags (Makefile ISA_FLAGS_qq_kernels_avx512). */
#define QQ_VARIANT avx512
#define QQ_VARIANT_NAME "avx512"
#include "qq_kernels_impl.h"
