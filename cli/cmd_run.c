/* qmap run — open a container and run it by model kind: a decoder LM generates (run_lm.c), a classifier
 * classifies rows (run_classify.c), an encoder-decoder translates (run_translate.c). Public API only. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "opts.h"
#include "qmap.h"
#include "run_classify.h"
#include "run_lm.h"
#include "run_translate.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct run_args {
    const char *prompt, *file, *tokens;
    const char *input, *labels, *output;   /* classifiers */
    long top;
    long beam, n_best, max_len;             /* seq2seq */
    float length_penalty;
    long n_predict, top_k, repeat_last_n, ctx, threads, batch;
    float temp, top_p, min_p, repeat_penalty;
    uint64_t seed;
    int kv, act;
    bool no_bos, verify, no_mmap, json, quiet, batch_invariant;
    bool allow_large;                       /* classifiers: a gzip IDX beyond the inflation bound */
} run_args;

/* The option table, the help text and the checks on what was given. Returns 0 to run argv[*first] (the
 * model), -1 after --help, 2 on a usage error. */
static int parse_run_args(int argc, char **argv, run_args *a, int *first)
{
    qmap_sampler_params sd;
    qmap_sampler_params_default(&sd);
    *a = (run_args){
        .n_predict = 128, .top_k = sd.top_k, .repeat_last_n = sd.repeat_last_n, .ctx = 0, .threads = 0,
        .batch = 0, .top = 1, .beam = 1, .n_best = 1, .max_len = 0, .length_penalty = 1.0f, .temp = sd.temp, .top_p = sd.top_p, .min_p = sd.min_p, .repeat_penalty = sd.repeat_penalty,
        .seed = sd.seed, .kv = 0, .act = 0,
    };
    const cli_opt opts[] = {
        { "prompt", 'p', CLI_STRING, &a->prompt, "TEXT", 0, 0, NULL, "prompt text (encoded with the model's tokenizer)", true },
        { "file", 'f', CLI_STRING, &a->file, "FILE", 0, 0, NULL, "read the prompt from FILE (" CLI_TEXT_MAX_HELP ")", true },
        { "tokens", 0, CLI_STRING, &a->tokens, "IDS", 0, 0, NULL, "the prompt as token ids, \"1 2 3\" (no tokenizer needed)", true },
        { "n-predict", 'n', CLI_INT, &a->n_predict, "N", 0, 1 << 24, NULL, "tokens to generate", false },
        { "temp", 0, CLI_FLOAT, &a->temp, "T", 0, 100, NULL, "temperature; 0 is greedy", false },
        { "top-k", 0, CLI_INT, &a->top_k, "K", 0, 1 << 24, NULL, "keep the K most likely tokens; 0 = all", false },
        { "top-p", 0, CLI_FLOAT, &a->top_p, "P", 0, 1, NULL, "keep the smallest set with probability >= P; 1 = off", false },
        { "min-p", 0, CLI_FLOAT, &a->min_p, "P", 0, 1, NULL, "drop tokens below P x the most likely one's probability", false },
        { "repeat-penalty", 0, CLI_FLOAT, &a->repeat_penalty, "R", 0.01, 100, NULL, "penalise the last --repeat-last-n tokens; 1 = off", false },
        { "repeat-last-n", 0, CLI_INT, &a->repeat_last_n, "N", 0, 1 << 20, NULL, "tokens the repeat penalty looks back on", false },
        { "seed", 's', CLI_UINT64, &a->seed, "SEED", 0, 9007199254740992.0, NULL, "random seed: the same seed prints the same text", false },
        { "ctx-size", 'c', CLI_INT, &a->ctx, "N", 0, 1 << 24, NULL, "context length in tokens; 0 = the model's, at most 4096 (llama: more is allowed, with a warning)", false },
        { "threads", 't', CLI_INT, &a->threads, "N", 0, 1024, NULL, "threads; 0 = all cores (or OMP_NUM_THREADS)", false },
        { "batch-size", 'b', CLI_INT, &a->batch, "N", 0, 1 << 20, NULL,
          "prompt tokens evaluated per batch (the GEMM path; 0 = 512), classifier rows per batch (0 = 256), or "
          "seq2seq lines translated per call (0 = 64)", false },
        { "kv", 0, CLI_CHOICE, &a->kv, "TYPE", 0, 0, cli_kv_choices, "KV cache element type", false },
        { "act", 0, CLI_CHOICE, &a->act, "MODE", 0, 0, cli_act_choices, "Q8_ROW activations: auto (an LM's products after a norm or attention in one int8 term, prompt and decode, the rest at float accuracy), precise (float accuracy everywhere), int8 (one term everywhere: fastest), int8x2 (two terms everywhere), f32 (weights widened)", false },
        { "batch-invariant", 0, CLI_FLAG, &a->batch_invariant, NULL, 0, 0, NULL, "F32/F16 weights or --act f32: the bits qmap serve gives (a Q8_ROW model has them anyway); slower decode", true },
        { "no-bos", 0, CLI_FLAG, &a->no_bos, NULL, 0, 0, NULL, "do not add the tokenizer's BOS/EOS tokens to the prompt", true },
        { "verify", 0, CLI_FLAG, &a->verify, NULL, 0, 0, NULL, "check every tensor's checksum before running", true },
        { "no-mmap", 0, CLI_FLAG, &a->no_mmap, NULL, 0, 0, NULL, "read the weights into memory instead of mapping the file (for comparison: RAM as large as the file, not shared)", true },
        { "json", 0, CLI_FLAG, &a->json, NULL, 0, 0, NULL, "print one JSON object (text, ids, figures) instead of streaming", true },
        { "quiet", 'q', CLI_FLAG, &a->quiet, NULL, 0, 0, NULL, "no figures on stderr", true },
        { "input", 0, CLI_STRING, &a->input, "X.npy", 0, 0, NULL,
          "classifier (mlp): the rows to classify: an .npy [n, features...] (float32, float64, or integer pixels) "
          "or an IDX file, plain or .gz (MNIST's format); integer pixels are mapped as the model was trained", true },
        { "labels", 0, CLI_STRING, &a->labels, "Y.npy", 0, 0, NULL,
          "classifier: the true classes (integer .npy or IDX [n]): accuracy and a confusion matrix", true },
        { "output", 'o', CLI_STRING, &a->output, "OUT.npy", 0, 0, NULL,
          "classifier: write the model's outputs as a float32 .npy [n, classes] (replaced by rename; an existing OUT.npy that is not a regular file is refused)", true },
        { "allow-large", 0, CLI_FLAG, &a->allow_large, NULL, 0, 0, NULL,
          "classifier: read a gzip IDX --input/--labels that inflates beyond 32x its size or 64 MiB, whichever "
          "is more (refused by default, as a gzip bomb would)", true },
        { "top", 0, CLI_INT, &a->top, "K", 1, 1 << 20, NULL, "classifier: show the K best classes of each row", false },
        { "beam", 0, CLI_INT, &a->beam, "K", 1, 256, NULL, "seq2seq: beam size (1 = greedy)", false },
        { "n-best", 0, CLI_INT, &a->n_best, "N", 1, 256, NULL, "seq2seq: print the N best hypotheses with their scores", false },
        { "length-penalty", 0, CLI_FLOAT, &a->length_penalty, "A", 0, 100, NULL,
          "seq2seq: rank hypotheses by log P / length^A (CTranslate2's length_penalty)", false },
        { "max-len", 0, CLI_INT, &a->max_len, "N", 0, 1 << 16, NULL,
          "seq2seq: target tokens at most; 0 = the model's limit", false },
    };
    const cli_command cmd = {
        .name = "run",
        .usage = "qmap run MODEL.qmap (-p TEXT | -f FILE | --tokens IDS | --input X.npy) [options]",
        .description =
            "Generate text with a decoder language model (gpt2, gpt_neo, llama and its variants, gemma2) read in place from\n"
            "the container: F32, F16 and Q8_ROW weights are used where they lie, nothing is dequantized or copied.\n"
            "The prompt runs in batches through the matrix-matrix kernels, then one token at a time. Text streams to\n"
            "stdout as it is generated; generation stops at the end-of-sequence token, after -n tokens, at the\n"
            "context limit, or on Ctrl-C. The figures (load time, prompt and generation tok/s, peak RSS, resident\n"
            "part of the mapping and how much of it is in 2 MiB pages, which stream faster) go to stderr.\n"
            "Sampling follows llama.cpp's defaults and order (penalty, top-k, top-p, min-p, temperature).\n"
            "\n"
            "A classifier (mlp) classifies the rows of --input in batches of -b rows through the same kernels\n"
            "and prints the predicted class per row (a count per class when there are more than 20), the\n"
            "accuracy and a confusion matrix when --labels are given, and rows/s on stderr. For example, with\n"
            "Debian's dataset-fashion-mnist:\n"
            "  qmap run fashion.qmap --input /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz \\\n"
            "           --labels /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz\n"
            "\n"
            "An encoder-decoder (seq2seq) translates -p TEXT, each line of -f FILE (-b lines encoded together),\n"
            "or --tokens IDS: the source encoded once, then greedy or beam search (--beam K, --n-best N,\n"
            "--length-penalty A, --max-len N) with the beams decoded as one batch; sentences/s on stderr.\n",
        .opts = opts,
        .n_opts = sizeof opts / sizeof opts[0],
        .epilog = "exit status: 0 done, 1 bad model or input (or the model file was truncated or overwritten in place while it ran:\n"
                  "replace model files with rename, as qmap's writers do), 2 usage error\n",
    };
    int rc = cli_parse(&cmd, argc, argv, first);
    if (rc) return rc == 1 ? -1 : 2;
    if (*first != argc - 1) {
        fprintf(stderr, "qmap run: give exactly one MODEL.qmap\nusage: %s\n", cmd.usage);
        return 2;
    }
    if (!a->input && !!a->prompt + !!a->file + !!a->tokens != 1) {
        fprintf(stderr, "qmap run: give exactly one of -p TEXT, -f FILE, --tokens IDS\nusage: %s\n", cmd.usage);
        return 2;
    }
    return 0;
}

