/*
 * binding_registry.h: lets every kernels/NAME_binding.cpp add functions to the one Python module
 * `cuda_extension` that the workspace builds (read-only infrastructure; do not edit).
 *
 * Each binding translation unit defines a `void fn(pybind11::module_ &m)` that calls m.def(...)
 * and registers it with REGISTER_BINDING("python_name", fn). The registrar is a static object,
 * so registration happens while the shared library is loaded, before binding.cpp's
 * PYBIND11_MODULE body runs and walks the registry. The registry lives in a function-local
 * static so that it exists before the first registrar needs it, whatever order the translation
 * units are initialised in. Registration happens on the loading thread only; nothing here is
 * meant to be called after import.
 *
 * The helpers at the bottom are for bindings: turn a cudaError_t from a launcher into a Python
 * exception that names the failing call, and check input tensors before taking data_ptr().
 */
#pragma once

#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <vector>

namespace cuda_agent {

using BindingFn = void (*)(pybind11::module_ &);

struct BindingEntry {
    const char *name; /* the Python function the binding defines; must be unique */
    BindingFn fn;
};

inline std::vector<BindingEntry> &binding_registry()
{
    static std::vector<BindingEntry> registry;
    return registry;
}

struct BindingRegistrar {
    BindingRegistrar(const char *name, BindingFn fn)
    {
        binding_registry().push_back(BindingEntry{name, fn});
    }
};

} // namespace cuda_agent

#define CA_CONCAT_INNER_(a, b) a##b
#define CA_CONCAT_(a, b) CA_CONCAT_INNER_(a, b)

/*
 * REGISTER_BINDING("name", fn): fn(m) must define the Python function `name` in the module
 * (it may define more). Names must be unique across all bindings; binding.cpp refuses
 * duplicates at import time. Use it at namespace scope, once per name.
 */
#define REGISTER_BINDING(name, fn)                                                                 \
    static const ::cuda_agent::BindingRegistrar CA_CONCAT_(ca_binding_registrar_, __COUNTER__)(    \
        (name), (fn))

/*
 * CA_CHECK_CUDA(expr): evaluate a cudaError_t expression (a launcher call, a CUDA runtime call)
 * and raise a Python RuntimeError naming the call and the CUDA error if it is not cudaSuccess.
 */
#define CA_CHECK_CUDA(expr)                                                                        \
    do {                                                                                           \
        const cudaError_t ca_check_err_ = (expr);                                                  \
        TORCH_CHECK(ca_check_err_ == cudaSuccess, #expr, " failed: ",                              \
                    cudaGetErrorName(ca_check_err_), ": ", cudaGetErrorString(ca_check_err_),      \
                    " (", __FILE__, ":", __LINE__, ")");                                           \
    } while (0)

/*
 * CA_CHECK_CUBLAS(expr) / CA_CHECK_CUDNN(expr): the same for a cublasStatus_t or a
 * cudnnStatus_t expression. Macros, so this header needs neither library: include
 * <cublas_v2.h> or <cudnn.h> before using one.
 */
#define CA_CHECK_CUBLAS(expr)                                                                      \
    do {                                                                                           \
        const cublasStatus_t ca_check_st_ = (expr);                                                \
        TORCH_CHECK(ca_check_st_ == CUBLAS_STATUS_SUCCESS, #expr, " failed: ",                     \
                    cublasGetStatusName(ca_check_st_), ": ", cublasGetStatusString(ca_check_st_), \
                    " (", __FILE__, ":", __LINE__, ")");                                           \
    } while (0)
#define CA_CHECK_CUDNN(expr)                                                                       \
    do {                                                                                           \
        const cudnnStatus_t ca_check_st_ = (expr);                                                 \
        TORCH_CHECK(ca_check_st_ == CUDNN_STATUS_SUCCESS, #expr, " failed: ",                      \
                    cudnnGetErrorString(ca_check_st_), " (", __FILE__, ":", __LINE__, ")");        \
    } while (0)

/* Input checks for bindings. They fail with a message naming the argument; they never copy. */
#define CA_CHECK_CUDA_TENSOR(x)                                                                    \
    TORCH_CHECK((x).is_cuda(), #x " must be a CUDA tensor, got one on ", (x).device())
#define CA_CHECK_CONTIGUOUS(x)                                                                     \
    TORCH_CHECK((x).is_contiguous(), #x " must be contiguous (sizes ", (x).sizes(),               \
                ", strides ", (x).strides(), ")")
#define CA_CHECK_FLOAT32(x)                                                                        \
    TORCH_CHECK((x).scalar_type() == torch::kFloat32, #x " must be float32, got ",               \
                (x).scalar_type())
#define CA_CHECK_INPUT(x)                                                                          \
    do {                                                                                           \
        CA_CHECK_CUDA_TENSOR(x);                                                                   \
        CA_CHECK_CONTIGUOUS(x);                                                                    \
        CA_CHECK_FLOAT32(x);                                                                       \
    } while (0)
#define CA_CHECK_SAME_DEVICE(x, y)                                                                 \
    TORCH_CHECK((x).device() == (y).device(), #x " and " #y " must be on the same device, got ",  \
                (x).device(), " and ", (y).device())
