/*
 * cpuplan.h - which CPU cores do what on an evaluator host (issue 21).
 *
 * A GPU runner's timing is host-bound for small kernels (launch latency, torch.compile's
 * guards, the spin in cudaDeviceSynchronize): a compiler on the same core shows up in the
 * timing. The plan reserves a few physical cores per GPU runner (its timing thread, its
 * candidate's, and their hyperthread siblings) and leaves the rest to the compile pool,
 * candidate pre-warming and the evaluator's own threads:
 *
 *   cpuplan_split()      the arithmetic, pure (tests drive it with made-up hosts);
 *   cpuplan_from_host()  the host's allowed CPUs (sched_getaffinity) and their physical
 *                        cores (/sys/devices/system/cpu/cpuN/topology), then cpuplan_split
 *                        or an explicit split from a spec (option or CUDA_AGENT_CPU_SPLIT).
 *
 * Affinity only (sched_setaffinity): works unprivileged everywhere; a cgroup cpuset would
 * also keep processes we did not start off the cores, but is not required.
 *
 * Compile placement is frozen process-wide config, set once before the first build
 * (cpuplan_compile_config): every compiler the compile pool starts runs with the compile
 * cores as its affinity and at the given nice value, inherited from the thread that starts
 * it (cpuplan_place_thread; compile.c runs compilers only from placed threads). The timing
 * window counters are the one piece of shared mutable state: GPU runners mark a timed
 * section open or closed (cpuplan_timing_mark, from the pool's threads) and the compile pool
 * waits before starting a compiler while one is open, at most defer_ms per compiler run
 * (cpuplan_defer_compile). All functions are thread-safe.
 */
#ifndef CA_CPUPLAN_H
#define CA_CPUPLAN_H

#include <jansson.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define CPUPLAN_MAX_RUNNERS 64
/* Compile jobs' nice value in the evaluator service (CUDA_AGENT_COMPILE_NICE overrides). */
#define CPUPLAN_COMPILE_NICE 10
/* The longest a compiler run waits for open timing windows (CUDA_AGENT_COMPILE_DEFER_MS). */
#define CPUPLAN_DEFER_MS 1000

struct cpuplan {
    size_t nrunners;
    bool isolated;                         /* false: every process may use every CPU */
    cpu_set_t runner[CPUPLAN_MAX_RUNNERS]; /* each runner's timing cores */
    cpu_set_t compile;                     /* compile pool, pre-warming, the evaluator */
    char why[192];                         /* how the split was chosen (for logs, status) */
};

/*
 * The default split of ncpus CPUs (cpus[i], with core[i] the physical core it belongs to:
 * hyperthread siblings share one) among nrunners runners: per_runner physical cores each
 * (<= 0: automatic, 2 where the host has at least 6 cores per runner, else 1), taken from the
 * highest-numbered cores down (core 0 takes the interrupts on many hosts), runner 0 first; the
 * rest for the compile pool. Not isolated (every set = all CPUs) when the compile pool would
 * keep less than half of the physical cores. CA_EUSAGE for no CPUs, no runners or more than
 * CPUPLAN_MAX_RUNNERS.
 */
int cpuplan_split(const int *cpus, const int *core, size_t ncpus, size_t nrunners, int per_runner,
                  struct cpuplan *out, struct ca_err *err) WARN_UNUSED_RESULT;

/*
 * The plan for this host. spec (NULL: $CUDA_AGENT_CPU_SPLIT, else "auto"): "auto"; "off" (no
 * isolation); "N" (N physical cores per runner); or "T0/T1/...:C", kernel CPU lists of each
 * runner's timing cores and of the compile cores ("15/14:0-13"; one list per runner, disjoint
 * from C, all within this process's affinity). CA_EUSAGE for a bad spec (naming it).
 */
int cpuplan_from_host(size_t nrunners, const char *spec, struct cpuplan *out,
                      struct ca_err *err) WARN_UNUSED_RESULT;

/* A kernel CPU list ("0-3,6") of set into buf; "" for an empty set. */
void cpuplan_format(const cpu_set_t *set, char *buf, size_t size);
/* Parses a kernel CPU list; CA_EUSAGE when it is not one. */
int cpuplan_parse_list(const char *text, cpu_set_t *set, struct ca_err *err) WARN_UNUSED_RESULT;

/* {"isolated", "why", "compile": LIST, "runners": [LIST...]}: a new object. */
json_t *cpuplan_to_json(const struct cpuplan *plan);

/*
 * Frozen config for the compile pool, set once before any build: cpus (NULL: leave the
 * affinity alone), nice (0: leave it), defer_ms (the longest a compiler run waits for open
 * timing windows; 0: never waits).
 */
void cpuplan_compile_config(const cpu_set_t *cpus, int nice, int64_t defer_ms);
/* True when compile placement is configured and the calling thread does not have it yet. */
bool cpuplan_thread_unplaced(void);
/* Gives the calling thread the compile affinity and nice value (once; children inherit
 * them). 0, or -errno of the first call that failed (the thread then runs as it was). */
int cpuplan_place_thread(void);

/* Runner i's timed section opened (on) or closed. Idempotent per runner. */
void cpuplan_timing_mark(size_t runner, bool on);
/* Number of timed sections open now. */
int cpuplan_timing_open(void);
/* Waits while a timed section is open, at most the configured defer_ms; returns the ms it
 * waited. */
int64_t cpuplan_defer_compile(void);

#endif
