/*
 * policy_elf.c - the static policy for built objects: what the linked extension (or one of the
 * agent's object files) imports.
 *
 * The undefined symbols of an object are everything it calls outside itself. A source check can
 * be fooled by what it cannot see (tensor arithmetic operators resolve to ATen operators, a macro
 * or template can reach a name no token spells), but whatever code survives compilation has to
 * import the functions it calls. So the same rules are applied once more to the names the object
 * imports, read with libelf: the dynamic symbol table (.dynsym) of a shared object, or the
 * symbol table (.symtab) of a relocatable object, entries with st_shndx == SHN_UNDEF and global
 * or weak binding.
 *
 * The rules are a deny-list, not an allow-list: a legitimate extension imports hundreds of
 * libc, libstdc++, c10, pybind11 and CPython symbols that torch's headers pull in and that change
 * from release to release. C names go through the shared rules of policy.c. C++ names are matched
 * as mangled text, without demangling: a namespace or class in the Itanium ABI is its length and
 * name ("St6thread" is std::thread wherever it appears, also as a template argument), and ATen's
 * operators are all at::_ops::<name>::call or ::redispatch, so the operator's name can be read
 * after "N2at4_ops". The names were checked against extensions built with torch 2.11 and g++ 13
 * (docs/internals/policy.md).
 *
 * Thread-safe: libelf handles are per call.
 */
#include "eval/policy.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"
#include "eval/policy_internal.h"
#include "core/banned.h"

/* Largest object file read (the extensions we build are a few MB). */
#define OBJECT_MAX_BYTES ((off_t)1 << 30)

/* ATen operators a binding may call: allocation. */
static const char *const ops_allowed[] = {"empty_memory_format", "empty_like", "empty_strided"};

struct mangled_rule {
    const char *needle;
    const char *rule;
    const char *name; /* readable */
    const char *message;
};

static const struct mangled_rule mangled_rules[] = {
    {"__dispatch_", "torch-compute", "at::TensorBase::__dispatch_*",
     "a tensor method that runs an operator (contiguous() and friends). Require contiguous inputs "
     "with CA_CHECK_INPUT and compute in your kernel."},
    {"N2at11TensorMaker", "memory", "at::TensorMaker (torch::from_blob)",
     "a tensor over memory that already exists. Allocate every output with torch::empty, "
     "torch::empty_like or torch::empty_strided."},
    {"N2at6native", "torch-compute", "at::native", "ATen's kernels. Compute in your own kernel."},
    {"N2at4cuda4blas", "torch-compute", "at::cuda::blas",
     "ATen's GEMM wrappers. Call cuBLAS (cublas*gemm*, cublasLt*) directly."},
    {"N3c1010Dispatcher", "torch-compute", "c10::Dispatcher",
     "the operator dispatcher, which runs ATen operators by name. Compute in your own kernel."},
    {"N3c1014OperatorHandle", "torch-compute", "c10::OperatorHandle",
     "an ATen operator looked up by name. Compute in your own kernel."},
    {"N5torch2nn", "torch-compute", "torch::nn", "torch's module library. Compute in your kernel."},
    {"N5torch3jit", "torch-compute", "torch::jit", "the TorchScript runtime. Remove it."},
    {"N5torch5optim", "torch-compute", "torch::optim", "torch's optimisers. Remove it."},
    {"St6thread", "thread", "std::thread",
     "a thread. All work must happen inside the call, on the stream the binding passes."},
    {"St7jthread", "thread", "std::jthread",
     "a thread. All work must happen inside the call, on the stream the binding passes."},
    {"St13basic_filebuf", "file", "std::basic_filebuf (file streams)",
     "file I/O. Kernels and bindings get data only as tensors."},
    {"St12__basic_file", "file", "std::__basic_file (file streams)",
     "file I/O. Kernels and bindings get data only as tensors."},
    {"St14basic_ifstream", "file", "std::ifstream",
     "file I/O. Kernels and bindings get data only as tensors."},
    {"St14basic_ofstream", "file", "std::ofstream",
     "file I/O. Kernels and bindings get data only as tensors."},
    {"St13basic_fstream", "file", "std::fstream",
     "file I/O. Kernels and bindings get data only as tensors."},
    {"St10filesystem", "file", "std::filesystem",
     "file system access. Kernels and bindings get data only as tensors."},
    {"N8pybind115module_6import", "python", "pybind11::module_::import",
     "a Python import. Bindings use pybind11 only for m.def and pybind11::arg."},
};

/* The operator name after "N2at4_ops" in a mangled name: <length><name>. */
static bool aten_op(const char *sym, const char **op, size_t *len)
{
    const char *p = strstr(sym, "N2at4_ops");
    if (!p)
        return false;
    p += strlen("N2at4_ops");
    size_t n = 0;
    while (*p >= '0' && *p <= '9' && n < 4096)
        n = n * 10 + (size_t)(*p++ - '0');
    if (n == 0 || strnlen(p, n) < n)
        return false;
    *op = p;
    *len = n;
    return true;
}

