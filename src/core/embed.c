/*
 * embed.c - lookup in the table that tools/embed.c generates. The table is
 * small (tens of files), so a linear scan is enough.
 */
#include "core/embed.h"

#include <string.h>

#include "core/banned.h"

const struct embedded_file *embed_find(const char *path)
{
    for (size_t i = 0; i < embedded_files_count; i++)
        if (strcmp(embedded_files[i].path, path) == 0)
            return &embedded_files[i];
    return NULL;
}
