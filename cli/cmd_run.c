/* qmap run — generate text with a decoder language model, through the public API (include/qmap.h) only. */
#define QMAP_EXPERIMENTAL /* the resident and large-page gauges in the summary */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cli.h"
#include "json_out.h"
#include "opts.h"
#include "qmap.h"
#include "run_classify.h"
#include "run_translate.h"

/* Set by SIGINT: generation stops after the current token and the figures are still printed. The only
 * global of the command; the library has none. */
static volatile sig_atomic_t g_interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    g_interrupted = 1;
}

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


/* "1 2 3" or "1,2,3" -> ids. Returns the count, or -1 with a message. */
static long parse_ids(const char *s, int32_t *ids, size_t cap, uint32_t vocab)
{
    size_t n = 0;
    while (*s) {
        while (*s == ' ' || *s == ',' || *s == '\t' || *s == '\n') s++;
        if (!*s) break;
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno) {
            fprintf(stderr, "qmap run: --tokens: '%.20s' is not a token id\n", s);
            return -1;
        }
        if (v < 0 || (uint64_t)v >= vocab) {
            fprintf(stderr, "qmap run: --tokens: id %ld is outside the vocabulary of %u\n", v, vocab);
            return -1;
        }
        if (n == cap) {
            fprintf(stderr, "qmap run: --tokens: more than %zu ids\n", cap);
            return -1;
        }
        ids[n++] = (int32_t)v;
        s = end;
    }
    return (long)n;
}

typedef struct run_stats {
    double load_s, prompt_s, gen_s;
    size_t n_prompt, n_gen;
    const char *stop;   /* "eos", "n_predict", "context", "interrupt" */
} run_stats;

static void print_stats(const run_stats *st, const qmap_model *m, FILE *fp)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    qmap_model_info in;
    qmap_model_get_info(m, &in);
    char a[32], b[32];
    fprintf(fp, "\nqmap run: stopped: %s\n", st->stop);
    fprintf(fp, "  load      %8.1f ms\n", st->load_s * 1e3);
    fprintf(fp, "  prompt    %8zu tokens  %8.1f ms  %8.1f tok/s\n", st->n_prompt, st->prompt_s * 1e3,
            st->prompt_s > 0 ? (double)st->n_prompt / st->prompt_s : 0.0);
    fprintf(fp, "  generate  %8zu tokens  %8.1f ms  %8.2f tok/s\n", st->n_gen, st->gen_s * 1e3,
            st->gen_s > 0 ? (double)st->n_gen / st->gen_s : 0.0);
    fprintf(fp, "  memory    peak RSS %s, mapping resident %s of %s",
            cli_human_bytes((uint64_t)ru.ru_maxrss * 1024, a, sizeof a),
            cli_human_bytes(qmap_model_resident_bytes(m), b, sizeof b), cli_human_bytes(in.file_size, (char[32]){ 0 }, 32));
    const uint64_t large = qmap_model_large_page_bytes(m);
    if (large != UINT64_MAX) fprintf(fp, ", %s in 2 MiB pages", cli_human_bytes(large, a, sizeof a));
    fputc('\n', fp);
}

static void print_json(const run_stats *st, const qmap_model *m, const char *text, size_t text_len,
                       const int32_t *prompt, const int32_t *gen, int kv, int act)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    json_out j = { .fp = stdout };
    json_begin_object(&j, NULL);
    json_string(&j, "text", text ? text : "", text ? text_len : 0);
    json_begin_array(&j, "prompt_ids");
    for (size_t i = 0; i < st->n_prompt; i++) json_i64(&j, NULL, prompt[i]);
    json_end_array(&j);
    json_begin_array(&j, "ids");
    for (size_t i = 0; i < st->n_gen; i++) json_i64(&j, NULL, gen[i]);
    json_end_array(&j);
    json_cstring(&j, "stop", st->stop);
    json_f64(&j, "load_ms", st->load_s * 1e3);
    json_u64(&j, "prompt_tokens", st->n_prompt);
    json_f64(&j, "prompt_tok_per_s", st->prompt_s > 0 ? (double)st->n_prompt / st->prompt_s : 0.0);
    json_u64(&j, "generated_tokens", st->n_gen);
    json_f64(&j, "gen_tok_per_s", st->gen_s > 0 ? (double)st->n_gen / st->gen_s : 0.0);
    json_u64(&j, "peak_rss_bytes", (uint64_t)ru.ru_maxrss * 1024);
    json_u64(&j, "mapping_resident_bytes", qmap_model_resident_bytes(m));
    const uint64_t large = qmap_model_large_page_bytes(m);
    if (large != UINT64_MAX) json_u64(&j, "mapping_2mib_bytes", large);
    else json_null(&j, "mapping_2mib_bytes");
    json_cstring(&j, "kv", cli_kv_choices[kv]);
    json_cstring(&j, "act", cli_act_choices[act]);
    json_end_object(&j);
    fputc('\n', stdout);
}