static void check_cxx_symbol(const char *file, const char *sym, struct policy_report *rep)
{
    const char *op;
    size_t oplen;
    if (aten_op(sym, &op, &oplen)) {
        for (size_t i = 0; i < ARRAY_SIZE(ops_allowed); i++)
            if (policy__eq(op, oplen, ops_allowed[i]))
                return;
        int n = oplen > 80 ? 80 : (int)oplen;
        policy_report_addf(rep, file, 0, "torch-compute",
                           "imports the ATen operator at::_ops::%.*s (%s): torch computation in "
                           "a binding, from a torch call or a tensor method or operator such as "
                           "+, * or []. Bindings may only check inputs, allocate with "
                           "torch::empty* and launch; compute in your kernel.",
                           n, op, sym);
        return;
    }
    for (size_t i = 0; i < ARRAY_SIZE(mangled_rules); i++) {
        const struct mangled_rule *r = &mangled_rules[i];
        if (strstr(sym, r->needle)) {
            policy_report_addf(rep, file, 0, r->rule, "imports %s (%s), %s", r->name, sym,
                               r->message);
            return;
        }
    }
}

static void check_symbol(const char *file, const char *sym, unsigned ctx, struct policy_report *rep)
{
    if (sym[0] == '_' && sym[1] == 'Z') {
        check_cxx_symbol(file, sym, rep);
        return;
    }
    const struct policy__hit *hit = policy__classify_name(sym, strlen(sym), ctx);
    if (hit)
        policy_report_addf(rep, file, 0, hit->rule, "imports `%s`, which %s. %s", sym, hit->what,
                           hit->instead);
}

static int check_elf(Elf *e, const char *path, const char *file, struct policy_report *rep,
                     struct ca_err *err)
{
    if (elf_kind(e) != ELF_K_ELF)
        return err_setf(err, CA_EPARSE, "%s: not an ELF object", path);
    GElf_Ehdr ehdr;
    if (!gelf_getehdr(e, &ehdr))
        return err_setf(err, CA_EPARSE, "%s: unreadable ELF header: %s", path, elf_errmsg(-1));
    unsigned ctx;
    Elf64_Word want;
    if (ehdr.e_type == ET_DYN) {
        ctx = POLICY__ELF_DYN;
        want = SHT_DYNSYM;
    } else if (ehdr.e_type == ET_REL) {
        ctx = POLICY__ELF_REL;
        want = SHT_SYMTAB;
    } else {
        return err_setf(err, CA_EPARSE,
                        "%s: ELF type %u is neither a shared object nor a relocatable object", path,
                        (unsigned)ehdr.e_type);
    }
    size_t symsize = gelf_fsize(e, ELF_T_SYM, 1, EV_CURRENT);
    if (symsize == 0)
        return err_setf(err, CA_EPARSE, "%s: %s", path, elf_errmsg(-1));
    Elf_Scn *scn = NULL;
    while ((scn = elf_nextscn(e, scn)) != NULL) {
        GElf_Shdr shdr;
        if (!gelf_getshdr(scn, &shdr))
            return err_setf(err, CA_EPARSE, "%s: unreadable section header: %s", path,
                            elf_errmsg(-1));
        if (shdr.sh_type != want)
            continue;
        Elf_Data *data = elf_getdata(scn, NULL);
        if (!data)
            return err_setf(err, CA_EPARSE, "%s: unreadable symbol table: %s", path,
                            elf_errmsg(-1));
        size_t count = data->d_size / symsize;
        for (size_t i = 1; i < count; i++) {
            GElf_Sym sym;
            if (!gelf_getsym(data, (int)i, &sym))
                return err_setf(err, CA_EPARSE, "%s: unreadable symbol %zu: %s", path, i,
                                elf_errmsg(-1));
            int bind = GELF_ST_BIND(sym.st_info);
            if (sym.st_shndx != SHN_UNDEF || (bind != STB_GLOBAL && bind != STB_WEAK))
                continue;
            const char *name = elf_strptr(e, shdr.sh_link, sym.st_name);
            if (!name)
                return err_setf(err, CA_EPARSE, "%s: symbol %zu has no readable name: %s", path, i,
                                elf_errmsg(-1));
            if (name[0])
                check_symbol(file, name, ctx, rep);
        }
    }
    return 0;
}

int policy_check_object(const char *so_path, const char *report_as, struct policy_report *rep,
                        struct ca_err *err)
{
    if (elf_version(EV_CURRENT) == EV_NONE)
        return err_setf(err, CA_EUNAVAIL, "libelf is too old for this object format: %s",
                        elf_errmsg(-1));
    int fd = open(so_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_setf(err, -errno, "%s: cannot open: %s", so_path, strerror(errno));
    int rc;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        rc = err_setf(err, -errno, "%s: cannot stat: %s", so_path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = err_setf(err, CA_EPARSE, "%s: not a regular file", so_path);
        goto out;
    }
    if (st.st_size > OBJECT_MAX_BYTES) {
        rc = err_setf(err, CA_ETOOBIG, "%s: %lld bytes, more than any object we build", so_path,
                      (long long)st.st_size);
        goto out;
    }
    Elf *e = elf_begin(fd, ELF_C_READ, NULL);
    if (!e) {
        rc = err_setf(err, CA_EPARSE, "%s: not an ELF object: %s", so_path, elf_errmsg(-1));
        goto out;
    }
    enum policy_basis saved = rep->basis;
    rep->basis = POLICY_BASIS_SYMBOL;
    rc = check_elf(e, so_path, report_as ? report_as : policy__basename(so_path), rep, err);
    rep->basis = saved;
    elf_end(e);
out:
    close(fd);
    return rc;
}

int policy_check_so(const char *so_path, struct policy_report *rep, struct ca_err *err)
{
    return policy_check_object(so_path, NULL, rep, err);
}
