/*
 * policy_names.c - the rules on C-level names, shared by the source check (policy_src.c) and the
 * object check (policy_elf.c): policy__classify_name().
 *
 * Name rules are a table of exact names and prefixes, each with the contexts it applies in, plus
 * a few family rules that are easier said as code (cuBLAS: GEMM only; cuDNN: convolutions only;
 * the driver API; the Python C API). Tables are small and searched linearly: a source has at
 * most a few thousand distinct identifiers, and the check is dwarfed by compiling it.
 */
#include <stdbool.h>
#include <string.h>

#include "core/util.h"
#include "eval/policy_internal.h"
#include "core/banned.h"

/* ---- why names are refused ---- */

#define JUST_COMPUTE                                                                               \
    "Kernels and bindings may only compute on the tensors they are given: remove it."

static const struct policy__hit hit_process = {"process", "starts, signals or controls a process",
                                               JUST_COMPUTE};
static const struct policy__hit hit_syscall = {"process", "makes raw system calls", JUST_COMPUTE};
static const struct policy__hit hit_signal = {"process", "handles, sends or schedules signals",
                                              JUST_COMPUTE};
static const struct policy__hit hit_thread = {
    "thread", "starts a thread",
    "All work must happen inside the call, on the GPU stream the binding passes: remove it."};
static const struct policy__hit hit_file = {
    "file", "opens, creates or maps files or file descriptors",
    "Kernels and bindings get their data only as tensors: remove it."};
static const struct policy__hit hit_network = {"network", "uses the network", JUST_COMPUTE};
static const struct policy__hit hit_dlopen = {
    "dlopen", "loads code or looks up symbols at run time",
    "Call only functions you write and the allowed CUDA runtime, cuBLAS and cuDNN functions, by "
    "name."};
static const struct policy__hit hit_env = {
    "env", "reads or changes environment variables",
    "Take every setting as an argument (the launcher's `int config` is there for tuning)."};

#define USE_CURRENT_STREAM                                                                         \
    "Prefer the stream the binding passes (at::cuda::getCurrentCUDAStream()); the evaluator "      \
    "orders the legacy default stream with it and times work on every stream, so this is a note, " \
    "not a violation."
static const struct policy__hit hit_stream_create = {"stream", "creates or destroys a CUDA stream",
                                                     USE_CURRENT_STREAM};
static const struct policy__hit hit_stream_other = {
    "stream", "puts work on a stream other than the current one", USE_CURRENT_STREAM};
static const struct policy__hit hit_stream_torch = {
    "stream", "takes or installs a PyTorch stream other than the current one", USE_CURRENT_STREAM};
static const struct policy__hit hit_stream_sync = {
    "stream", "is a synchronous copy or memset, which runs on the legacy default stream",
    "Use the ...Async form (cudaMemcpyAsync, cudaMemsetAsync, cudaMemcpyToSymbolAsync) with the "
    "stream the binding passes, or do it in a kernel."};
static const struct policy__hit hit_stream_host = {
    "thread", "runs host code on a driver thread from a stream callback",
    "Everything must be done when the call returns: remove it."};
static const struct policy__hit hit_stream_attr = {
    "device", "changes stream attributes (such as L2 persistence) that outlive the call",
    "Leave stream and cache settings to the evaluator: remove it."};

#define USE_TORCH_EMPTY                                                                            \
    "Allocate outputs and scratch buffers in the binding with torch::empty, torch::empty_like or " \
    "torch::empty_strided and pass their data_ptr() to the launcher."
static const struct policy__hit hit_memory = {
    "memory", "allocates or frees device or pinned memory outside PyTorch's allocator",
    USE_TORCH_EMPTY};
static const struct policy__hit hit_memory_managed = {"memory", "declares managed (unified) memory",
                                                      USE_TORCH_EMPTY};
static const struct policy__hit hit_memory_ipc = {"memory", "shares memory with other processes",
                                                  JUST_COMPUTE};
static const struct policy__hit hit_memory_alias = {
    "memory", "makes a tensor over memory that already exists",
    "Every output must be fresh memory: allocate it with torch::empty, torch::empty_like or "
    "torch::empty_strided."};

static const struct policy__hit hit_device = {
    "device", "changes process-wide device state (current device, limits, caches, profiler)",
    "Leave device settings to the evaluator; the binding's c10::cuda::CUDAGuard selects the "
    "inputs' device."};

static const struct policy__hit hit_python_capi = {
    "python", "is the Python C API",
    "Bindings take and return tensors through pybind11 only: m.def(\"name\", &fn, "
    "pybind11::arg(\"x\"), ...)."};
static const struct policy__hit hit_python_pybind = {
    "python", "reaches Python objects or code through pybind11",
    "Bindings use pybind11 only to define functions: m.def(\"name\", &fn, pybind11::arg(\"x\"), "
    "...)."};
static const struct policy__hit hit_python_module = {
    "python", "defines a Python module",
    "binding.cpp defines the one module, cuda_extension; register your function with "
    "REGISTER_BINDING(\"name\", fn) where fn calls m.def."};

