/* qq_kernels_impl.h — the body of the quantize row kernels, included once per variant file with
 * QQ_VARIANT set (ref, avx2, avx512). Not a header of its own: see qq_kernels.h for the contract. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "qm_q8.h"
#include "qq_kernels.h"

#define QQ_CAT2(a, b) a##b
#define QQ_CAT(a, b) QQ_CAT2(a, b)
#define QQ_NAME(n) QQ_CAT(n, QQ_VARIANT)

/* Reductions run in QQ_LANES independent lanes combined in a fixed order: the compiler keeps each lane
 * in a vector register (a single running max or sum is a serial chain it may not reorder), and the
 * result does not depend on the vector width. */
#define QQ_LANES 16

static bool QQ_NAME(q8row_)(const float *w, uint64_t cols, int8_t *q, float *scale, int32_t *row_sum)
{
    float lane_max[QQ_LANES] = { 0 };
    int lane_ok[QQ_LANES];
    for (int l = 0; l < QQ_LANES; l++) lane_ok[l] = 1;
    uint64_t j = 0;
    for (; j + QQ_LANES <= cols; j += QQ_LANES)
        for (int l = 0; l < QQ_LANES; l++) {
            float a = fabsf(w[j + l]);
            lane_ok[l] &= a <= FLT_MAX;  /* false for NaN and ±Inf */
            lane_max[l] = a > lane_max[l] ? a : lane_max[l];
        }
    for (; j < cols; j++) {
        float a = fabsf(w[j]);
        lane_ok[0] &= a <= FLT_MAX;
        lane_max[0] = a > lane_max[0] ? a : lane_max[0];
    }
    float amax = 0.0f;                   /* max is exact: the order of combination does not matter */
    int finite = 1;
    for (int l = 0; l < QQ_LANES; l++) {
        finite &= lane_ok[l];
        amax = lane_max[l] > amax ? lane_max[l] : amax;
    }
    if (!finite) return false;
    float s = qm_q8_scale(amax);         /* spec 6.1 step 2 */
    if (s == 0.0f) {                     /* amax is 0, or so small that amax/127 underflows: +0, all q 0 */
        *scale = 0.0f;
        memset(q, 0, (size_t)cols);
        *row_sum = 0;
        return true;
    }
    *scale = s;
    int32_t sum = 0;
    for (j = 0; j < cols; j++) {
        int32_t v = (int32_t)qm_q8_round(w[j] / s);   /* step 3 */
        q[j] = (int8_t)v;
        sum += v;
    }
    *row_sum = sum;
    return true;
}

/* Branch-free so that it vectorises: both the normal and the subnormal encoding are computed and one is
 * selected. Normal: re-bias the exponent (127 - 15) and round the 13 dropped mantissa bits to nearest
 * even by adding 0xfff plus the lowest kept bit. Subnormal (|w| < 2^-14): adding 0.5 puts |w| in a binade
 * whose ulp is 2^-24, the half subnormal step, so the FPU does the nearest-even rounding and the sum's low
 * mantissa bits are the half's. */
static int QQ_NAME(f16row_)(const float *w, uint64_t cols, uint16_t *h, float *back)
{
    int lane_nonfinite[QQ_LANES] = { 0 }, lane_over[QQ_LANES] = { 0 };
    for (uint64_t j = 0; j < cols; j += QQ_LANES) {
        int n = cols - j < QQ_LANES ? (int)(cols - j) : QQ_LANES;
        for (int l = 0; l < n; l++) {
            uint32_t u;
            memcpy(&u, &w[j + l], 4);
            uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
            /* selections are masks, not branches, so the loop vectorises */
            int nonfinite = a >= 0x7f800000u;
            int over = (a >= 0x477ff000u) & (a < 0x7f800000u);   /* 65520: the tie that rounds to inf */
            uint32_t hn = (a - 0x38000000u + 0x0fffu + ((a >> 13) & 1u)) >> 13;
            float y = fabsf(w[j + l]) + 0.5f;
            uint32_t uy;
            memcpy(&uy, &y, 4);
            uint32_t hs = uy - 0x3f000000u;
            uint32_t sub = 0u - (uint32_t)(a < 0x38800000u);
            uint32_t hv = ((hs & sub) | (hn & ~sub)) & 0x7fffu;
            h[j + l] = (uint16_t)(sign | hv);
            float bs = (float)(hv & 0x3ffu) * 0x1p-24f;     /* subnormal half: m · 2^-24, exact */
            uint32_t bs_bits;
            memcpy(&bs_bits, &bs, 4);
            uint32_t norm = 0u - (uint32_t)((hv >> 10) != 0);
            uint32_t bb = ((((hv << 13) + 0x38000000u) & norm) | (bs_bits & ~norm)) | (sign << 16);
            memcpy(&back[j + l], &bb, 4);
            lane_nonfinite[l] |= nonfinite;
            lane_over[l] |= over;
        }
    }
    int nonfinite = 0, over = 0;
    for (int l = 0; l < QQ_LANES; l++) {
        nonfinite |= lane_nonfinite[l];
        over |= lane_over[l];
    }
    return nonfinite ? 1 : over ? 2 : 0;  /* NaN/Inf is reported first: it is the worse input */
}

static void QQ_NAME(stats_)(const float *w, const float *back, const int8_t *q, float scale, uint64_t cols,
                            bool outliers, qq_row_stats *out)
{
    double lse[QQ_LANES] = { 0 }, lsw[QQ_LANES] = { 0 }, lme[QQ_LANES] = { 0 }, lmax[QQ_LANES] = { 0 };
    for (uint64_t j = 0; j < cols; j += QQ_LANES) {
        int n = cols - j < QQ_LANES ? (int)(cols - j) : QQ_LANES;
        for (int l = 0; l < n; l++) {
            float b = back ? back[j + l] : (float)q[j + l] * scale;
            double d = (double)w[j + l] - (double)b, x = (double)w[j + l];
            lse[l] += d * d;
            lsw[l] += x * x;
            lme[l] = fabs(d) > lme[l] ? fabs(d) : lme[l];
            lmax[l] = fabs(x) > lmax[l] ? fabs(x) : lmax[l];
        }
    }
    double se = 0, sw = 0, me = 0, amax = 0;
    for (int l = 0; l < QQ_LANES; l++) {
        se += lse[l];
        sw += lsw[l];
        me = lme[l] > me ? lme[l] : me;
        amax = lmax[l] > amax ? lmax[l] : amax;
    }
    out->sq_err = se;
    out->sq_w = sw;
    out->max_err = me;
    out->outlier = outliers && sw > 0 && amax > 8.0 * sqrt(sw / (double)cols);
}

const qq_kernels QQ_NAME(qq_kernels_) = { QQ_VARIANT_NAME, QQ_NAME(q8row_), QQ_NAME(f16row_), QQ_NAME(stats_) };
