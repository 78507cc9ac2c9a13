/* qmap serve — an OpenAI-compatible HTTP server over one language model (serve/), through include/qmap.h. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "http.h"
#include "opts.h"
#include "qmap.h"
#include "sched.h"
#include "template.h"

/* Prompt tokens one batched step reads beside the decode rows of every slot (--chunk). A step's time is
 * every running stream's gap between two tokens, and it grows with the chunk; a smaller chunk keeps the
 * streams flowing while a long prompt is read, a larger one reads it in fewer steps. 32 because a step of
 * 8 slots then holds 7 decode rows and 33 prompt rows: on a 1.1B Q8_ROW model at 2 threads the streams'
 * longest gap stayed near 200 ms while a 512-token prompt took 1.26x its time alone, where 16 took
 * 1.40-1.59x (make bench-serve, docs/perf/2026-11-28-zen4-small-gemm.md). */
#define SERVE_DEFAULT_CHUNK 32

typedef struct serve_args {
    const char *host, *api_key, *chat_template;
    long port, parallel, ctx, threads, timeout, max_queue, chunk;
    uint64_t max_body;
    bool quiet, log_json;
} serve_args;

static const char *const template_choices[] = { "chatml", "llama2", "llama3", "mistral", "phi3", "gemma", "zephyr", NULL };

/* The template: --chat-template, else the one the container's stored chat_template shows, else chatml. */
static serve_template choose_template(const qmap_model *m, const serve_args *a, const char **why)
{
    if (a->chat_template) {
        *why = "--chat-template";
        return (serve_template)serve_template_by_name(a->chat_template);
    }
    size_t len = 0;
    const char *jinja = qmap_model_chat_template(m, &len);
    int t = serve_template_detect(jinja, len);
    if (t >= 0) {
        *why = "recognised in the container's chat_template";
        return (serve_template)t;
    }
    *why = jinja ? "the container's chat_template is not one this server knows; using chatml"
                 : "the container has no chat_template; using chatml";
    return SERVE_TEMPLATE_CHATML;
}

static int check_model(const qmap_model *m, const char *path)
{
    qmap_model_info in;
    qmap_model_get_info(m, &in);
    if (in.kind != QMAP_KIND_NONE) return 0;
    fprintf(stderr, "qmap serve: %s is a plain tensor store (--arch %s), not a model; qmap serve serves language models "
            "(/v1/completions, /v1/chat/completions), classifiers (/v1/classify) and encoder-decoders (/v1/translate)\n",
            path, in.arch);
    return 1;
}

static void print_banner(const serve_args *a, uint16_t port, const char *model_id, uint32_t n_ctx,
                         serve_template t, const char *why, qmap_model_kind kind)
{
    char hostbuf[128];
    bool v6 = strchr(a->host, ':') != NULL;
    snprintf(hostbuf, sizeof hostbuf, "%s%s%s", v6 ? "[" : "", a->host, v6 ? "]" : "");
    if (kind != QMAP_KIND_LM) {
        printf("qmap serve: %s (a%s) on http://%s:%u\n", model_id, kind == QMAP_KIND_CLASSIFIER ? " classifier" : "n encoder-decoder",
               hostbuf, port);
        printf("  GET  /health  /v1/models  /metrics\n  POST %s\n", kind == QMAP_KIND_CLASSIFIER ? "/v1/classify" : "/v1/translate");
    } else {
        printf("qmap serve: %s on http://%s:%u (%ld slots, %u positions each, chat template %s: %s)\n", model_id,
               hostbuf, port, a->parallel, n_ctx, serve_template_name(t), why);
        printf("  GET  /health  /v1/models  /metrics\n  POST /v1/completions  /v1/chat/completions  /tokenize  /detokenize\n");
    }
    if (a->api_key && *a->api_key) printf("  every endpoint but /health needs Authorization: Bearer KEY\n");
    fflush(stdout);
}

/* Block SIGINT/SIGTERM in every thread (the server's threads inherit the mask), then wait for one here. */
static void wait_for_stop_signal(const sigset_t *stop)
{
    int sig = 0;
    sigwait(stop, &sig);
}