static const struct policy__hit hit_cublas = {
    "library", "is a cuBLAS routine other than a matrix product",
    "cuBLAS is allowed for GEMM only (cublas*gemm*, cublasLt*, and handle, stream, math-mode and "
    "workspace set-up): write this operation as a kernel."};
static const struct policy__hit hit_cublasxt = {
    "library", "is cuBLASXt (host memory, several GPUs)",
    "Call cublas*gemm* or cublasLtMatmul on device pointers, on the stream the binding passes."};
static const struct policy__hit hit_cudnn = {
    "library", "is a cuDNN routine outside convolutions",
    "cuDNN is allowed for convolutions only (cudnnConvolution*, "
    "cudnnConvolutionBiasActivationForward, their tensor, filter, convolution and activation "
    "descriptors, handle and stream set-up): write this operation as a kernel."};
static const struct policy__hit hit_driver = {
    "library", "is the CUDA driver API",
    "Use the CUDA runtime API; of the driver API only cuTensorMapEncode*, "
    "cuTensorMapReplaceAddress, cuGetErrorName/cuGetErrorString and cuDriverGetVersion are "
    "allowed."};
static const struct policy__hit hit_other_lib = {
    "library", "belongs to a library other than cuBLAS and cuDNN",
    "Only cuBLAS (matrix products) and cuDNN (convolutions) may be used: write this part as a "
    "kernel."};
static const struct policy__hit hit_lib_log = {"file", "makes a library write log files",
                                               "Leave logging to the evaluator: remove it."};

enum name_match { EXACT, PREFIX };

