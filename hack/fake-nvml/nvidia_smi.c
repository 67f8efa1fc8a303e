/*
 * A fake nvidia-smi for the fake NVIDIA driver: it answers from NVML, through whichever
 * libnvidia-ml.so.1 the dynamic loader finds (the fake one on a fake-driver node), so it lists exactly
 * the GPUs that library shows to this process: inside a container, those whose device nodes the
 * container was given.
 *
 *   nvidia-smi                 a short summary (driver and CUDA versions, one line per GPU)
 *   nvidia-smi -L              GPU <i>: <name> (UUID: <uuid>)
 *   nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,driver_version --format=csv[,noheader][,nounits]
 *   nvidia-smi -r -i N         reset GPU N (applies a pending MIG mode change, the MIG manager's reset, and
 *                              satisfies the recovery action an XID asked for; the library records the
 *                              reset in its faults file, so other processes, e.g. the device plugin, see it)
 *
 * Exit status as the real tool's: 9 when the driver cannot be reached, 15 when a GPU is lost.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvml.h"

typedef nvmlReturn_t (*init_fn)(void);
typedef nvmlReturn_t (*count_fn)(unsigned *);
typedef nvmlReturn_t (*handle_fn)(unsigned, nvmlDevice_t *);
typedef nvmlReturn_t (*string_fn)(nvmlDevice_t, char *, unsigned);
typedef nvmlReturn_t (*memory_fn)(nvmlDevice_t, nvmlMemory_t *);
typedef nvmlReturn_t (*pci_fn)(nvmlDevice_t, nvmlPciInfo_t *);
typedef nvmlReturn_t (*driver_fn)(char *, unsigned);
typedef nvmlReturn_t (*cuda_fn)(int *);
typedef const char *(*error_fn)(nvmlReturn_t);

static struct {
    init_fn init;
    count_fn count;
    handle_fn handle;
    string_fn name, uuid;
    memory_fn memory;
    pci_fn pci;
    driver_fn driver;
    cuda_fn cuda;
    error_fn error;
} nv;

typedef struct {
    unsigned index;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    char bus[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    unsigned long long memory_mib;
} gpu_t;

static int no_driver(void) {
    fprintf(stderr, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                    "Make sure that the latest NVIDIA driver is installed and running.\n");
    return 9;
}

static int load(void) {
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!lib) return 0;
    nv.init = (init_fn)dlsym(lib, "nvmlInit_v2");
    nv.count = (count_fn)dlsym(lib, "nvmlDeviceGetCount_v2");
    nv.handle = (handle_fn)dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    nv.name = (string_fn)dlsym(lib, "nvmlDeviceGetName");
    nv.uuid = (string_fn)dlsym(lib, "nvmlDeviceGetUUID");
    nv.memory = (memory_fn)dlsym(lib, "nvmlDeviceGetMemoryInfo");
    nv.pci = (pci_fn)dlsym(lib, "nvmlDeviceGetPciInfo_v3");
    nv.driver = (driver_fn)dlsym(lib, "nvmlSystemGetDriverVersion");
    nv.cuda = (cuda_fn)dlsym(lib, "nvmlSystemGetCudaDriverVersion_v2");
    nv.error = (error_fn)dlsym(lib, "nvmlErrorString");
    return nv.init && nv.count && nv.handle && nv.name && nv.uuid && nv.memory && nv.pci && nv.driver &&
           nv.cuda && nv.error;
}

/* One GPU's attributes; NVML's error when it cannot be read (a lost GPU). */
static nvmlReturn_t read_gpu(unsigned index, gpu_t *g) {
    nvmlDevice_t h;
    nvmlMemory_t mem;
    nvmlPciInfo_t pci;
    nvmlReturn_t r = nv.handle(index, &h);
    if (!r) r = nv.name(h, g->name, sizeof g->name);
    if (!r) r = nv.uuid(h, g->uuid, sizeof g->uuid);
    if (!r) r = nv.memory(h, &mem);
    if (!r) r = nv.pci(h, &pci);
    if (r) return r;
    g->index = index;
    g->memory_mib = mem.total / (1024ULL * 1024ULL);
    snprintf(g->bus, sizeof g->bus, "%s", pci.busId);
    return NVML_SUCCESS;
}

