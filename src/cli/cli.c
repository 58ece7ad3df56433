/*
 * cli.c - option parsing from a table, help printing from the same table,
 * error-to-exit-code mapping. Accepts --name VALUE, --name=VALUE, -x VALUE;
 * "--" ends options. Unknown options are usage errors (exit 2), never
 * silently ignored.
 */
#include "cli/cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/limits.h"
#include "core/proc.h"
#include "core/sv.h"
#include "eval/gpupool.h"
#include "core/banned.h"

static const char *cmd_name(const struct cli_spec *spec, char *out, size_t n)
{
    /* "cuda-agent workspace create ..." -> "workspace create" */
    const char *u = spec->usage;
    if (strncmp(u, "cuda-agent ", 11) == 0)
        u += 11;
    size_t len = 0;
    /* Up to the first option, placeholder or argument; a '-' inside a word
     * ("candidate-sandbox") is part of the name. */
    for (const char *p = u; *p && *p != '[' && *p != '<' &&
                            !((*p == '-' || (*p >= 'A' && *p <= 'Z')) && (p == u || p[-1] == ' '));
         p++)
        len = (size_t)(p - u) + 1;
    while (len && u[len - 1] == ' ')
        len--;
    snprintf(out, n, "%.*s", (int)len, u);
    return out;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fputs("cuda-agent: error: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\ntry 'cuda-agent %s%s--help'\n", cmd ? cmd : "", cmd && *cmd ? " " : "");
    return CLI_USAGE;
}

void cli_print_help(const struct cli_spec *spec)
{
    printf("usage: %s\n\n%s\n", spec->usage, spec->summary);
    printf("\noptions:\n");
    for (const struct cli_opt *o = spec->opts; o && o->name; o++) {
        {
            char left[96], flag[4] = "   ";
            if (o->short_name)
                snprintf(flag, sizeof(flag), "-%c,", o->short_name);
            snprintf(left, sizeof(left), "%s --%s%s%s", flag, o->name, o->arg ? " " : "",
                     o->arg ? o->arg : "");
            printf("  %-28s %s\n", left, o->help);
        }
    }
    printf("  %-28s %s\n", "-h, --help", "show this help and exit");
    if (spec->description)
        printf("\n%s\n", spec->description);
}

static const struct cli_opt *find_long(const struct cli_opt *opts, struct sv name)
{
    for (const struct cli_opt *o = opts; o && o->name; o++)
        if (sv_eq_cstr(name, o->name))
            return o;
    return NULL;
}

static const struct cli_opt *find_short(const struct cli_opt *opts, char c)
{
    for (const struct cli_opt *o = opts; o && o->name; o++)
        if (o->short_name == c)
            return o;
    return NULL;
}

static int set_value(const struct cli_spec *spec, const struct cli_opt *o, const char *val)
{
    char cmd[64];
    switch (o->kind) {
    case CLI_OPT_FLAG:
        *(bool *)o->target = true;
        return 0;
    case CLI_OPT_STRING:
        *(const char **)o->target = val;
        return 0;
    case CLI_OPT_INT: {
        struct ca_err err = {0};
        char what[80];
        snprintf(what, sizeof(what), "--%s", o->name);
        if (sv_parse_range(sv_cstr(val), o->lo, o->hi, o->target, what, &err))
            return cli_usage_error(cmd_name(spec, cmd, sizeof(cmd)), "%s", err.msg);
        return 0;
    }
    }
    BUG("bad option kind %d", (int)o->kind);
}