static const struct name_rule {
    const char *name;
    enum name_match match;
    unsigned ctx;
    const struct policy__hit *hit;
} name_rules[] = {
    /* processes */
    {"fork", EXACT, POLICY__ALL, &hit_process},
    {"vfork", EXACT, POLICY__ALL, &hit_process},
    {"_Fork", EXACT, POLICY__ALL, &hit_process},
    {"clone", EXACT, POLICY__ALL, &hit_process},
    {"clone3", EXACT, POLICY__ALL, &hit_process},
    {"__clone", EXACT, POLICY__ALL, &hit_process},
    {"exec", PREFIX, POLICY__ELF, &hit_process}, /* execve, execvp, execl, ... */
    {"execve", EXACT, POLICY__SRC, &hit_process},
    {"execveat", EXACT, POLICY__SRC, &hit_process},
    {"execv", EXACT, POLICY__SRC, &hit_process},
    {"execvp", EXACT, POLICY__SRC, &hit_process},
    {"execvpe", EXACT, POLICY__SRC, &hit_process},
    {"execl", EXACT, POLICY__SRC, &hit_process},
    {"execlp", EXACT, POLICY__SRC, &hit_process},
    {"execle", EXACT, POLICY__SRC, &hit_process},
    {"fexecve", EXACT, POLICY__ALL, &hit_process},
    {"system", EXACT, POLICY__ALL, &hit_process},
    {"__libc_system", EXACT, POLICY__ALL, &hit_process},
    {"popen", EXACT, POLICY__ALL, &hit_process},
    {"pclose", EXACT, POLICY__ALL, &hit_process},
    {"posix_spawn", PREFIX, POLICY__ALL, &hit_process},
    {"daemon", EXACT, POLICY__ALL, &hit_process},
    {"ptrace", EXACT, POLICY__ALL, &hit_process},
    {"prctl", EXACT, POLICY__ALL, &hit_process},
    {"waitpid", EXACT, POLICY__ALL, &hit_process},
    {"wait3", EXACT, POLICY__ALL, &hit_process},
    {"wait4", EXACT, POLICY__ALL, &hit_process},
    {"waitid", EXACT, POLICY__ALL, &hit_process},
    {"pidfd_", PREFIX, POLICY__ALL, &hit_process},
    {"process_vm_readv", EXACT, POLICY__ALL, &hit_process},
    {"process_vm_writev", EXACT, POLICY__ALL, &hit_process},
    {"setrlimit", EXACT, POLICY__ALL, &hit_process},
    {"prlimit", EXACT, POLICY__ALL, &hit_process},
    {"prlimit64", EXACT, POLICY__ALL, &hit_process},
    {"unshare", EXACT, POLICY__ALL, &hit_process},
    {"setns", EXACT, POLICY__ALL, &hit_process},
    {"chroot", EXACT, POLICY__ALL, &hit_process},
    {"pivot_root", EXACT, POLICY__ALL, &hit_process},
    {"mount", EXACT, POLICY__ALL, &hit_process},
    {"umount", EXACT, POLICY__ALL, &hit_process},
    {"umount2", EXACT, POLICY__ALL, &hit_process},
    {"seccomp", EXACT, POLICY__ALL, &hit_process},
    {"personality", EXACT, POLICY__ALL, &hit_process},
    {"setuid", EXACT, POLICY__ALL, &hit_process},
    {"setgid", EXACT, POLICY__ALL, &hit_process},
    {"seteuid", EXACT, POLICY__ALL, &hit_process},
    {"setegid", EXACT, POLICY__ALL, &hit_process},
    {"setreuid", EXACT, POLICY__ALL, &hit_process},
    {"setregid", EXACT, POLICY__ALL, &hit_process},
    {"setresuid", EXACT, POLICY__ALL, &hit_process},
    {"setresgid", EXACT, POLICY__ALL, &hit_process},
    {"syscall", EXACT, POLICY__ALL, &hit_syscall},
    {"__syscall", EXACT, POLICY__ALL, &hit_syscall},
    {"kill", EXACT, POLICY__ALL, &hit_signal},
    {"killpg", EXACT, POLICY__ALL, &hit_signal},
    {"tgkill", EXACT, POLICY__ALL, &hit_signal},
    {"tkill", EXACT, POLICY__ALL, &hit_signal},
    {"sigqueue", EXACT, POLICY__ALL, &hit_signal},
    {"signal", EXACT, POLICY__ALL, &hit_signal},
    {"sigaction", EXACT, POLICY__ALL, &hit_signal},
    {"__sysv_signal", EXACT, POLICY__ELF, &hit_signal},
    {"bsd_signal", EXACT, POLICY__ALL, &hit_signal},
    {"sigset", EXACT, POLICY__ALL, &hit_signal},
    {"alarm", EXACT, POLICY__ALL, &hit_signal},
    {"ualarm", EXACT, POLICY__ALL, &hit_signal},
    {"setitimer", EXACT, POLICY__ALL, &hit_signal},
    {"timer_create", EXACT, POLICY__ALL, &hit_signal},
    {"timerfd_create", EXACT, POLICY__ALL, &hit_signal},
    {"signalfd", EXACT, POLICY__ALL, &hit_signal},

    /* threads; std::thread, std::jthread and std::async are C++ names (policy_src.c and the
     * mangled rules of policy_elf.c) */
    {"pthread_create", EXACT, POLICY__ALL, &hit_thread},
    {"pthread_detach", EXACT, POLICY__ALL, &hit_thread},
    {"pthread_kill", EXACT, POLICY__ALL, &hit_thread},
    {"pthread_cancel", EXACT, POLICY__ALL, &hit_thread},
    {"pthread_sigqueue", EXACT, POLICY__ALL, &hit_thread},
    {"thrd_create", EXACT, POLICY__ALL, &hit_thread},
    {"thrd_detach", EXACT, POLICY__ALL, &hit_thread},

    /* files, descriptors, mappings */
    {"open", EXACT, POLICY__ALL, &hit_file},
    {"open64", EXACT, POLICY__ALL, &hit_file},
    {"openat", EXACT, POLICY__ALL, &hit_file},
    {"openat64", EXACT, POLICY__ALL, &hit_file},
    {"openat2", EXACT, POLICY__ALL, &hit_file},
    {"open_by_handle_at", EXACT, POLICY__ALL, &hit_file},
    {"__open_2", EXACT, POLICY__ELF, &hit_file},
    {"__open64_2", EXACT, POLICY__ELF, &hit_file},
    {"__openat_2", EXACT, POLICY__ELF, &hit_file},
    {"__openat64_2", EXACT, POLICY__ELF, &hit_file},
    {"creat", EXACT, POLICY__ALL, &hit_file},
    {"creat64", EXACT, POLICY__ALL, &hit_file},
    {"fopen", EXACT, POLICY__ALL, &hit_file},
    {"fopen64", EXACT, POLICY__ALL, &hit_file},
    {"freopen", EXACT, POLICY__ALL, &hit_file},
    {"freopen64", EXACT, POLICY__ALL, &hit_file},
    {"fdopen", EXACT, POLICY__ALL, &hit_file},
    {"fmemopen", EXACT, POLICY__ALL, &hit_file},
    {"tmpfile", EXACT, POLICY__ALL, &hit_file},
    {"tmpfile64", EXACT, POLICY__ALL, &hit_file},
    {"mkstemp", EXACT, POLICY__ALL, &hit_file},
    {"mkstemp64", EXACT, POLICY__ALL, &hit_file},
    {"mkostemp", EXACT, POLICY__ALL, &hit_file},
    {"mkstemps", EXACT, POLICY__ALL, &hit_file},
    {"mkdtemp", EXACT, POLICY__ALL, &hit_file},
    {"tmpnam", EXACT, POLICY__ALL, &hit_file},
    {"tempnam", EXACT, POLICY__ALL, &hit_file},
    {"unlink", EXACT, POLICY__ALL, &hit_file},
    {"unlinkat", EXACT, POLICY__ALL, &hit_file},
    {"rename", EXACT, POLICY__ALL, &hit_file},
    {"renameat", EXACT, POLICY__ALL, &hit_file},
    {"renameat2", EXACT, POLICY__ALL, &hit_file},
    {"truncate", EXACT, POLICY__ALL, &hit_file},
    {"ftruncate", EXACT, POLICY__ALL, &hit_file},
    {"mkdir", EXACT, POLICY__ALL, &hit_file},
    {"mkdirat", EXACT, POLICY__ALL, &hit_file},
    {"rmdir", EXACT, POLICY__ALL, &hit_file},
    {"chdir", EXACT, POLICY__ALL, &hit_file},
    {"fchdir", EXACT, POLICY__ALL, &hit_file},
    {"chmod", EXACT, POLICY__ALL, &hit_file},
    {"fchmod", EXACT, POLICY__ALL, &hit_file},
    {"chown", EXACT, POLICY__ALL, &hit_file},
    {"opendir", EXACT, POLICY__ALL, &hit_file},
    {"fdopendir", EXACT, POLICY__ALL, &hit_file},
    {"readdir", EXACT, POLICY__ALL, &hit_file},
    {"readdir64", EXACT, POLICY__ALL, &hit_file},
    {"scandir", EXACT, POLICY__ALL, &hit_file},
    {"readlink", EXACT, POLICY__ALL, &hit_file},
    {"readlinkat", EXACT, POLICY__ALL, &hit_file},
    {"symlink", EXACT, POLICY__ALL, &hit_file},
    {"symlinkat", EXACT, POLICY__ALL, &hit_file},
    {"link", EXACT, POLICY__ALL, &hit_file},
    {"linkat", EXACT, POLICY__ALL, &hit_file},
    {"memfd_create", EXACT, POLICY__ALL, &hit_file},
    {"mmap", EXACT, POLICY__ALL, &hit_file},
    {"mmap64", EXACT, POLICY__ALL, &hit_file},
    {"mremap", EXACT, POLICY__ALL, &hit_file},
    {"mprotect", EXACT, POLICY__ALL, &hit_file},
    {"pkey_mprotect", EXACT, POLICY__ALL, &hit_file},
    {"shm_open", EXACT, POLICY__ALL, &hit_file},
    {"shm_unlink", EXACT, POLICY__ALL, &hit_file},
    {"shmget", EXACT, POLICY__ALL, &hit_file},
    {"shmat", EXACT, POLICY__ALL, &hit_file},
    {"ioctl", EXACT, POLICY__ALL, &hit_file},
    {"fcntl", EXACT, POLICY__ALL, &hit_file},
    {"fcntl64", EXACT, POLICY__ALL, &hit_file},
    {"dup", EXACT, POLICY__ALL, &hit_file},
    {"dup2", EXACT, POLICY__ALL, &hit_file},
    {"dup3", EXACT, POLICY__ALL, &hit_file},
    {"pipe", EXACT, POLICY__ELF, &hit_file}, /* cuda::pipeline objects are named pipe */
    {"pipe2", EXACT, POLICY__ALL, &hit_file},
    {"sendfile", EXACT, POLICY__ALL, &hit_file},
    {"splice", EXACT, POLICY__ALL, &hit_file},
    {"inotify_", PREFIX, POLICY__ALL, &hit_file},
    {"fanotify_", PREFIX, POLICY__ALL, &hit_file},
    {"ifstream", EXACT, POLICY__SRC, &hit_file},
    {"ofstream", EXACT, POLICY__SRC, &hit_file},
    {"fstream", EXACT, POLICY__SRC, &hit_file},
    {"filebuf", EXACT, POLICY__SRC, &hit_file},
    {"basic_ifstream", EXACT, POLICY__SRC, &hit_file},
    {"basic_ofstream", EXACT, POLICY__SRC, &hit_file},
    {"basic_fstream", EXACT, POLICY__SRC, &hit_file},
    {"basic_filebuf", EXACT, POLICY__SRC, &hit_file},
    {"filesystem", EXACT, POLICY__SRC, &hit_file},
    {"cublasLoggerConfigure", EXACT, POLICY__ALL, &hit_lib_log},
    {"cublasLtLogger", PREFIX, POLICY__ALL, &hit_lib_log},
    {"cudnnSetCallback", EXACT, POLICY__ALL, &hit_lib_log},

    /* network */
    {"socket", EXACT, POLICY__ALL, &hit_network},
    {"socketpair", EXACT, POLICY__ALL, &hit_network},
    {"connect", EXACT, POLICY__ALL, &hit_network},
    {"accept", EXACT, POLICY__ALL, &hit_network},
    {"accept4", EXACT, POLICY__ALL, &hit_network},
    {"listen", EXACT, POLICY__ALL, &hit_network},
    {"sendto", EXACT, POLICY__ALL, &hit_network},
    {"recvfrom", EXACT, POLICY__ALL, &hit_network},
    {"sendmsg", EXACT, POLICY__ALL, &hit_network},
    {"recvmsg", EXACT, POLICY__ALL, &hit_network},
    {"sendmmsg", EXACT, POLICY__ALL, &hit_network},
    {"recvmmsg", EXACT, POLICY__ALL, &hit_network},
    {"getaddrinfo", EXACT, POLICY__ALL, &hit_network},
    {"getnameinfo", EXACT, POLICY__ALL, &hit_network},
    {"gethostbyname", EXACT, POLICY__ALL, &hit_network},
    {"gethostbyname2", EXACT, POLICY__ALL, &hit_network},
    {"gethostbyaddr", EXACT, POLICY__ALL, &hit_network},
    {"inet_pton", EXACT, POLICY__ALL, &hit_network},
    {"inet_addr", EXACT, POLICY__ALL, &hit_network},
    {"inet_aton", EXACT, POLICY__ALL, &hit_network},

    /* run-time loading */
    {"dlopen", EXACT, POLICY__ALL, &hit_dlopen},
    {"dlmopen", EXACT, POLICY__ALL, &hit_dlopen},
    {"dlsym", EXACT, POLICY__ALL, &hit_dlopen},
    {"dlvsym", EXACT, POLICY__ALL, &hit_dlopen},
    {"dladdr", EXACT, POLICY__ALL, &hit_dlopen},
    {"dladdr1", EXACT, POLICY__ALL, &hit_dlopen},
    {"dlinfo", EXACT, POLICY__ALL, &hit_dlopen},
    {"dl_iterate_phdr", EXACT, POLICY__ALL, &hit_dlopen},
    {"__libc_dlopen_mode", EXACT, POLICY__ALL, &hit_dlopen},
    {"__libc_dlsym", EXACT, POLICY__ALL, &hit_dlopen},
    {"cudaGetDriverEntryPoint", PREFIX, POLICY__ALL, &hit_dlopen},
    {"cuGetProcAddress", PREFIX, POLICY__ALL, &hit_dlopen},
    {"cudaLibrary", PREFIX, POLICY__ALL, &hit_dlopen},

    /* environment */
    {"getenv", EXACT, POLICY__ALL, &hit_env},
    {"secure_getenv", EXACT, POLICY__ALL, &hit_env},
    {"__secure_getenv", EXACT, POLICY__ALL, &hit_env},
    {"setenv", EXACT, POLICY__ALL, &hit_env},
    {"unsetenv", EXACT, POLICY__ALL, &hit_env},
    {"putenv", EXACT, POLICY__ALL, &hit_env},
    {"clearenv", EXACT, POLICY__ALL, &hit_env},
    {"environ", EXACT, POLICY__ALL, &hit_env},
    {"__environ", EXACT, POLICY__ALL, &hit_env},
    {"_environ", EXACT, POLICY__ALL, &hit_env},

    /* streams */
    {"cudaStreamCreate", PREFIX, POLICY__ALL, &hit_stream_create},
    {"cudaStreamDestroy", EXACT, POLICY__ALL, &hit_stream_create},
    {"cudaStreamPerThread", EXACT, POLICY__SRC, &hit_stream_other},
    {"cudaStreamLegacy", EXACT, POLICY__SRC, &hit_stream_other},
    {"cudaLaunchHostFunc", EXACT, POLICY__ALL, &hit_stream_host},
    {"cudaStreamAddCallback", EXACT, POLICY__ALL, &hit_stream_host},
    {"cudaStreamSetAttribute", EXACT, POLICY__ALL, &hit_stream_attr},
    {"cudaStreamCopyAttributes", EXACT, POLICY__ALL, &hit_stream_attr},
    {"cudaStreamAttachMemAsync", EXACT, POLICY__ALL, &hit_stream_attr},
    {"getStreamFromPool", EXACT, POLICY__SRC, &hit_stream_torch},
    {"getStreamFromExternal", EXACT, POLICY__SRC, &hit_stream_torch},
    {"setCurrentCUDAStream", EXACT, POLICY__SRC, &hit_stream_torch},
    {"getDefaultCUDAStream", EXACT, POLICY__SRC, &hit_stream_torch},
    {"CUDAStreamGuard", EXACT, POLICY__SRC, &hit_stream_torch},
    {"OptionalCUDAStreamGuard", EXACT, POLICY__SRC, &hit_stream_torch},
    {"CUDAMultiStreamGuard", EXACT, POLICY__SRC, &hit_stream_torch},
    {"cudaMemcpy", EXACT, POLICY__ALL, &hit_stream_sync},
    {"cudaMemcpy2D", EXACT, POLICY__ALL, &hit_stream_sync},
    {"cudaMemcpy3D", EXACT, POLICY__ALL, &hit_stream_sync},
    {"cudaMemcpyPeer", EXACT, POLICY__ALL, &hit_stream_sync},
    {"cudaMemcpy3DPeer", EXACT, POLICY__ALL, &hit_stream_sync},
    {"cudaMemcpyToSymbol", EXACT, POLICY__ALL, &hit_stream_sync},
    {"cudaMemcpyFromSymbol", EXACT, POLICY__ALL, &hit_stream_sync},
    {"cudaMemcpyToArray", EXACT, POLICY__ALL, &hit_stream_sync},
    {"cudaMemcpyFromArray", EXACT, POLICY__ALL, &hit_stream_sync},
    {"cudaMemcpy2DToArray", EXACT, POLICY__ALL, &hit_stream_sync},
    {"cudaMemcpy2DFromArray", EXACT, POLICY__ALL, &hit_stream_sync},
    {"cudaMemcpyArrayToArray", EXACT, POLICY__ALL, &hit_stream_sync},
    {"cudaMemcpy2DArrayToArray", EXACT, POLICY__ALL, &hit_stream_sync},
    {"cudaMemset", EXACT, POLICY__ALL, &hit_stream_sync},
    {"cudaMemset2D", EXACT, POLICY__ALL, &hit_stream_sync},
    {"cudaMemset3D", EXACT, POLICY__ALL, &hit_stream_sync},

    /* memory */
    {"cudaMalloc", PREFIX, POLICY__ALL, &hit_memory},
    {"cudaFree", PREFIX, POLICY__ALL, &hit_memory},
    {"cudaHostAlloc", EXACT, POLICY__ALL, &hit_memory},
    {"cudaHostRegister", EXACT, POLICY__ALL, &hit_memory},
    {"cudaHostUnregister", EXACT, POLICY__ALL, &hit_memory},
    {"cudaMemPool", PREFIX, POLICY__ALL, &hit_memory},
    {"cudaDeviceSetMemPool", EXACT, POLICY__ALL, &hit_memory},
    {"cudaGraphAddMemAllocNode", EXACT, POLICY__ALL, &hit_memory},
    {"cudaGraphAddMemFreeNode", EXACT, POLICY__ALL, &hit_memory},
    {"cudaIpc", PREFIX, POLICY__ALL, &hit_memory_ipc},
    {"__managed__", EXACT, POLICY__SRC, &hit_memory_managed},
    {"__cudaRegisterManagedVar", EXACT, POLICY__ELF, &hit_memory_managed},
    {"CUDACachingAllocator", EXACT, POLICY__SRC, &hit_memory},
    {"raw_alloc", EXACT, POLICY__SRC, &hit_memory},
    {"raw_alloc_with_stream", EXACT, POLICY__SRC, &hit_memory},
    {"raw_delete", EXACT, POLICY__SRC, &hit_memory},
    {"CachingDeviceAllocator", EXACT, POLICY__SRC, &hit_memory},
    {"from_blob", EXACT, POLICY__SRC, &hit_memory_alias},

    /* process-wide device state */
    {"cudaSetDevice", EXACT, POLICY__ALL, &hit_device},
    {"cudaSetDeviceFlags", EXACT, POLICY__ALL, &hit_device},
    {"cudaSetValidDevices", EXACT, POLICY__ALL, &hit_device},
    {"cudaInitDevice", EXACT, POLICY__ALL, &hit_device},
    {"cudaDeviceReset", EXACT, POLICY__ALL, &hit_device},
    {"cudaDeviceSetLimit", EXACT, POLICY__ALL, &hit_device},
    {"cudaDeviceSetCacheConfig", EXACT, POLICY__ALL, &hit_device},
    {"cudaDeviceSetSharedMemConfig", EXACT, POLICY__ALL, &hit_device},
    {"cudaDeviceSetGraphMemAttribute", EXACT, POLICY__ALL, &hit_device},
    {"cudaDeviceEnablePeerAccess", EXACT, POLICY__ALL, &hit_device},
    {"cudaDeviceDisablePeerAccess", EXACT, POLICY__ALL, &hit_device},
    {"cudaDeviceFlushGPUDirectRDMAWrites", EXACT, POLICY__ALL, &hit_device},
    {"cudaCtxResetPersistingL2Cache", EXACT, POLICY__ALL, &hit_device},
    {"cudaThreadExit", EXACT, POLICY__ALL, &hit_device},
    {"cudaThreadSetLimit", EXACT, POLICY__ALL, &hit_device},
    {"cudaThreadSetCacheConfig", EXACT, POLICY__ALL, &hit_device},
    {"cudaProfiler", PREFIX, POLICY__ALL, &hit_device},
    {"set_device", EXACT, POLICY__SRC, &hit_device},

    /* Python through pybind11 (the C API itself is a family rule below) */
    {"PYBIND11_MODULE", EXACT, POLICY__SRC, &hit_python_module},
    {"PYBIND11_EMBEDDED_MODULE", EXACT, POLICY__SRC, &hit_python_module},
    {"PYBIND11_PLUGIN", EXACT, POLICY__SRC, &hit_python_module},
    {"getattr", EXACT, POLICY__SRC_BIND, &hit_python_pybind},
    {"setattr", EXACT, POLICY__SRC_BIND, &hit_python_pybind},
    {"hasattr", EXACT, POLICY__SRC_BIND, &hit_python_pybind},
    {"delattr", EXACT, POLICY__SRC_BIND, &hit_python_pybind},
    {"eval", EXACT, POLICY__SRC_BIND, &hit_python_pybind},
    {"eval_file", EXACT, POLICY__SRC_BIND, &hit_python_pybind},
    {"exec", EXACT, POLICY__SRC_BIND, &hit_python_pybind},
    {"globals", EXACT, POLICY__SRC_BIND, &hit_python_pybind},
    {"reinterpret_borrow", EXACT, POLICY__SRC_BIND, &hit_python_pybind},
    {"reinterpret_steal", EXACT, POLICY__SRC_BIND, &hit_python_pybind},
    {"scoped_interpreter", EXACT, POLICY__SRC_BIND, &hit_python_pybind},
    {"initialize_interpreter", EXACT, POLICY__SRC_BIND, &hit_python_pybind},
    {"finalize_interpreter", EXACT, POLICY__SRC_BIND, &hit_python_pybind},

    /* other libraries (cuBLAS, cuDNN and the driver API are family rules below) */
    {"cufft", PREFIX, POLICY__ALL, &hit_other_lib},
    {"curand", PREFIX, POLICY__ALL, &hit_other_lib},
    {"cusparse", PREFIX, POLICY__ALL, &hit_other_lib},
    {"cusolver", PREFIX, POLICY__ALL, &hit_other_lib},
    {"cutensor", PREFIX, POLICY__ALL, &hit_other_lib},
    {"cupti", PREFIX, POLICY__ALL, &hit_other_lib},
    {"nvrtc", PREFIX, POLICY__ALL, &hit_other_lib},
    {"nvJitLink", PREFIX, POLICY__ALL, &hit_other_lib},
    {"nvPTXCompiler", PREFIX, POLICY__ALL, &hit_other_lib},
    {"nvjpeg", PREFIX, POLICY__ALL, &hit_other_lib},
    {"nccl", PREFIX, POLICY__ALL, &hit_other_lib},
    {"nvshmem", PREFIX, POLICY__ALL, &hit_other_lib},
    {"nvml", PREFIX, POLICY__ALL, &hit_other_lib},
    {"nvtx", PREFIX, POLICY__ALL, &hit_other_lib},
    {"nppi", PREFIX, POLICY__ALL, &hit_other_lib},
    {"npps", PREFIX, POLICY__ALL, &hit_other_lib},
    {"thrust", EXACT, POLICY__SRC, &hit_other_lib},
    {"cutlass", EXACT, POLICY__SRC, &hit_other_lib},
};

