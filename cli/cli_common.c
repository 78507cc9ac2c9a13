/* cli_common.c — the helpers every subcommand shares (cli.h), apart from main() so that qmap-mpi
 * (mpi/qmap_mpi.c) links the same commands with its own entry point. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "qmap.h"
#include "qm_fileio.h"

const char *const cli_kv_choices[] = { "f16", "f32", NULL };
const char *const cli_act_choices[] = { "auto", "int8", "f32", "int8x2", "precise", NULL };
_Static_assert(QMAP_KV_F16 == 0 && QMAP_KV_F32 == 1, "cli_kv_choices lists qmap_kv_type in order");
_Static_assert(QMAP_ACT_AUTO == 0 && QMAP_ACT_INT8 == 1 && QMAP_ACT_F32 == 2 && QMAP_ACT_INT8X2 == 3 &&
                   QMAP_ACT_PRECISE == 4,
               "cli_act_choices lists qmap_act_mode in order");

const char *cli_human_bytes(uint64_t n, char *buf, size_t size)
{
    static const char *units[] = { "B", "kB", "MB", "GB", "TB" };
    double v = (double)n;
    int u = 0;
    while (v >= 1000 && u < 4) { v /= 1000; u++; }
    if (u == 0) snprintf(buf, size, "%llu B", (unsigned long long)n);
    else snprintf(buf, size, "%.2f %s", v, units[u]);
    return buf;
}

char *cli_read_text(const char *path, size_t *len, qm_error *err)
{
    char *text = NULL;
    return qm_read_file(path, CLI_TEXT_MAX, &text, len, err) == QM_OK ? text : NULL;
}

qm_status cli_write_file(const char *path, const void *buf, size_t len, qm_error *err)
{
    qm_outfile o;
    qm_status st = qm_outfile_create(&o, path, err);
    if (st != QM_OK) return st;
    if ((st = qm_outfile_write(&o, buf, len, err)) != QM_OK) {
        qm_outfile_abort(&o);
        return st;
    }
    return qm_outfile_commit(&o, err);
}

void cli_exit_on_model_change(const char *cmd, const char *path)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s: %.400s: %s", cmd, path, QMAP_MAPPED_FILE_CHANGED);
    qmap_exit_on_mapped_file_change(msg, 1);
}

long cli_parse_count(const char *s)
{
    if (!s || !*s) return -1;
    char *end;
    long v = strtol(s, &end, 10);
    return (*end || v < 0) ? -1 : v;
}