static int serve_main(const serve_args *a, const char *path)
{
    qmap_error err;
    qmap_model *m = NULL;
    if (qmap_model_open(path, NULL, &m, &err) != QMAP_OK) {
        fprintf(stderr, "qmap serve: %s\n", err.message);
        return 1;
    }
    if (check_model(m, path)) { qmap_model_close(m); return 1; }
    qmap_model_info in;
    qmap_model_get_info(m, &in);
    const bool classifier = in.kind == QMAP_KIND_CLASSIFIER, seq2seq = in.kind == QMAP_KIND_SEQ2SEQ;
    if (!classifier && !in.has_tokenizer)
        fprintf(stderr, "qmap serve: %s has no tokenizer: only prompts given as token ids can be served\n", path);
    uint32_t n_ctx = a->ctx ? (uint32_t)a->ctx : (in.context_length < 4096 ? in.context_length : 4096);
    if (n_ctx > in.context_length && !strcmp(in.arch, "llama"))   /* as qmap run: others refuse at the batch */
        fprintf(stderr, "qmap serve: warning: context %u is above the %u the model was trained with; quality may drop\n",
                n_ctx, in.context_length);
    const char *why = "";
    serve_template tmpl = choose_template(m, a, &why);
    const char *slash = strrchr(path, '/');
    const char *model_id = slash ? slash + 1 : path;

    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);

    serve_sched_config sc = { (uint32_t)a->parallel, n_ctx, (uint32_t)(a->parallel + a->chunk), (uint32_t)a->max_queue,
                              (int)a->threads };
    serve_sched *sched = NULL;
    qmap_classifier *cls = NULL;
    qmap_status st = classifier ? qmap_classifier_new(m, 0, (int)a->threads, QMAP_ACT_AUTO, &cls, &err)
                     : seq2seq  ? QMAP_OK   /* translators are made per beam size on first use */
                                : serve_sched_new(m, &sc, &sched, &err);
    if (st != QMAP_OK) {
        fprintf(stderr, "qmap serve: %s\n", err.message);
        qmap_model_close(m);
        return 1;
    }
    serve_http_config hc = { a->host, (uint16_t)a->port, a->api_key, (size_t)a->max_body, (unsigned)a->timeout, n_ctx,
                             model_id, tmpl, cls, seq2seq, (int)a->threads, a->quiet ? NULL : stderr, a->log_json };
    char msg[256];
    serve_http *http = serve_http_start(&hc, m, sched, msg, sizeof msg);
    if (!http) {
        fprintf(stderr, "qmap serve: %s\n", msg);
        serve_sched_free(sched);
        qmap_classifier_free(cls);
        qmap_model_close(m);
        return 1;
    }
    print_banner(a, serve_http_port(http), model_id, n_ctx, tmpl, why, in.kind);
    wait_for_stop_signal(&stop);
    if (!a->quiet) fprintf(stderr, "qmap serve: stopping: no new connections; finishing the requests in flight\n");
    serve_http_quiesce(http);
    if (sched) serve_sched_drain(sched);
    serve_http_wait_idle(http);
    serve_http_stop(http);
    serve_sched_free(sched);
    qmap_classifier_free(cls);
    qmap_model_close(m);
    if (!a->quiet) fprintf(stderr, "qmap serve: stopped\n");
    return 0;
}

