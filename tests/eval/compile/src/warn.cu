/* Test fixture: compiles, with a warning (an unused variable). */
__global__ void k(float *x)
{
    int unused = 3;
    x[threadIdx.x] = 1.0f;
}
