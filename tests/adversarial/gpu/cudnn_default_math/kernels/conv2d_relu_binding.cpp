/*
 * conv2d_relu_binding.cpp: cuda_extension.conv2d_relu(x, weight, bias, pad, config=0), for the
 * GPU candidate "legit_cudnn_conv_relu" (tests/adversarial/README.md).
 *
 * relu(conv2d(x, weight, bias, stride 1, padding pad)) for NCHW float32 tensors. The launcher
 * (kernels/conv2d_relu.cu) says how much scratch memory cuDNN needs; the binding allocates it
 * with torch::empty (device memory comes only from PyTorch's allocator) and the output.
 */
#include "binding_registry.h"

extern "C" const char *conv2d_relu_workspace(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k,
                                             int64_t r, int64_t s, int64_t pad, int config,
                                             size_t *bytes);
extern "C" const char *conv2d_relu_launch(const float *x, const float *weight, const float *bias,
                                          float *out, void *workspace, size_t workspace_bytes,
                                          int64_t n, int64_t c, int64_t h, int64_t w, int64_t k,
                                          int64_t r, int64_t s, int64_t pad, int config,
                                          cudaStream_t stream);

static torch::Tensor conv2d_relu(const torch::Tensor &x, const torch::Tensor &weight,
                                 const torch::Tensor &bias, int64_t pad, int64_t config)
{
    CA_CHECK_INPUT(x);
    CA_CHECK_INPUT(weight);
    CA_CHECK_INPUT(bias);
    CA_CHECK_SAME_DEVICE(x, weight);
    CA_CHECK_SAME_DEVICE(x, bias);
    TORCH_CHECK(x.dim() == 4 && weight.dim() == 4 && bias.dim() == 1 &&
                    weight.size(1) == x.size(1) && bias.size(0) == weight.size(0) && pad >= 0,
                "conv2d_relu: expected x [N, C, H, W], weight [K, C, R, S], bias [K] and pad >= "
                "0, got ",
                x.sizes(), ", ", weight.sizes(), ", ", bias.sizes(), " and ", pad);
    const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
    const int64_t k = weight.size(0), r = weight.size(2), s = weight.size(3);
    const int64_t ho = h + 2 * pad - r + 1, wo = w + 2 * pad - s + 1;
    TORCH_CHECK(ho > 0 && wo > 0, "conv2d_relu: the kernel is larger than the padded input");

    const c10::cuda::CUDAGuard guard(x.device());
    size_t ws_bytes = 0;
    const char *e =
        conv2d_relu_workspace(n, c, h, w, k, r, s, pad, static_cast<int>(config), &ws_bytes);
    TORCH_CHECK(e == nullptr, "conv2d_relu_workspace: ", e ? e : "");
    torch::Tensor workspace = torch::empty({static_cast<int64_t>(ws_bytes > 0 ? ws_bytes : 1)},
                                           x.options().dtype(torch::kUInt8));
    torch::Tensor out = torch::empty({n, k, ho, wo}, x.options());
    e = conv2d_relu_launch(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
                           out.data_ptr<float>(), workspace.data_ptr(), ws_bytes, n, c, h, w, k, r,
                           s, pad, static_cast<int>(config), at::cuda::getCurrentCUDAStream());
    TORCH_CHECK(e == nullptr, "conv2d_relu_launch: ", e ? e : "");
    return out;
}

static void bind(pybind11::module_ &m)
{
    m.def("conv2d_relu", &conv2d_relu, "relu(conv2d(x, weight, bias, padding=pad))",
          pybind11::arg("x"), pybind11::arg("weight"), pybind11::arg("bias"), pybind11::arg("pad"),
          pybind11::arg("config") = 0);
}

REGISTER_BINDING("conv2d_relu", bind);