int cmd_serve(int argc, char **argv)
{
    serve_args a = { .host = "127.0.0.1", .port = 8080, .parallel = 4, .ctx = 0, .threads = 0, .timeout = 600,
                     .max_queue = 64, .chunk = SERVE_DEFAULT_CHUNK, .max_body = 1 << 20 };
    a.api_key = getenv("QMAP_API_KEY");
    int tmpl = -1;
    const cli_opt opts[] = {
        { "host", 0, CLI_STRING, &a.host, "ADDR", 0, 0, NULL, "address to listen on (0.0.0.0 to accept other machines)", false },
        { "port", 0, CLI_INT, &a.port, "PORT", 0, 65535, NULL, "TCP port; 0 = any free one (printed at start)", false },
        { "parallel", 0, CLI_INT, &a.parallel, "N", 1, 256, NULL, "sequences decoded together (slots)", false },
        { "ctx-size", 'c', CLI_INT, &a.ctx, "N", 0, 1 << 24, NULL, "positions per sequence; 0 = the model's context, at most 4096", false },
        { "chunk", 0, CLI_INT, &a.chunk, "N", 1, 1 << 16, NULL, "prompt tokens read per step beside the running streams' "
          "decode rows: smaller keeps their gaps shorter while a long prompt is read", false },
        { "threads", 't', CLI_INT, &a.threads, "N", 0, 1024, NULL, "threads of the evaluation; 0 = all cores", false },
        { "api-key", 0, CLI_STRING, &a.api_key, "KEY", 0, 0, NULL, "require Authorization: Bearer KEY on every endpoint but /health "
          "(default: $QMAP_API_KEY; none if unset)", true },
        { "chat-template", 0, CLI_CHOICE, &tmpl, "NAME", 0, 0, template_choices, "chat template for /v1/chat/completions "
          "(default: recognised from the container's chat_template, else chatml)", true },
        { "max-body", 0, CLI_UINT64, &a.max_body, "BYTES", 64, 1 << 30, NULL, "largest request body; larger is 413", false },
        { "timeout", 0, CLI_INT, &a.timeout, "S", 1, 86400, NULL, "close a connection idle this many seconds while it sends a request or between requests (slow clients)", false },
        { "max-queue", 0, CLI_INT, &a.max_queue, "N", 0, 1 << 20, NULL, "requests waiting for a slot; more get 503 with Retry-After", false },
        { "quiet", 'q', CLI_FLAG, &a.quiet, NULL, 0, 0, NULL, "no log line per request", true },
        { "log-json", 0, CLI_FLAG, &a.log_json, NULL, 0, 0, NULL, "log each request as one JSON object on stderr", true },
    };
    const cli_command cmd = {
        .name = "serve",
        .usage = "qmap serve MODEL.qmap [--host ADDR] [--port 8080] [--parallel N] [-c CTX] [--chunk N] [-t THREADS]\n"
                 "       [--api-key KEY] [--chat-template NAME] [--max-body BYTES] [--timeout S] [--max-queue N]\n"
                 "       [--quiet] [--log-json]",
        .description =
            "Serve a decoder language model over HTTP with the OpenAI API: POST /v1/completions and\n"
            "/v1/chat/completions (stream: true sends Server-Sent Events, one per decoded piece), POST /tokenize and\n"
            "/detokenize, GET /v1/models, /health and /metrics (Prometheus text). Requests share --parallel slots,\n"
            "decoded together one token per slot per step (continuous batching); a long prompt is read --chunk\n"
            "tokens per step beside the others' decode rows. Requests beyond the slots wait in a queue of\n"
            "--max-queue; beyond it they get 503. Chat messages become a prompt through a built-in template\n"
            "(chatml, llama2, llama3, mistral, phi3, gemma, zephyr). Sampling defaults are qmap run's (temperature\n"
            "0.8, top_k 40, top_p 0.95, min_p 0.05); temperature 0 is greedy; a request without \"seed\" gets a\n"
            "random one. A request's text does not depend on the others in flight nor on --chunk (the batch is\n"
            "batch-invariant: the same seed gives the same text). Errors are OpenAI error objects. Listens on\n"
            "127.0.0.1 unless --host says otherwise. SIGINT/SIGTERM: stop accepting, finish the requests in flight,\n"
            "exit 0.\n"
            "A classifier (mlp) container is served through POST /v1/classify instead: {\"inputs\": [[features...],\n"
            "...]} (\"pixels\": true maps raw values as the model was trained) gives each row's class, label and\n"
            "scores, in batches through the matrix kernels. An encoder-decoder (seq2seq) container is served through\n"
            "POST /v1/translate: {\"text\": [sentences...], \"beam\": K} gives each sentence's best translation.\n"
            "Example:\n"
            "  qmap serve kjv-q8.qmap --port 8080 &\n"
            "  curl -s http://127.0.0.1:8080/v1/completions -H 'Content-Type: application/json' \\\n"
            "       -d '{\"prompt\": \"In the beginning\", \"max_tokens\": 32, \"temperature\": 0}'\n",
        .opts = opts,
        .n_opts = sizeof opts / sizeof opts[0],
        .epilog = "exit status: 0 stopped by a signal, 1 bad model (a plain tensor store) or address, 2 usage error\n",
    };
    int first;
    int rc = cli_parse(&cmd, argc, argv, &first);
    if (rc) return rc == 1 ? 0 : 2;
    if (first != argc - 1) {
        fprintf(stderr, "qmap serve: give exactly one MODEL.qmap\nusage: %s\n", cmd.usage);
        return 2;
    }
    if (tmpl >= 0) a.chat_template = template_choices[tmpl];
    return serve_main(&a, argv[first]);
}
