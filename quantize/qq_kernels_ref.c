/* qq_kernels_ref.c — the quantize row kernels, portable reference (no ISA flags). */
#define QQ_VARIANT ref
#define QQ_VARIANT_NAME "generic"
#include "qq_kernels_impl.h"
