/*
 * embed.h - files compiled into the binary at build time (tools/embed.c):
 * the workspace template (template/...) and helper scripts (Python files under src/).
 * Read-only, static storage, thread-safe.
 */
#ifndef CA_EMBED_H
#define CA_EMBED_H

#include <stdbool.h>
#include <stddef.h>

struct embedded_file {
    const char *path; /* repository path, e.g. "template/SKILL.md" */
    const char *data; /* NUL-terminated */
    size_t len;
    int executable;
};

extern const struct embedded_file embedded_files[];
extern const size_t embedded_files_count;

/* The file with exactly this repository path, or NULL. */
const struct embedded_file *embed_find(const char *path);

#endif