int cli_parse(const struct cli_spec *spec, int argc, char **argv, char ***args, int *nargs)
{
    char cmd[64];
    cmd_name(spec, cmd, sizeof(cmd));
    char **pos = xcalloc((size_t)argc + 1, sizeof(*pos));
    int npos = 0;
    bool opts_done = false;
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (opts_done || a[0] != '-' || a[1] == '\0') {
            pos[npos++] = argv[i];
            continue;
        }
        if (strcmp(a, "--") == 0) {
            opts_done = true;
            continue;
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            cli_print_help(spec);
            free(pos);
            return -1;
        }
        const struct cli_opt *o;
        const char *val = NULL;
        if (a[1] == '-') {
            struct sv name = sv_cstr(a + 2);
            long eq = sv_find_ch(name, '=');
            if (eq >= 0) {
                val = a + 2 + eq + 1;
                name.len = (size_t)eq;
            }
            o = find_long(spec->opts, name);
            if (!o) {
                rc = cli_usage_error(cmd, "unknown option '--" SV_FMT "'", SV_ARG(name));
                goto out;
            }
            if (o->kind == CLI_OPT_FLAG && val) {
                rc = cli_usage_error(cmd, "option '--%s' takes no value", o->name);
                goto out;
            }
        } else {
            o = find_short(spec->opts, a[1]);
            if (!o || a[2] != '\0') {
                rc = cli_usage_error(cmd, "unknown option '%s'", a);
                goto out;
            }
        }
        if (o->kind != CLI_OPT_FLAG && !val) {
            if (i + 1 >= argc) {
                rc = cli_usage_error(cmd, "option '--%s' needs a value (%s)", o->name,
                                     o->arg ? o->arg : "VALUE");
                goto out;
            }
            val = argv[++i];
        }
        rc = set_value(spec, o, val);
        if (rc)
            goto out;
    }
    if (npos < spec->min_args) {
        rc = cli_usage_error(cmd, "missing argument%s (usage: %s)",
                             spec->min_args - npos > 1 ? "s" : "", spec->usage);
        goto out;
    }
    if (spec->max_args >= 0 && npos > spec->max_args) {
        rc = cli_usage_error(cmd, "unexpected argument '%s' (usage: %s)", pos[spec->max_args],
                             spec->usage);
        goto out;
    }
    *args = pos;
    *nargs = npos;
    return 0;
out:
    free(pos);
    return rc;
}

bool cli_parse_cmd(const struct cli_spec *spec, int argc, char **argv, char ***args, int *nargs,
                   int *rc)
{
    char **pos;
    int npos;
    *rc = cli_parse(spec, argc, argv, &pos, &npos);
    if (*rc) {
        *rc = *rc < 0 ? CLI_OK : *rc;
        return false;
    }
    if (args) {
        *args = pos;
        *nargs = npos;
    } else {
        free(pos);
    }
    return true;
}

int cli_exit_code(int code)
{
    switch (code) {
    case 0:
        return CLI_OK;
    case CA_EUSAGE:
        return CLI_USAGE;
    case CA_EPARSE:
    case CA_EUTF8:
    case CA_ETOOBIG:
    case CA_EDUP:
    case CA_EESCAPE:
        return CLI_INVALID;
    case CA_ENOTFOUND:
    case CA_EAMBIGUOUS:
    case -ENOENT:
        return CLI_NOTFOUND;
    case CA_EUNAVAIL:
        return CLI_UNAVAIL;
    default:
        return CLI_FAILED;
    }
}

int cli_fail(const struct ca_err *err)
{
    fprintf(stderr, "cuda-agent: error: %s\n", err->msg[0] ? err->msg : ca_strerror(err->code));
    return cli_exit_code(err->code);
}

bool cli_stdout_tty(void)
{
    return isatty(1);
}

int cli_dispatch(const char *cmd, const struct cli_sub *subs, size_t nsubs, int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: cuda-agent %s <subcommand> [options]\n\nsubcommands:\n", cmd);
        for (size_t i = 0; i < nsubs; i++)
            printf("  %-8s %s\n", subs[i].name, subs[i].summary);
        printf("\n'cuda-agent %s <subcommand> --help' for details.\n", cmd);
        return CLI_OK;
    }
    if (argc < 2)
        return cli_usage_error(cmd, "missing subcommand");
    for (size_t i = 0; i < nsubs; i++)
        if (strcmp(argv[1], subs[i].name) == 0)
            return subs[i].fn(argc - 1, argv + 1);
    return cli_usage_error(cmd, "unknown subcommand '%s'", argv[1]);
}

void cli_print_json(const json_t *v)
{
    /* Six significant digits: what people and models read (7.295, not 7.2949999999999999);
     * files written for programs keep every digit (jsonx_dump). */
    char *s = json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    if (s)
        printf("%s\n", s);
    free(s);
}