static void field(const gpu_t *g, const char *key, const char *driver, int units) {
    if (!strcmp(key, "index")) printf("%u", g->index);
    else if (!strcmp(key, "name")) printf("%s", g->name);
    else if (!strcmp(key, "uuid")) printf("%s", g->uuid);
    else if (!strcmp(key, "pci.bus_id")) printf("%s", g->bus);
    else if (!strcmp(key, "memory.total")) printf(units ? "%llu MiB" : "%llu", g->memory_mib);
    else if (!strcmp(key, "driver_version")) printf("%s", driver);
    else printf("[N/A]");
}

static int query(const char *fields, const char *format, unsigned count, const char *driver) {
    char keys[1024];
    int header = !strstr(format, "noheader"), units = !strstr(format, "nounits");
    snprintf(keys, sizeof keys, "%s", fields);
    if (header) printf("%s\n", fields);
    int status = 0;
    for (unsigned i = 0; i < count; i++) {
        gpu_t g;
        nvmlReturn_t r = read_gpu(i, &g);
        if (r) { fprintf(stderr, "Unable to query GPU %u: %s\n", i, nv.error(r)); status = 15; continue; }
        char copy[1024], *save = NULL;
        snprintf(copy, sizeof copy, "%s", keys);
        int first = 1;
        for (char *k = strtok_r(copy, ",", &save); k; k = strtok_r(NULL, ",", &save), first = 0) {
            if (!first) printf(", ");
            field(&g, k, driver, units);
        }
        printf("\n");
    }
    return status;
}

typedef int (*reset_fn)(unsigned);

/* The fake library's own reset control (not NVML: the real tool resets through the driver). */
static int reset(int index) {
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    reset_fn fn = lib ? (reset_fn)dlsym(lib, "fakeNvmlResetGpu") : NULL;
    nvmlDevice_t h;
    nvmlPciInfo_t pci;
    if (!fn) { fprintf(stderr, "GPU reset is not supported by this library.\n"); return 3; }
    if (index < 0 || nv.handle((unsigned)index, &h) || nv.pci(h, &pci)) {
        fprintf(stderr, "Unable to reset GPU %d: invalid index\n", index);
        return 6;
    }
    if (fn((unsigned)index) != 0) { fprintf(stderr, "Unable to reset GPU %s\n", pci.busId); return 15; }
    printf("GPU %s was successfully reset.\n", pci.busId);
    return 0;
}

int main(int argc, char **argv) {
    const char *fields = NULL, *format = "csv";
    int list = 0, do_reset = 0, index = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-r") || !strcmp(argv[i], "--gpu-reset")) do_reset = 1;
        else if (!strcmp(argv[i], "-i") && i + 1 < argc) index = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-L") || !strcmp(argv[i], "--list-gpus")) list = 1;
        else if (!strncmp(argv[i], "--query-gpu=", 12)) fields = argv[i] + 12;
        else if (!strncmp(argv[i], "--format=", 9)) format = argv[i] + 9;
        else { fprintf(stderr, "nvidia-smi (fake): unsupported argument %s\n", argv[i]); return 2; }
    }
    if (!load() || nv.init()) return no_driver();
    unsigned count = 0;
    char driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = "";
    int cuda = 0;
    if (nv.count(&count) || nv.driver(driver, sizeof driver) || nv.cuda(&cuda)) return no_driver();
    if (do_reset) return reset(index);
    if (fields) return query(fields, format, count, driver);
    if (!list) printf("NVIDIA-SMI %s    Driver Version: %s    CUDA Version: %d.%d\n", driver, driver,
                      cuda / 1000, (cuda % 1000) / 10);
    int status = 0;
    for (unsigned i = 0; i < count; i++) {
        gpu_t g;
        nvmlReturn_t r = read_gpu(i, &g);
        if (r) {
            fprintf(stderr, "Unable to determine the device handle for GPU %u: %s\n", i, nv.error(r));
            status = 15;
            continue;
        }
        if (list) printf("GPU %u: %s (UUID: %s)\n", i, g.name, g.uuid);
        else printf("| %u  %-28s | %s | %6llu MiB | %s |\n", i, g.name, g.bus, g.memory_mib, g.uuid);
    }
    if (!list && !count) printf("No devices were found\n");
    return status;
}