/* ---- family rules ---- */

/* cuBLAS handle, stream, mode and workspace set-up (after _v2/_64 suffixes are dropped). */
static const char *const cublas_setup[] = {
    "cublasCreate",           "cublasDestroy",          "cublasSetStream",
    "cublasGetStream",        "cublasSetMathMode",      "cublasGetMathMode",
    "cublasSetWorkspace",     "cublasSetPointerMode",   "cublasGetPointerMode",
    "cublasSetAtomicsMode",   "cublasGetAtomicsMode",   "cublasGetStatusString",
    "cublasGetStatusName",    "cublasGetVersion",       "cublasGetProperty",
    "cublasGetCudartVersion", "cublasSetSmCountTarget", "cublasGetSmCountTarget",
};

static const char *const cudnn_setup[] = {
    "cudnnCreate",         "cudnnDestroy",
    "cudnnSetStream",      "cudnnGetStream",
    "cudnnGetErrorString", "cudnnGetLastErrorString",
    "cudnnGetVersion",     "cudnnGetCudartVersion",
    "cudnnGetProperty",    "cudnnGetMaxDeviceVersion",
};

/* The convolution family and the descriptors it needs (cudnnSetTensor, a fill, is not one). */
static const char *const cudnn_conv_prefixes[] = {
    "cudnnConvolution",
    "cudnnGetConvolution",
    "cudnnFindConvolution",
    "cudnnSetConvolution",
    "cudnnCreateConvolution",
    "cudnnDestroyConvolution",
    "cudnnCreateTensorDescriptor",
    "cudnnDestroyTensorDescriptor",
    "cudnnSetTensor4d",
    "cudnnSetTensorNd",
    "cudnnGetTensor4d",
    "cudnnGetTensorNd",
    "cudnnGetTensorSizeInBytes",
    "cudnnCreateFilter",
    "cudnnDestroyFilter",
    "cudnnSetFilter",
    "cudnnGetFilter",
    "cudnnCreateActivation",
    "cudnnDestroyActivation",
    "cudnnSetActivation",
    "cudnnGetActivation",
};

