/* Helpers shared by the loader tests: temp directories, whole-file read/write, recursive removal.
 * Header-only (static functions) because every tests/test_*.c is its own program. */
#ifndef DI_TEST_CHECKPOINT_UTIL_H
#define DI_TEST_CHECKPOINT_UTIL_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Reads a whole file; returns a NUL-terminated malloc'd buffer (NULL on failure). */
static __attribute__((unused)) char *tu_read(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}

static __attribute__((unused)) int tu_write(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, len, f);
    return fclose(f) || w != len ? -1 : 0;
}

static __attribute__((unused)) void tu_path(char *out, size_t cap, const char *dir, const char *name) {
    snprintf(out, cap, "%s/%s", dir, name);
}

/* Creates a fresh directory under /tmp; returns its path in `out`. */
static __attribute__((unused)) int tu_mkdtemp(char *out, size_t cap, const char *tag) {
    snprintf(out, cap, "/tmp/di_%s_XXXXXX", tag);
    return mkdtemp(out) ? 0 : -1;
}

/* Removes a flat directory of files (all the tests create). */
static __attribute__((unused)) void tu_rm_rf(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[4096];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        tu_path(p, sizeof p, dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

/* Bytes actually allocated on disk under a flat directory (sparse holes excluded). */
static __attribute__((unused)) unsigned long long tu_disk_bytes(const char *dir) {
    DIR *d = opendir(dir);
    unsigned long long total = 0;
    if (!d) return 0;
    struct dirent *e;
    char p[4096];
    struct stat st;
    while ((e = readdir(d))) {
        tu_path(p, sizeof p, dir, e->d_name);
        if (e->d_name[0] != '.' && !stat(p, &st)) total += (unsigned long long)st.st_blocks * 512;
    }
    closedir(d);
    return total;
}

#endif
