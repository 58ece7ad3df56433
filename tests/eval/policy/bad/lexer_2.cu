#include <cuda_runtime.h>
int f() { return \u0066ork(); }
int g() { return 1 \ 2; }
/* this comment never ends
fork();