/* "0,1,3" -> list (heap strings; *n entries). */
int cli_split_list(const char *s, char ***out, size_t *n)
{
    char *copy = xstrdup(s);
    char **v = NULL;
    size_t k = 0, cap = 0;
    for (char *p = copy, *tok; (tok = strsep(&p, ",")) != NULL;) {
        if (!*tok)
            continue;
        if (k == GPUPOOL_MAX_RUNNERS) {
            free(copy);
            for (size_t i = 0; i < k; i++)
                free(v[i]);
            free(v);
            return -1;
        }
        ALLOC_GROW(v, k + 1, cap);
        v[k++] = xstrdup(tok);
    }
    free(copy);
    *out = v;
    *n = k;
    return 0;
}

/* The GPUs to serve: CUDA_VISIBLE_DEVICES if set, else the indices nvidia-smi lists. */
void cli_detect_gpus(char ***out, size_t *n)
{
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (vis && *vis && cli_split_list(vis, out, n) == 0 && *n)
        return;
    const char *argv[] = {"nvidia-smi", "--query-gpu=index", "--format=csv,noheader", NULL};
    struct proc_opts po = {.argv = argv, .timeout_ms = 20000, .out_max = 16 * CA_KIB};
    struct proc_result r;
    proc_result_init(&r);
    struct ca_err err;
    *n = 0;
    if (proc_run(&po, &r, &err) == 0 && proc_ok(&r)) {
        for (char *p = r.out.data; *p; p++)
            if (*p == '\n' || *p == ' ')
                *p = ',';
        if (cli_split_list(r.out.data, out, n))
            *n = 0;
    }
    proc_result_release(&r);
}

static volatile sig_atomic_t cli_stop;

static void cli_on_stop_signal(int sig)
{
    (void)sig;
    cli_stop = 1;
}

volatile sig_atomic_t *cli_stop_on_signals(void)
{
    struct sigaction sa = {.sa_handler = cli_on_stop_signal};
    /* sigaction fails only for an invalid signal or handler: neither here. */
    (void)sigaction(SIGINT, &sa, NULL);
    (void)sigaction(SIGTERM, &sa, NULL);
    (void)signal(SIGPIPE, SIG_IGN); /* SIG_ERR only for an invalid signal */
    return &cli_stop;
}

int cli_host_setup(const char *cmd, struct cli_host *h, bool no_runners)
{
    struct evald_opts *eo = h->eo;
    const char *dev = eo->base.device;
    if (dev && strcmp(dev, "cuda") && strcmp(dev, "cpu"))
        return cli_usage_error(cmd, "--device must be cuda or cpu");
    h->cpu = dev && strcmp(dev, "cpu") == 0;
    if (h->gpus && h->cpu)
        return cli_usage_error(cmd, "--gpus needs --device cuda");
    if (h->runners && !h->cpu)
        return cli_usage_error(cmd, "--runners is for --device cpu; use --gpus");
    size_t runners = 0;
    if (no_runners)
        ;
    else if (h->cpu)
        runners = h->runners ? (size_t)h->runners : 1;
    else if (h->gpus && (cli_split_list(h->gpus, &h->list, &h->n) || h->n == 0))
        return cli_usage_error(cmd, "--gpus wants a list such as 0,1 (at most %d)",
                               GPUPOOL_MAX_RUNNERS);
    else if (!h->gpus)
        cli_detect_gpus(&h->list, &h->n);
    eo->gpus = (const char *const *)h->list;
    eo->n_gpus = h->list ? h->n : runners;
    if (eo->n_gpus == 0)
        eo->n_gpus = 1;
    /* A warm evaluation takes well under a second on a GPU while a fresh candidate needs
     * several (Python, torch, CUDA context, profiler): enough must wait in line. */
    eo->prewarm = h->prewarm >= 0 ? (int)h->prewarm : h->cpu ? 1 : 8;
    return 0;
}

void cli_host_release(struct cli_host *h)
{
    for (size_t i = 0; i < h->n && h->list; i++)
        free(h->list[i]);
    FREE_AND_NULL(h->list);
    h->n = 0;
}
