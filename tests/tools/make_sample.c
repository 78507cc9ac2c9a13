/* make_sample — write the small sample container the README's quick start inspects and verifies.
 *
 * A 784-128-10 MLP classifier shape (MNIST style) with deterministic pseudo-random weights, stored as
 * F32 (first layer) and F16 (second layer), with the metadata a real conversion records. Until
 * `qmap convert` exists (issue 3) this is how the demo gets a container; it uses only the public
 * writer API. Usage: make_sample OUT.qmap
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qm_writer.h"

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [-bound, bound), like PyTorch's default Linear init */
static float uniform(uint64_t *s, float bound) { return ((float)(splitmix64(s) >> 40) / 16777216.0f * 2 - 1) * bound; }

/* binary32 → binary16, round to nearest even (values here are small and normal) */
static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, e = (x >> 23) & 0xFF, m = x & 0x7FFFFF;
    int32_t he = (int32_t)e - 127 + 15;
    if (e == 0 || he <= 0) return (uint16_t)sign; /* zero or underflow: these weights never get here */
    uint32_t hm = m >> 13, rest = m & 0x1FFF;
    if (rest > 0x1000 || (rest == 0x1000 && (hm & 1))) { hm++; if (hm == 0x400) { hm = 0; he++; } }
    return (uint16_t)(sign | ((uint32_t)he << 10) | hm);
}

static int check(qm_status s, const qm_error *e)
{
    if (s != QM_OK) fprintf(stderr, "make_sample: %s\n", e->message);
    return s != QM_OK;
}

int main(int argc, char **argv)
{
    if (argc != 2) { fprintf(stderr, "usage: make_sample OUT.qmap\n"); return 2; }
    enum { IN = 784, HID = 128, OUT = 10 };
    qm_writer *w;
    qm_error e;
    if (check(qm_writer_create(argv[1], NULL, &w, &e), &e)) return 1;
    const char *labels[OUT] = { "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine" };
    const char *acts[] = { "relu", "none" };
    uint32_t sizes[] = { IN, HID, OUT };
    int bad = check(qm_writer_meta_string(w, "general.architecture", "mlp", 3, &e), &e) ||
              check(qm_writer_meta_string(w, "general.name", "sample-mlp-784-128-10", 21, &e), &e) ||
              check(qm_writer_meta_string(w, "general.tool", "qmap make_sample 0.1.0", 22, &e), &e) ||
              check(qm_writer_meta_array(w, "mlp.layer_sizes", QM_META_U32, sizes, 3, &e), &e) ||
              check(qm_writer_meta_string_array(w, "mlp.activations", acts, NULL, 2, &e), &e) ||
              check(qm_writer_meta_string_array(w, "mlp.labels", labels, NULL, OUT, &e), &e) ||
              check(qm_writer_meta_f32(w, "mlp.input_scale", 1.0f / 255.0f, &e), &e);
    uint64_t d_w1[2] = { HID, IN }, d_b1[1] = { HID }, d_w2[2] = { OUT, HID }, d_b2[1] = { OUT };
    bad = bad || check(qm_writer_add_tensor(w, "layers.0.weight", QM_DTYPE_F32, 2, d_w1, &e), &e) ||
          check(qm_writer_add_tensor(w, "layers.0.bias", QM_DTYPE_F32, 1, d_b1, &e), &e) ||
          check(qm_writer_add_tensor(w, "layers.2.weight", QM_DTYPE_F16, 2, d_w2, &e), &e) ||
          check(qm_writer_add_tensor(w, "layers.2.bias", QM_DTYPE_F32, 1, d_b2, &e), &e);
    if (bad) { qm_writer_abort(w); return 1; }

    uint64_t seed = 20261122;
    float row[IN];
    for (int r = 0; r < HID && !bad; r++) { /* streamed a row at a time, as a converter would */
        for (int c = 0; c < IN; c++) row[c] = uniform(&seed, 1.0f / sqrtf((float)IN));
        bad = check(qm_writer_write(w, row, sizeof(float) * IN, &e), &e);
    }
    for (int r = 0; r < HID && !bad; r++) row[r] = uniform(&seed, 1.0f / sqrtf((float)IN));
    bad = bad || check(qm_writer_write(w, row, sizeof(float) * HID, &e), &e);
    uint16_t half[HID];
    for (int r = 0; r < OUT && !bad; r++) {
        for (int c = 0; c < HID; c++) half[c] = f32_to_f16(uniform(&seed, 1.0f / sqrtf((float)HID)));
        bad = check(qm_writer_write(w, half, sizeof half, &e), &e);
    }
    for (int r = 0; r < OUT && !bad; r++) row[r] = uniform(&seed, 1.0f / sqrtf((float)HID));
    bad = bad || check(qm_writer_write(w, row, sizeof(float) * OUT, &e), &e);
    if (bad) { qm_writer_abort(w); return 1; }
    if (check(qm_writer_finish(w, &e), &e)) return 1;
    printf("make_sample: wrote %s\n", argv[1]);
    return 0;
}
