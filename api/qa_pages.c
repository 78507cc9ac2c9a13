/* qa_pages.c — see qa_pages.h. */
#define _GNU_SOURCE
#include "qa_pages.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22   /* Linux 5.14 */
#endif

int qa_pages_populate(const void *base, size_t len)
{
#ifdef __linux__
    if (base && len > 0 && madvise((void *)base, len, MADV_POPULATE_READ) == 0) return 0;
#else
    (void)base;
    (void)len;
#endif
    return -1;
}

uint64_t qa_pages_pmd_bytes(const void *base)
{
#ifdef __linux__
    if (!base) return UINT64_MAX;
    FILE *fp = fopen("/proc/self/smaps", "r");
    if (!fp) return UINT64_MAX;
    char line[4600];
    uintptr_t want = (uintptr_t)base;
    int in_vma = 0;
    uint64_t pmd = UINT64_MAX;
    while (fgets(line, sizeof line, fp)) {
        /* a VMA header begins with its lower-case hex start address; field lines with a capitalised key */
        if ((line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f')) {
            uintptr_t start;
            if (in_vma) break;   /* past our VMA without the field */
            in_vma = sscanf(line, "%" SCNxPTR "-", &start) == 1 && start == want;
            continue;
        }
        unsigned long long kb;
        if (in_vma && sscanf(line, "FilePmdMapped: %llu kB", &kb) == 1) {
            pmd = (uint64_t)kb * 1024;
            break;
        }
    }
    fclose(fp);
    return pmd;
#else
    (void)base;
    return UINT64_MAX;
#endif
}

int qa_pages_drop_cache(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -1;
    /* dirty pages (a file written a moment ago) are not dropped: write them out first */
    (void)fdatasync(fd);
#ifdef POSIX_FADV_DONTNEED
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
#endif
    close(fd);
    return 0;
}