static const char *const driver_allowed[] = {
    "cuTensorMapEncodeTiled",
    "cuTensorMapEncodeIm2col",
    "cuTensorMapEncodeIm2colWide",
    "cuTensorMapReplaceAddress",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuDriverGetVersion",
    /* cuComplex.h arithmetic, which shares the driver API's prefix */
    "cuCrealf",
    "cuCimagf",
    "cuConjf",
    "cuCaddf",
    "cuCsubf",
    "cuCmulf",
    "cuCdivf",
    "cuCabsf",
    "cuCfmaf",
    "cuCreal",
    "cuCimag",
    "cuConj",
    "cuCadd",
    "cuCsub",
    "cuCmul",
    "cuCdiv",
    "cuCabs",
    "cuCfma",
    "cuComplexFloatToDouble",
    "cuComplexDoubleToFloat",
};

/* Python C API entry points that run code, import modules or reach the interpreter's state;
 * pybind11's own machinery (in every binding object) needs none of them except
 * PyImport_ImportModule, which only binding.cpp uses. */
static const char *const python_elf_denied[] = {
    "PyRun_",
    "Py_CompileString",
    "Py_Main",
    "Py_BytesMain",
    "Py_Initialize",
    "Py_Finalize",
    "Py_Exit",
    "PyEval_EvalCode",
    "PyEval_EvalFrame",
    "PyImport_",
    "_PyImport_",
    "PySys_",
    "PyOS_",
    "PyMarshal_",
    "PyCode_",
    "PyFile_",
    "PyFunction_New",
    "Py_NewInterpreter",
    "PyEval_GetGlobals",
    "PyEval_GetLocals",
    "PyEval_GetFrame",
};

