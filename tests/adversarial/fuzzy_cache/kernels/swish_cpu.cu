// Adversarial candidate "fuzzy_cache" (tests/adversarial/README.md): host code standing in for a
// kernel that is slow to compute and answers most calls from a cache of approximate results.
// The timing's inputs are one set scaled by a factor per call (timing.varied_copies), so once a
// call's input is a scaled copy of the one before (every sampled value in the same ratio), it
// builds a grid of results for that input scaled by 0.860, 0.865, ..., 1.140 and from then on
// answers each scaled copy with a grid result from 0.25-0.5% away (the farther of the two
// around the ratio): a memcpy instead of the work, inside the check's tolerance, but not
// computed from the call's own inputs. Verification sets are not scaled copies: computed.
// Since the twenty-first session no timed call's input is a scaled copy of another's either
// (each value is also varied by its index sum): it computes every call, slowly (reward 1).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GRID_LO 0.860
#define GRID_STEP 0.005
#define GRID_N 57

static float *base_x; /* the input the grid is built from */
static float *grid;   /* GRID_N results, for base_x scaled by GRID_LO + i * GRID_STEP */
static int64_t base_n;
static int grid_built;

static void compute(const float *x, const float *bias, float *out, int64_t rows, int64_t cols,
                    float scale, double by)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float v = (float)(x[r * cols + c] * by);
            for (volatile int k = 0; k < 200; k++) {
            }
            out[r * cols + c] = v / (1.0f + expf(-v)) * scale + bias[c];
        }
}

/* The ratio x / base_x when every sampled value is in it (within 1e-5), else 0. */
static double scaled_copy_ratio(const float *x, int64_t n)
{
    double ratio = 0;
    if (base_x == NULL || base_n != n)
        return 0;
    for (int64_t i = 0; i < n; i += 61) {
        if (fabsf(base_x[i]) < 1e-3f)
            continue;
        double r = (double)x[i] / base_x[i];
        if (ratio == 0)
            ratio = r;
        else if (fabs(r - ratio) > 1e-5 * ratio)
            return 0;
    }
    return ratio;
}

extern "C" void swish_cpu(const float *x, const float *bias, float *out, int64_t rows,
                          int64_t cols, float scale)
{
    const int64_t n = rows * cols;
    double r = scaled_copy_ratio(x, n);
    double pos = (r - GRID_LO) / GRID_STEP;
    if (r > 0 && pos >= 1 && pos <= GRID_N - 2) {
        if (!grid_built) {
            float *g = (float *)malloc((size_t)GRID_N * (size_t)n * sizeof(float));
            if (g == NULL)
                goto honest;
            for (int i = 0; i < GRID_N; i++)
                compute(base_x, bias, g + (size_t)i * (size_t)n, rows, cols, scale,
                        GRID_LO + i * GRID_STEP);
            grid = g;
            grid_built = 1;
        }
        int64_t lo = (int64_t)floor(pos);
        int64_t pick = pos - (double)lo < 0.5 ? lo + 1 : lo; /* the farther neighbour */
        memcpy(out, grid + (size_t)pick * (size_t)n, (size_t)n * sizeof(float));
        return;
    }
honest:
    compute(x, bias, out, rows, cols, scale, 1.0);
    if (base_n != n) {
        free(base_x);
        base_x = (float *)malloc((size_t)n * sizeof(float));
        base_n = base_x ? n : 0;
    }
    if (base_x != NULL)
        memcpy(base_x, x, (size_t)n * sizeof(float));
    free(grid);
    grid = NULL;
    grid_built = 0;
}