/* Append to a growing text buffer (for --json); false on out of memory. */
static bool text_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t nc = (*cap ? *cap : 4096);
        while (nc < *len + n + 1) nc *= 2;
        char *nb = realloc(*buf, nc);
        if (!nb) return false;
        *buf = nb;
        *cap = nc;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return true;
}

int cmd_run(int argc, char **argv)
{
    qmap_sampler_params sd;
    qmap_sampler_params_default(&sd);
    run_args a = {
        .n_predict = 128, .top_k = sd.top_k, .repeat_last_n = sd.repeat_last_n, .ctx = 0, .threads = 0,
        .batch = 0, .top = 1, .beam = 1, .n_best = 1, .max_len = 0, .length_penalty = 1.0f, .temp = sd.temp, .top_p = sd.top_p, .min_p = sd.min_p, .repeat_penalty = sd.repeat_penalty,
        .seed = sd.seed, .kv = 0, .act = 0,
    };
    const cli_opt opts[] = {
        { "prompt", 'p', CLI_STRING, &a.prompt, "TEXT", 0, 0, NULL, "prompt text (encoded with the model's tokenizer)", true },
        { "file", 'f', CLI_STRING, &a.file, "FILE", 0, 0, NULL, "read the prompt from FILE (" CLI_TEXT_MAX_HELP ")", true },
        { "tokens", 0, CLI_STRING, &a.tokens, "IDS", 0, 0, NULL, "the prompt as token ids, \"1 2 3\" (no tokenizer needed)", true },
        { "n-predict", 'n', CLI_INT, &a.n_predict, "N", 0, 1 << 24, NULL, "tokens to generate", false },
        { "temp", 0, CLI_FLOAT, &a.temp, "T", 0, 100, NULL, "temperature; 0 is greedy", false },
        { "top-k", 0, CLI_INT, &a.top_k, "K", 0, 1 << 24, NULL, "keep the K most likely tokens; 0 = all", false },
        { "top-p", 0, CLI_FLOAT, &a.top_p, "P", 0, 1, NULL, "keep the smallest set with probability >= P; 1 = off", false },
        { "min-p", 0, CLI_FLOAT, &a.min_p, "P", 0, 1, NULL, "drop tokens below P x the most likely one's probability", false },
        { "repeat-penalty", 0, CLI_FLOAT, &a.repeat_penalty, "R", 0.01, 100, NULL, "penalise the last --repeat-last-n tokens; 1 = off", false },
        { "repeat-last-n", 0, CLI_INT, &a.repeat_last_n, "N", 0, 1 << 20, NULL, "tokens the repeat penalty looks back on", false },
        { "seed", 's', CLI_UINT64, &a.seed, "SEED", 0, 9007199254740992.0, NULL, "random seed: the same seed prints the same text", false },
        { "ctx-size", 'c', CLI_INT, &a.ctx, "N", 0, 1 << 24, NULL, "context length in tokens; 0 = the model's, at most 4096 (llama: more is allowed, with a warning)", false },
        { "threads", 't', CLI_INT, &a.threads, "N", 0, 1024, NULL, "threads; 0 = all cores (or OMP_NUM_THREADS)", false },
        { "batch-size", 'b', CLI_INT, &a.batch, "N", 0, 1 << 20, NULL,
          "prompt tokens evaluated per batch (the GEMM path; 0 = 512), classifier rows per batch (0 = 256), or "
          "seq2seq lines translated per call (0 = 64)", false },
        { "kv", 0, CLI_CHOICE, &a.kv, "TYPE", 0, 0, cli_kv_choices, "KV cache element type", false },
        { "act", 0, CLI_CHOICE, &a.act, "MODE", 0, 0, cli_act_choices, "Q8_ROW activations: auto (an LM's products after a norm or attention in one int8 term, prompt and decode, the rest at float accuracy), precise (float accuracy everywhere), int8 (one term everywhere: fastest), int8x2 (two terms everywhere), f32 (weights widened)", false },
        { "batch-invariant", 0, CLI_FLAG, &a.batch_invariant, NULL, 0, 0, NULL, "F32/F16 weights or --act f32: the bits qmap serve gives (a Q8_ROW model has them anyway); slower decode", true },
        { "no-bos", 0, CLI_FLAG, &a.no_bos, NULL, 0, 0, NULL, "do not add the tokenizer's BOS/EOS tokens to the prompt", true },
        { "verify", 0, CLI_FLAG, &a.verify, NULL, 0, 0, NULL, "check every tensor's checksum before running", true },
        { "no-mmap", 0, CLI_FLAG, &a.no_mmap, NULL, 0, 0, NULL, "read the weights into memory instead of mapping the file (for comparison: RAM as large as the file, not shared)", true },
        { "json", 0, CLI_FLAG, &a.json, NULL, 0, 0, NULL, "print one JSON object (text, ids, figures) instead of streaming", true },
        { "quiet", 'q', CLI_FLAG, &a.quiet, NULL, 0, 0, NULL, "no figures on stderr", true },
        { "input", 0, CLI_STRING, &a.input, "X.npy", 0, 0, NULL,
          "classifier (mlp): the rows to classify: an .npy [n, features...] (float32, float64, or integer pixels) "
          "or an IDX file, plain or .gz (MNIST's format); integer pixels are mapped as the model was trained", true },
        { "labels", 0, CLI_STRING, &a.labels, "Y.npy", 0, 0, NULL,
          "classifier: the true classes (integer .npy or IDX [n]): accuracy and a confusion matrix", true },
        { "output", 'o', CLI_STRING, &a.output, "OUT.npy", 0, 0, NULL,
          "classifier: write the model's outputs as a float32 .npy [n, classes] (replaced by rename; an existing OUT.npy that is not a regular file is refused)", true },
        { "allow-large", 0, CLI_FLAG, &a.allow_large, NULL, 0, 0, NULL,
          "classifier: read a gzip IDX --input/--labels that inflates beyond 32x its size or 64 MiB, whichever "
          "is more (refused by default, as a gzip bomb would)", true },
        { "top", 0, CLI_INT, &a.top, "K", 1, 1 << 20, NULL, "classifier: show the K best classes of each row", false },
        { "beam", 0, CLI_INT, &a.beam, "K", 1, 256, NULL, "seq2seq: beam size (1 = greedy)", false },
        { "n-best", 0, CLI_INT, &a.n_best, "N", 1, 256, NULL, "seq2seq: print the N best hypotheses with their scores", false },
        { "length-penalty", 0, CLI_FLOAT, &a.length_penalty, "A", 0, 100, NULL,
          "seq2seq: rank hypotheses by log P / length^A (CTranslate2's length_penalty)", false },
        { "max-len", 0, CLI_INT, &a.max_len, "N", 0, 1 << 16, NULL,
          "seq2seq: target tokens at most; 0 = the model's limit", false },
    };
    const cli_command cmd = {
        .name = "run",
        .usage = "qmap run MODEL.qmap (-p TEXT | -f FILE | --tokens IDS | --input X.npy) [options]",
        .description =
            "Generate text with a decoder language model (gpt2, gpt_neo, llama/mistral/qwen2) read in place from\n"
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
    int first;
    int rc = cli_parse(&cmd, argc, argv, &first);
    if (rc) return rc == 1 ? 0 : 2;
    if (first != argc - 1) {
        fprintf(stderr, "qmap run: give exactly one MODEL.qmap\nusage: %s\n", cmd.usage);
        return 2;
    }
    if (!a.input && !!a.prompt + !!a.file + !!a.tokens != 1) {
        fprintf(stderr, "qmap run: give exactly one of -p TEXT, -f FILE, --tokens IDS\nusage: %s\n", cmd.usage);
        return 2;
    }
    const char *path = argv[first];

    run_stats st = { .stop = "n_predict" };
    qmap_error err;
    qmap_model *m = NULL;
    qmap_session *s = NULL;
    qmap_sampler *smp = NULL;
    int32_t *ids = NULL;
    char *file_text = NULL, *out_text = NULL;
    size_t out_len = 0, out_cap = 0;
    int status = 1;

    qmap_model_params mp;
    qmap_model_params_default(&mp);
    mp.verify = a.verify;
    mp.no_mmap = a.no_mmap;
    mp.large_pages = true; /* a decode streams every weight per token */
    double t0 = now_s();
    cli_exit_on_model_change("qmap run", path);
    if (qmap_model_open(path, &mp, &m, &err) != QMAP_OK) {
        fprintf(stderr, "qmap run: %s\n", err.message);
        goto done;
    }
    st.load_s = now_s() - t0;
    qmap_model_info in;
    qmap_model_get_info(m, &in);
    if (in.kind == QMAP_KIND_CLASSIFIER || a.input) {
        if (in.kind != QMAP_KIND_CLASSIFIER || !a.input) {
            fprintf(stderr, "qmap run: %s: %s\n", path, a.input ? "--input is for classifiers (mlp); this is not one"
                                                                   : "a classifier (mlp) needs --input X.npy");
            goto done;
        }
        classify_args ca = { a.input, a.labels, a.output, a.batch, a.threads, a.top,
                             (qmap_act_mode)a.act, a.json, a.quiet, a.allow_large };
        status = run_classifier(m, &ca);
        goto done;
    }
    if (in.kind == QMAP_KIND_SEQ2SEQ) {
        translate_args ta = { a.prompt, a.file, a.tokens, a.beam, a.n_best, a.max_len, a.batch, a.threads,
                              a.length_penalty, (qmap_act_mode)a.act,
                              (qmap_kv_type)a.kv, a.json, a.quiet };
        status = run_translate(m, &ta);
        goto done;
    }
    if (a.batch == 0) a.batch = 512;
    if (in.kind != QMAP_KIND_LM) {
        fprintf(stderr, "qmap run: %s: %s%s%s is not a language model; qmap run generates with gpt2, gpt_neo and llama "
                "models\n", path, in.kind == QMAP_KIND_NONE ? "a plain tensor store (--arch " : "a ", in.arch,
                in.kind == QMAP_KIND_NONE ? ")" : " container");
        goto done;
    }
    uint32_t n_ctx = a.ctx ? (uint32_t)a.ctx
                           : in.context_length < QMAP_DEFAULT_N_CTX ? in.context_length : QMAP_DEFAULT_N_CTX;
    if (n_ctx > in.context_length && !a.quiet && !strcmp(in.arch, "llama"))
        fprintf(stderr, "qmap run: warning: context %u is above the %u the model was trained with; quality may drop\n",
                n_ctx, in.context_length);

    /* the prompt, as ids */
    size_t n_prompt = 0, cap = (size_t)n_ctx + 1;
    ids = malloc(cap * sizeof *ids);
    if (!ids) { fprintf(stderr, "qmap run: out of memory\n"); goto done; }
    if (a.tokens) {
        long n = parse_ids(a.tokens, ids, cap, in.vocab_size);
        if (n < 0) goto done;
        n_prompt = (size_t)n;
    } else {
        const char *text = a.prompt;
        size_t len = a.prompt ? strlen(a.prompt) : 0;
        if (a.file) {
            qm_error fe;
            if (!(file_text = cli_read_text(a.file, &len, &fe))) {
                fprintf(stderr, "qmap run: -f: %s\n", fe.message);
                goto done;
            }
            text = file_text;
        }
        qmap_status ts = qmap_tokenize(m, text, len, !a.no_bos, ids, cap, &n_prompt, &err);
        if (ts == QMAP_ERR_INVALID_ARGUMENT && n_prompt > cap) {
            fprintf(stderr, "qmap run: the prompt is %zu tokens, more than the context of %u (-c)\n", n_prompt, n_ctx);
            goto done;
        }
        if (ts != QMAP_OK) {
            fprintf(stderr, "qmap run: %s\n", err.message);
            if (ts == QMAP_ERR_NOT_FOUND) fprintf(stderr, "qmap run: give the prompt as token ids with --tokens\n");
            goto done;
        }
    }
    if (n_prompt == 0) {
        fprintf(stderr, "qmap run: the prompt has no tokens\n");
        goto done;
    }
    if (n_prompt > n_ctx) {
        fprintf(stderr, "qmap run: the prompt is %zu tokens, more than the context of %u (-c)\n", n_prompt, n_ctx);
        goto done;
    }

    qmap_session_params sp;
    qmap_session_params_default(&sp);
    sp.n_ctx = n_ctx;
    sp.n_batch = (uint32_t)a.batch;
    sp.threads = (int)a.threads;
    sp.kv_type = (qmap_kv_type)a.kv;
    sp.act = (qmap_act_mode)a.act;
    sp.batch_invariant = a.batch_invariant;
    if (qmap_session_new(m, &sp, &s, &err) != QMAP_OK) {
        fprintf(stderr, "qmap run: %s\n", err.message);
        goto done;
    }
    qmap_sampler_params smpp = { a.temp, (int32_t)a.top_k, a.top_p, a.min_p, a.repeat_penalty,
                                 (uint32_t)a.repeat_last_n, a.seed };
    if (qmap_sampler_new(&smpp, in.vocab_size, &smp, &err) != QMAP_OK) {
        fprintf(stderr, "qmap run: %s\n", err.message);
        goto done;
    }

    /* generated ids follow the prompt in the same buffer (a context never holds more) */
    int32_t *gen = ids + n_prompt;
    size_t gen_cap = cap - n_prompt;
    struct sigaction sa = { .sa_handler = on_sigint }, old_sa;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_sa);

    t0 = now_s();
    qmap_status es = qmap_eval(s, ids, n_prompt, &err);
    st.prompt_s = now_s() - t0;
    st.n_prompt = n_prompt;
    if (es != QMAP_OK) {
        fprintf(stderr, "qmap run: %s\n", err.message);
        sigaction(SIGINT, &old_sa, NULL);
        goto done;
    }
    for (size_t i = 0; i < n_prompt; i++) qmap_sampler_accept(smp, ids[i]);

    int32_t eos = qmap_token_eos(m);
    qmap_detok dt;
    qmap_detok_init(&dt);
    char piece[4096];
    /* The generated text continues the prompt's: the prompt's tokens go through the decoder first (their
     * text dropped), so that the first generated token keeps its leading space — only a text's very first
     * token loses the space SentencePiece put before it. */
    for (size_t i = 0; in.has_tokenizer && i < n_prompt; i++) {
        size_t n = 0;
        if (ids[i] != qmap_token_bos(m)) qmap_detokenize(m, &dt, ids[i], piece, sizeof piece, &n, &err);
    }
    t0 = now_s();
    const float *logits = qmap_logits(s, n_prompt - 1);
    for (;;) {
        if ((long)st.n_gen >= a.n_predict) { st.stop = "n_predict"; break; }
        if (g_interrupted) { st.stop = "interrupt"; break; }
        int32_t id = qmap_sample(smp, logits);
        gen[st.n_gen++] = id;
        if (id == eos) { st.stop = "eos"; break; }
        if (in.has_tokenizer) {
            size_t n = 0;
            if (qmap_detokenize(m, &dt, id, piece, sizeof piece, &n, &err) == QMAP_OK && n) {
                if (a.json) {
                    if (!text_append(&out_text, &out_len, &out_cap, piece, n)) { fprintf(stderr, "qmap run: out of memory\n"); break; }
                } else {
                    fwrite(piece, 1, n, stdout);
                    fflush(stdout);
                }
            }
        } else if (!a.json) {
            printf("%s%d", st.n_gen > 1 ? " " : "", id);
            fflush(stdout);
        }
        if (st.n_gen >= gen_cap || qmap_session_pos(s) >= n_ctx) { st.stop = "context"; break; }
        if (qmap_eval(s, &id, 1, &err) != QMAP_OK) {
            fprintf(stderr, "qmap run: %s\n", err.message);
            sigaction(SIGINT, &old_sa, NULL);
            goto done;
        }
        logits = qmap_logits(s, 0);
    }
    st.gen_s = now_s() - t0;
    sigaction(SIGINT, &old_sa, NULL);
    if (in.has_tokenizer) {
        size_t n = qmap_detok_flush(&dt, piece, sizeof piece);
        if (a.json) text_append(&out_text, &out_len, &out_cap, piece, n);
        else fwrite(piece, 1, n, stdout);
    }
    if (a.json) print_json(&st, m, out_text, out_len, ids, gen, a.kv, a.act);
    else {
        fputc('\n', stdout);
        fflush(stdout);
        if (!a.quiet) print_stats(&st, m, stderr);
        if (!strcmp(st.stop, "context") && a.quiet) fprintf(stderr, "qmap run: stopped at the context limit (%u)\n", n_ctx);
    }
    status = 0;
done:
    qmap_sampler_free(smp);
    qmap_session_free(s);
    qmap_model_close(m);
    free(ids);
    free(file_text);
    free(out_text);
    return status;
}