static bool in_list(const char *name, size_t len, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (policy__eq(name, len, list[i]))
            return true;
    return false;
}

static bool starts_with_any(const char *name, size_t len, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (policy__starts(name, len, list[i]))
            return true;
    return false;
}

static bool ends_with(const char *name, size_t len, const char *suffix)
{
    size_t n = strlen(suffix);
    return n <= len && memcmp(name + len - n, suffix, n) == 0;
}

static bool contains(const char *name, size_t len, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(name + i, needle, n) == 0)
            return true;
    return false;
}

static const struct policy__hit *cublas_rule(const char *name, size_t len)
{
    if (policy__starts(name, len, "cublasXt"))
        return &hit_cublasxt;
    if (policy__starts(name, len, "cublasLt") || ends_with(name, len, "_t"))
        return NULL; /* cuBLASLt is a matmul library; _t names are types */
    if (contains(name, len, "gemm") || contains(name, len, "Gemm"))
        return NULL;
    /* cublasSgemm_v2, cublasSgemm_v2_64: the set-up list names the base function */
    size_t base = len;
    if (ends_with(name, base, "_64"))
        base -= 3;
    if (ends_with(name, base, "_v2"))
        base -= 3;
    if (in_list(name, base, cublas_setup, ARRAY_SIZE(cublas_setup)))
        return NULL;
    return &hit_cublas;
}

