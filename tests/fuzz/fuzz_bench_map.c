/* libFuzzer target: `bench run --map` on arbitrary bytes, as a JSONL map over the bench CPU
 * fixture's tasks and as a leaderboard data.json, into an in-memory run store. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <jansson.h>

#include "bench/bench.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char dir[] = "/tmp/fuzz-bench-XXXXXX";
    static char map[64], files[64];
    if (!map[0]) {
        if (!mkdtemp(dir))
            abort();
        snprintf(map, sizeof(map), "%s/map.jsonl", dir);
        snprintf(files, sizeof(files), "%s/files", dir);
    }
    FILE *f = fopen(map, "wb");
    if (!f)
        abort();
    if (size)
        fwrite(data, 1, size, f);
    fclose(f);
    json_t *cfg = json_pack("{s:s}", "mode", "map");
    struct bench_store *s = NULL;
    struct ca_err err;
    if (bench_store_open(":memory:", cfg, &s, &err))
        abort();
    const char *repo = getenv("CA_REPO");
    char tasks[512];
    snprintf(tasks, sizeof(tasks), "%s/tests/bench/cpu/tasks", repo ? repo : ".");
    for (int with_tasks = 0; with_tasks < 2; with_tasks++) {
        struct bench_plan_opts o = {
            .tasks_source = with_tasks ? tasks : NULL, .map = map, .files_dir = files};
        struct bench_plan p;
        if (bench_plan_build(&o, s, &p, &err) == 0)
            bench_plan_release(&p);
    }
    bench_store_free(s);
    json_decref(cfg);
    return 0;
}
