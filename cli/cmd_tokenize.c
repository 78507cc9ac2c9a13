/* qmap tokenize — text → token ids with the tokenizer stored in a container, through include/qmap.h only. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "json_out.h"
#include "opts.h"
#include "qmap.h"

int cmd_tokenize(int argc, char **argv)
{
    const char *prompt = NULL, *file = NULL;
    bool ids_only = false, json = false, no_bos = false;
    const cli_opt opts[] = {
        { "prompt", 'p', CLI_STRING, &prompt, "TEXT", 0, 0, NULL, "the text to encode", true },
        { "file", 'f', CLI_STRING, &file, "FILE", 0, 0, NULL, "encode the contents of FILE (" CLI_TEXT_MAX_HELP ")", true },
        { "ids", 0, CLI_FLAG, &ids_only, NULL, 0, 0, NULL, "print only the ids, space-separated", true },
        { "json", 0, CLI_FLAG, &json, NULL, 0, 0, NULL, "print a JSON array of ids (to diff against other tokenizers)", true },
        { "no-bos", 0, CLI_FLAG, &no_bos, NULL, 0, 0, NULL, "do not add the tokenizer's BOS/EOS tokens", true },
    };
    const cli_command cmd = {
        .name = "tokenize",
        .usage = "qmap tokenize MODEL.qmap (-p TEXT | -f FILE) [--ids | --json] [--no-bos]",
        .description =
            "Encode text with the tokenizer stored in the container (spec/TOKENIZER.md: byte-level BPE as GPT-2,\n"
            "Llama-3 and Qwen use, SentencePiece-style BPE with byte fallback, word level). Added and special\n"
            "tokens are split out first; BOS/EOS are added as the tokenizer says unless --no-bos. Prints one\n"
            "line per token: the id, the stored piece and its text; a file's token count and MB/s go to stderr.\n"
            "A seq2seq model encodes with its source vocabulary, and the pieces shown are that vocabulary's.\n",
        .opts = opts,
        .n_opts = sizeof opts / sizeof opts[0],
        .epilog = "exit status: 0 done, 1 bad model or text (invalid UTF-8 names its byte offset), 2 usage error\n",
    };
    int first;
    int rc = cli_parse(&cmd, argc, argv, &first);
    if (rc) return rc == 1 ? 0 : 2;
    if (first != argc - 1 || !!prompt + !!file != 1) {
        fprintf(stderr, "qmap tokenize: give one MODEL.qmap and exactly one of -p TEXT, -f FILE\nusage: %s\n", cmd.usage);
        return 2;
    }
    qmap_error err;
    qmap_model *m;
    if (qmap_model_open(argv[first], NULL, &m, &err) != QMAP_OK) {
        fprintf(stderr, "qmap tokenize: %s\n", err.message);
        return 1;
    }
    char *text = NULL;
    size_t len = prompt ? strlen(prompt) : 0;
    qm_error fe;
    if (file && !(text = cli_read_text(file, &len, &fe))) {
        fprintf(stderr, "qmap tokenize: -f: %s\n", fe.message);
        qmap_model_close(m);
        return 1;
    }
    qmap_model_info info;
    qmap_model_get_info(m, &info);
    const bool seq2seq = info.kind == QMAP_KIND_SEQ2SEQ;
    const char *src = file ? text : prompt;
    size_t cap = len + 16;   /* a first guess; the call says how many it needs */
    int32_t *ids = malloc(cap * sizeof *ids);
    size_t n = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    qmap_status st = ids ? qmap_tokenize(m, src, len, !no_bos, ids, cap, &n, &err) : QMAP_ERR_NOMEM;
    if (st == QMAP_ERR_INVALID_ARGUMENT && n > cap) {
        int32_t *more = realloc(ids, n * sizeof *ids);
        if (more) { ids = more; cap = n; st = qmap_tokenize(m, src, len, !no_bos, ids, cap, &n, &err); }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    int status = 1;
    if (st != QMAP_OK) {
        fprintf(stderr, "qmap tokenize: %s\n", st == QMAP_ERR_NOMEM && !ids ? "out of memory" : err.message);
        goto done;
    }
    if (json) {
        json_out j = { .fp = stdout };
        jo_begin_array(&j, NULL);
        for (size_t i = 0; i < n; i++) jo_i64(&j, NULL, ids[i]);
        jo_end_array(&j);
        fputc('\n', stdout);
    } else if (ids_only) {
        for (size_t i = 0; i < n; i++) printf("%s%d", i ? " " : "", ids[i]);
        fputc('\n', stdout);
    } else {
        char buf[8192];
        for (size_t i = 0; i < n; i++) {
            size_t plen = 0, dlen = 0;
            /* the ids are the source vocabulary's (a seq2seq model's differs from the target one that
             * qmap_token_piece and qmap_detokenize read), so its stored piece stands for the text */
            const char *piece = qmap_token_source_piece(m, ids[i], &plen);
            if (seq2seq) {
                dlen = !piece ? 0 : plen < sizeof buf ? plen : sizeof buf;
                if (dlen) memcpy(buf, piece, dlen);
            } else {
                qmap_detok dt;
                qmap_detok_init(&dt);
                if (qmap_detokenize(m, &dt, ids[i], buf, sizeof buf, &dlen, NULL) != QMAP_OK) dlen = 0;
                dlen += qmap_detok_flush(&dt, buf + dlen, sizeof buf - dlen);
            }
            printf("%8d  %-20.*s  '", ids[i], (int)plen, piece ? piece : "");
            for (size_t k = 0; k < dlen; k++) {   /* control characters shown escaped */
                unsigned char c = (unsigned char)buf[k];
                if (c == '\n') fputs("\\n", stdout);
                else if (c == '\t') fputs("\\t", stdout);
                else if (c < 0x20) printf("\\x%02x", c);
                else fputc(c, stdout);
            }
            fputs("'\n", stdout);
        }
    }
    if (file) {
        double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        fprintf(stderr, "qmap tokenize: %zu tokens from %zu bytes in %.3f s (%.2f MB/s)\n", n, len, s,
                s > 0 ? (double)len / s / 1e6 : 0.0);
    }
    status = 0;
done:
    free(ids);
    free(text);
    qmap_model_close(m);
    return status;
}