static const struct policy__hit *cudnn_rule(const char *name, size_t len)
{
    if (ends_with(name, len, "_t"))
        return NULL; /* types */
    if (in_list(name, len, cudnn_setup, ARRAY_SIZE(cudnn_setup)) ||
        starts_with_any(name, len, cudnn_conv_prefixes, ARRAY_SIZE(cudnn_conv_prefixes)))
        return NULL;
    return &hit_cudnn;
}

/* cuLaunchKernel, cuModuleLoadData, ...: "cu" and an upper-case letter. */
static const struct policy__hit *driver_rule(const char *name, size_t len)
{
    if (len < 3 || name[0] != 'c' || name[1] != 'u' || name[2] < 'A' || name[2] > 'Z')
        return NULL;
    if (in_list(name, len, driver_allowed, ARRAY_SIZE(driver_allowed)))
        return NULL;
    return &hit_driver;
}

/* Py..., Py_..., _Py...: in sources every use is explicit and refused; in objects only the entry
 * points that run code or import are. */
static const struct policy__hit *python_rule(const char *name, size_t len, unsigned ctx)
{
    const char *p = name;
    size_t n = len;
    if (n > 0 && p[0] == '_') {
        p++;
        n--;
    }
    if (n < 3 || p[0] != 'P' || p[1] != 'y' || !((p[2] >= 'A' && p[2] <= 'Z') || p[2] == '_'))
        return NULL;
    if (ctx & POLICY__SRC)
        return &hit_python_capi;
    if ((ctx & POLICY__ELF_DYN) && policy__eq(name, len, "PyImport_ImportModule"))
        return NULL; /* binding.cpp's py::module_::import("types") */
    if (starts_with_any(name, len, python_elf_denied, ARRAY_SIZE(python_elf_denied)))
        return &hit_python_capi;
    return NULL;
}

const struct policy__hit *policy__classify_name(const char *name, size_t len, unsigned ctx)
{
    /* Per-thread default stream builds name cudaMemcpy as cudaMemcpy_ptds, and so on. */
    size_t base = len;
    if ((ctx & POLICY__ELF) && (ends_with(name, len, "_ptds") || ends_with(name, len, "_ptsz")))
        base -= 5;
    for (size_t i = 0; i < ARRAY_SIZE(name_rules); i++) {
        const struct name_rule *r = &name_rules[i];
        if (!(r->ctx & ctx))
            continue;
        if (r->match == EXACT ? policy__eq(name, base, r->name)
                              : policy__starts(name, base, r->name))
            return r->hit;
    }
    if (policy__starts(name, len, "cublas"))
        return cublas_rule(name, len);
    if (policy__starts(name, len, "cudnn"))
        return cudnn_rule(name, len);
    const struct policy__hit *hit = driver_rule(name, len);
    if (hit)
        return hit;
    return python_rule(name, len, ctx);
}
