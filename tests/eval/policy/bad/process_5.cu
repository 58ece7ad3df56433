#include <cuda_runtime.h>
extern "C" int launch(int pid)
{
    // a comment ends at a lone carriage returnkill(pid, 9);
    return 0;
}
