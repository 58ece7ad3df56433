/*
 * compile_split_object.c - the check of a split unit's merged object (compile_pool.c): a name the
 * torch half uses must be defined by the nvcc half, or the module would fail to load. Read from
 * the relocatable object's symbol table with libelf; a name matches by its C spelling or its
 * Itanium source-name.
 */
#include "eval/compile_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"
#include "core/banned.h"

/* Largest object file read by the symbol check. */
#define OBJECT_MAX_BYTES ((off_t)1 << 30)

/* Whether sym names `name`: the C name itself, or the Itanium source-name <length><name>. */
static bool symbol_names(const char *sym, struct sv name)
{
    if (strlen(sym) == name.len && memcmp(sym, name.p, name.len) == 0)
        return true;
    char len[24];
    int k = snprintf(len, sizeof(len), "%zu", name.len);
    for (const char *p = sym; (p = strstr(p, len)); p++) {
        if (p > sym && p[-1] >= '0' && p[-1] <= '9')
            continue;
        if (strncmp(p + k, name.p, name.len) == 0)
            return true;
    }
    return false;
}

int compile__split_check_object(const char *path, struct sv names, char *why, size_t why_len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size > OBJECT_MAX_BYTES) {
        close(fd);
        return CA_ETOOBIG;
    }
    (void)elf_version(EV_CURRENT);
    Elf *e = elf_begin(fd, ELF_C_READ, NULL);
    int rc = e ? 0 : CA_EPARSE;
    bool bad = false;
    Elf_Scn *scn = NULL;
    while (!rc && !bad && (scn = elf_nextscn(e, scn))) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_SYMTAB || !sh.sh_entsize)
            continue;
        Elf_Data *d = elf_getdata(scn, NULL);
        size_t count = sh.sh_size / sh.sh_entsize;
        for (size_t i = 0; d && i < count && !bad; i++) {
            GElf_Sym sym;
            if (!gelf_getsym(d, (int)i, &sym) || sym.st_shndx != SHN_UNDEF || !sym.st_name)
                continue;
            const char *nm = elf_strptr(e, sh.sh_link, sym.st_name);
            if (!nm)
                continue;
            struct sv rest = names, line;
            while (!bad && sv_next_line(&rest, &line, NULL))
                if (line.len && symbol_names(nm, line)) {
                    snprintf(why, why_len,
                             "the torch half uses %.*s, which the nvcc half leaves undefined "
                             "(%s)",
                             (int)line.len, line.p, nm);
                    bad = true;
                }
        }
    }
    if (e)
        elf_end(e);
    close(fd);
    return rc ? rc : bad ? 1 : 0;
}
