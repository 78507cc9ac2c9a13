/* render_template.c — print what serve/template.c renders for a chat body, for tests/serve/test_templates.py
 * to compare with the model's own Jinja template rendered by jinja2.
 * usage: render_template NAME < BODY.json   (BODY: an OpenAI chat request, {"messages": [...]})
 *        render_template --detect < TEMPLATE.jinja   (prints the name serve_template_detect gives, or "none") */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"
#include "template.h"

int main(int argc, char **argv)
{
    bool detect = argc == 2 && !strcmp(argv[1], "--detect");
    int t = argc == 2 && !detect ? serve_template_by_name(argv[1]) : -1;
    if (t < 0 && !detect) {
        fprintf(stderr, "usage: render_template NAME < BODY.json\n");
        return 2;
    }
    char *body = NULL;
    size_t len = 0, cap = 0, n;
    do {
        if (len + 4096 > cap && !(body = realloc(body, cap = 2 * cap + 4096))) return 1;
        n = fread(body + len, 1, cap - len, stdin);
        len += n;
    } while (n > 0);
    if (detect) {
        int d = serve_template_detect(body, len);
        printf("%s\n", d < 0 ? "none" : serve_template_name((serve_template)d));
        free(body);
        return 0;
    }
    const serve_defaults def = { 0.8f, 0.95f, 0.05f, 1.0f, 40 };
    serve_request r;
    serve_error e;
    if (!serve_request_parse(body, len, true, &def, &r, &e)) {
        fprintf(stderr, "render_template: %s\n", e.message);
        return 1;
    }
    size_t out_len = 0;
    char *out = serve_template_render((serve_template)t, r.messages, r.n_messages, &out_len);
    if (!out) return 1;
    fwrite(out, 1, out_len, stdout);
    free(out);
    serve_request_free(&r);
    free(body);
    return 0;
}
