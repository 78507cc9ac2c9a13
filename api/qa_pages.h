/* qa_pages.h — a model's mapping in 2 MiB pages where the kernel can give them.
 *
 * Why: on some virtual machines a decode step that streams the weights through a mapping of 4 KiB pages
 * runs at a fraction of its speed over an anonymous copy, and at nearly full speed where the page cache
 * holds the file in 2 MiB folios, which the kernel maps with one page-table entry each (FilePmdMapped in
 * /proc/PID/smaps); docs/perf/2026-11-25-zen5.md has the measurement. qm_writer writes files so that they
 * are cached that way, and qm_open advises MADV_HUGEPAGE, so that pages read in through the mapping arrive
 * that way; but a file written by another program, or whose pages were reclaimed and read back piecemeal,
 * is cached in 4 KiB pages, and nothing can merge cached pages in place. The cure is to drop the file's
 * cached pages (only those no process maps) and read them back through the MADV_HUGEPAGE mapping.
 *
 * Linux only; elsewhere the functions report nothing and change nothing. No global state.
 */
#ifndef QA_PAGES_H
#define QA_PAGES_H

#include <stddef.h>
#include <stdint.h>

/* Map every page of [base, base + len) (MADV_POPULATE_READ: reads the file in where it is not cached).
 * 0, or -1 if the kernel refused (older than 5.14, or not Linux). */
int qa_pages_populate(const void *base, size_t len);

/* How many bytes of the mapping that starts at base are mapped by 2 MiB entries (FilePmdMapped of its VMA
 * in /proc/self/smaps); UINT64_MAX where that cannot be told (no smaps, no such field). */
uint64_t qa_pages_pmd_bytes(const void *base);

/* Drop the cached pages of the file at `path` that no process maps (POSIX_FADV_DONTNEED), after writing
 * out dirty ones (fdatasync), which would otherwise stay. 0, or -1 (errno set) if the file cannot be
 * opened. */
int qa_pages_drop_cache(const char *path);

#endif /* QA_PAGES_H */
