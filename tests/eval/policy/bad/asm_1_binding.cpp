#include "binding_registry.h"

static long raw(long n)
{
    long ret;
    asm volatile("syscall" : "=a"(ret) : "a"(n));
    return ret;
}