/* Run the model by its kind; flags meant for another kind are ignored. */
static int dispatch(qmap_model *m, const char *path, const run_args *a, double load_s)
{
    qmap_model_info in;
    qmap_model_get_info(m, &in);
    if (in.kind == QMAP_KIND_CLASSIFIER || a->input) {
        if (in.kind != QMAP_KIND_CLASSIFIER || !a->input) {
            fprintf(stderr, "qmap run: %s: %s\n", path, a->input ? "--input is for classifiers (mlp); this is not one"
                                                                     : "a classifier (mlp) needs --input X.npy");
            return 1;
        }
        classify_args ca = { a->input, a->labels, a->output, a->batch, a->threads, a->top,
                             (qmap_act_mode)a->act, a->json, a->quiet, a->allow_large };
        return run_classifier(m, &ca);
    }
    if (in.kind == QMAP_KIND_SEQ2SEQ) {
        translate_args ta = { a->prompt, a->file, a->tokens, a->beam, a->n_best, a->max_len, a->batch, a->threads,
                              a->length_penalty, (qmap_act_mode)a->act, (qmap_kv_type)a->kv, a->json, a->quiet };
        return run_translate(m, &ta);
    }
    if (in.kind != QMAP_KIND_LM) {
        fprintf(stderr, "qmap run: %s: %s%s%s is not a language model; qmap run generates with gpt2, gpt_neo and llama "
                "models\n", path, in.kind == QMAP_KIND_NONE ? "a plain tensor store (--arch " : "a ", in.arch,
                in.kind == QMAP_KIND_NONE ? ")" : " container");
        return 1;
    }
    lm_args la = { a->prompt, a->file, a->tokens, a->n_predict, a->top_k, a->repeat_last_n, a->ctx, a->threads,
                   a->batch ? a->batch : 512, a->temp, a->top_p, a->min_p, a->repeat_penalty, a->seed, a->kv, a->act,
                   a->no_bos, a->json, a->quiet, a->batch_invariant, load_s };
    return run_lm(m, &la);
}

int cmd_run(int argc, char **argv)
{
    return cmd_run_shard(argc, argv, NULL);
}

int cmd_run_shard(int argc, char **argv, const qmap_shard *shard)
{
    run_args a;
    int first;
    int rc = parse_run_args(argc, argv, &a, &first);
    if (rc) return rc < 0 ? 0 : rc;
    const char *path = argv[first];

    qmap_model_params mp;
    qmap_model_params_default(&mp);
    mp.verify = a.verify;
    mp.no_mmap = a.no_mmap;
    mp.large_pages = !shard; /* a decode streams every weight per token (a rank of qmap-mpi: only its part) */
    mp.shard = shard;
    qmap_error err;
    qmap_model *m = NULL;
    double t0 = now_s();
    cli_exit_on_model_change("qmap run", path);
    if (qmap_model_open(path, &mp, &m, &err) != QMAP_OK) {
        fprintf(stderr, "qmap run: %s\n", err.message);
        return 1;
    }
    int status = dispatch(m, path, &a, now_s() - t0);
    qmap_model_close(m);
    return status;
}
