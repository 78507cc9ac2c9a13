/* http.h — the HTTP side of qmap serve, on libmicrohttpd: routes, bearer authentication, body limits,
 * OpenAI responses and Server-Sent Events. One thread per connection parses, queues on the scheduler and
 * streams; no model evaluation happens here.
 *
 * Routes: GET /health (no key needed), GET /v1/models, GET /metrics (Prometheus text); for a language model
 * POST /v1/completions, POST /v1/chat/completions, POST /tokenize, POST /detokenize; for a classifier POST
 * /v1/classify; for an encoder-decoder POST /v1/translate. Any other path is 404, a known path with another method 405, each with an OpenAI error
 * object.
 */
#ifndef QS_HTTP_H
#define QS_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "qmap.h"
#include "sched.h"
#include "template.h"

typedef struct serve_http_config {
    const char *host;          /* address to bind, "127.0.0.1" by default */
    uint16_t port;             /* 0: any free port (serve_http_port tells which) */
    const char *api_key;       /* NULL or "": no authentication */
    size_t max_body;           /* bytes of a request body; more is 413 */
    unsigned timeout_s;        /* a connection idle this long while it sends a request, or between two, is
                                * closed (slow clients); not while its answer is made */
    uint32_t n_ctx;            /* positions per sequence: a longer prompt is refused before queueing */
    const char *model_id;      /* the name /v1/models lists and responses carry */
    serve_template chat_template;
    qmap_classifier *classifier; /* a classifier container: POST /v1/classify runs on it (sched is then NULL) */
    bool seq2seq;              /* an encoder-decoder container: POST /v1/translate (sched is then NULL) */
    int threads;               /* the translators' threads (-t) */
    FILE *log;                 /* one line per request, or NULL */
    bool log_json;             /* the lines as JSON objects */
} serve_http_config;

typedef struct serve_http serve_http;

/* Bind and start serving: a language model through `sched`, or a classifier through cfg->classifier (sched
 * NULL). NULL with a message in errbuf when the address cannot be bound. */
serve_http *serve_http_start(const serve_http_config *cfg, const qmap_model *m, serve_sched *sched, char *errbuf,
                             size_t errcap);
/* The port bound. */
uint16_t serve_http_port(const serve_http *h);
/* Stop accepting connections; those open go on. */
void serve_http_quiesce(serve_http *h);
/* Wait until every generation response has been sent to the end or abandoned by its client (at most
 * --timeout seconds), after serve_sched_drain: the scheduler can finish before a slow reader has read. */
void serve_http_wait_idle(serve_http *h);
/* Close every connection and free. */
void serve_http_stop(serve_http *h);

#endif /* QS_HTTP_H */
