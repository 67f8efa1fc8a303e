/*
 * A fake libcuda.so.1 for the fake NVIDIA driver: the CUDA driver API calls the validator's CUDA check
 * makes (agents/validator/cuda.py), over no GPU.
 *
 * Devices are the fake NVML library's: cuInit opens libnvidia-ml.so.1 (the fake, beside this library)
 * and CUDA sees as many devices as NVML shows this process, so a container given two GPUs has two CUDA
 * devices, and a driver whose NVML cannot start has none (CUDA_ERROR_NO_DEVICE). Device memory is host
 * memory. There is no JIT: cuModuleLoadData accepts PTX text and records its .entry names, and
 * cuLaunchKernel runs one kernel on the CPU, the validator's "vadd" (c[i] = a[i] + b[i] over n floats,
 * parameters a, b, c, n); any other kernel answers CUDA_ERROR_NOT_SUPPORTED, so nothing pretends to run
 * code it cannot.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_SUPPORTED = 801,
};

#define MAX_ENTRIES 16
#define NAME_LEN 128

typedef struct { char names[MAX_ENTRIES][NAME_LEN]; int count; } module_t;
typedef struct { char name[NAME_LEN]; } function_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_initialised, g_devices, g_cuda_version;
static __thread void *t_current;

typedef int (*nvml_void_fn)(void);
typedef int (*nvml_uint_fn)(unsigned *);
typedef int (*nvml_int_fn)(int *);

CUresult cuInit(unsigned int flags) {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_mu);
    CUresult r = CUDA_SUCCESS;
    if (!g_initialised) {
        void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
        nvml_void_fn init = nvml ? (nvml_void_fn)dlsym(nvml, "nvmlInit_v2") : NULL;
        nvml_uint_fn count = nvml ? (nvml_uint_fn)dlsym(nvml, "nvmlDeviceGetCount_v2") : NULL;
        nvml_int_fn version = nvml ? (nvml_int_fn)dlsym(nvml, "nvmlSystemGetCudaDriverVersion_v2") : NULL;
        unsigned n = 0;
        if (!init || !count || !version || init() != 0 || count(&n) != 0 || version(&g_cuda_version) != 0)
            r = CUDA_ERROR_NO_DEVICE;
        else {
            g_devices = (int)n;
            g_initialised = 1;
        }
    }
    pthread_mutex_unlock(&g_mu);
    return r;
}

CUresult cuDriverGetVersion(int *version) {
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    *version = g_initialised ? g_cuda_version : 0;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
    if (!g_initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = g_devices;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (!g_initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= g_devices) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(void **ctx, CUdevice device) {
    if (!g_initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (device < 0 || device >= g_devices) return CUDA_ERROR_INVALID_DEVICE;
    *ctx = (void *)(intptr_t)(device + 1); /* one primary context per device, never NULL */
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
    return device >= 0 && device < g_devices ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult cuCtxPushCurrent_v2(void *ctx) {
    if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    t_current = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(void **ctx) {
    if (ctx) *ctx = t_current;
    t_current = NULL;
    return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) { return t_current ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; }

CUresult cuModuleLoadData(void **module, const void *image) {
    if (!t_current) return CUDA_ERROR_INVALID_CONTEXT;
    if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
    module_t *m = calloc(1, sizeof *m);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    for (const char *p = strstr(image, ".entry"); p && m->count < MAX_ENTRIES; p = strstr(p + 6, ".entry")) {
        const char *name = p + 6;
        while (*name == ' ' || *name == '\t') name++;
        size_t len = strcspn(name, "( \t\n");
        if (len == 0 || len >= NAME_LEN) continue;
        memcpy(m->names[m->count], name, len);
        m->names[m->count++][len] = 0;
    }
    if (!m->count) { free(m); return CUDA_ERROR_INVALID_IMAGE; }
    *module = m;
    return CUDA_SUCCESS;
}

CUresult cuModuleUnload(void *module) {
    free(module);
    return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(void **function, void *module, const char *name) {
    module_t *m = module;
    if (!function || !m || !name) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < m->count; i++) {
        if (strcmp(m->names[i], name)) continue;
        function_t *f = calloc(1, sizeof *f);
        if (!f) return CUDA_ERROR_OUT_OF_MEMORY;
        strcpy(f->name, name);
        *function = f; /* freed with the process: a real module owns its functions the same way */
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_NOT_FOUND;
}

CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t size) {
    if (!t_current) return CUDA_ERROR_INVALID_CONTEXT;
    void *p = size ? malloc(size) : NULL;
    if (!p) return size ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    *ptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr ptr) {
    free((void *)(uintptr_t)ptr);
    return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t size) {
    if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
    memcpy((void *)(uintptr_t)dst, src, size);
    return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t size) {
    if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
    memcpy(dst, (const void *)(uintptr_t)src, size);
    return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra) {
    (void)shared; (void)stream; (void)extra;
    function_t *f = function;
    if (!t_current) return CUDA_ERROR_INVALID_CONTEXT;
    if (!f || !params) return CUDA_ERROR_INVALID_VALUE;
    if (strcmp(f->name, "vadd")) return CUDA_ERROR_NOT_SUPPORTED;
    float *a = (float *)(uintptr_t)*(CUdeviceptr *)params[0];
    float *b = (float *)(uintptr_t)*(CUdeviceptr *)params[1];
    float *c = (float *)(uintptr_t)*(CUdeviceptr *)params[2];
    unsigned n = *(unsigned *)params[3];
    unsigned long long threads = (unsigned long long)gx * gy * gz * bx * by * bz;
    for (unsigned long long i = 0; i < n && i < threads; i++) c[i] = a[i] + b[i];
    return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **text) {
    if (!text) return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
    case CUDA_SUCCESS: *text = "no error"; break;
    case CUDA_ERROR_NO_DEVICE: *text = "no CUDA-capable device is detected"; break;
    case CUDA_ERROR_INVALID_DEVICE: *text = "invalid device ordinal"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *text = "operation not supported (the fake driver runs only the vadd kernel)"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *text = "initialization error"; break;
    default: *text = "unknown error"; break;
    }
    return CUDA_SUCCESS;
}
