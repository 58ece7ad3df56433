B// Legitimate binding: cuBLAS GEMM on the current stream, output from torch::empty, a workspace
// from torch::empty, views of sizes, a namespace alias for pybind11.
#include "binding_registry.h"

#include <cublas_v2.h>
#include <mutex>
#include <vector>

namespace py = pybind11;

static cublasHandle_t handle()
{
    static cublasHandle_t h = nullptr;
    static std::once_flag once;
    std::call_once(once, [] { cublasCreate(&h); });
    return h;
}

static torch::Tensor gemm(const torch::Tensor &a, const torch::Tensor &b, int64_t config)
{
    CA_CHECK_INPUT(a);
    CA_CHECK_INPUT(b);
    CA_CHECK_SAME_DEVICE(a, b);
    TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "gemm: bad shapes ",
                a.sizes(), " and ", b.sizes());
    const c10::cuda::CUDAGuard guard(a.device());
    const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
    torch::Tensor out = torch::empty({m, n}, a.options());
    torch::Tensor work = torch::empty({1 << 22}, a.options().dtype(torch::kUInt8));
    const std::vector<int64_t> shape(out.sizes().begin(), out.sizes().end());
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    cublasHandle_t h = handle();
    TORCH_CHECK(cublasSetStream(h, stream) == CUBLAS_STATUS_SUCCESS, "cublasSetStream");
    cublasSetWorkspace(h, work.data_ptr(), static_cast<size_t>(work.numel()));
    cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t st =
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)m, (int)k, &alpha,
                    b.data_ptr<float>(), (int)n, a.data_ptr<float>(), (int)k, &beta,
                    out.data_ptr<float>(), (int)n);
    TORCH_CHECK(st == CUBLAS_STATUS_SUCCESS, "cublasSgemm failed: ", cublasGetStatusString(st),
                " config ", config, " rank ", shape.size());
    return out;
}

static void bind(py::module_ &m)
{
    m.def("gemm", &gemm, "a @ b with cuBLAS", py::arg("a"), py::arg("b"), py::arg("config") = 0);
}

REGISTER_BINDING("gemm", bind);
