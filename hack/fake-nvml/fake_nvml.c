/*
 * A fake libnvidia-ml.so.1 for tests on machines without an NVIDIA GPU.
 *
 * It implements the NVML entry points gpu_operator's NvmlBackend calls (through unmodified pynvml and
 * ctypes), compiled against the nvml.h of the nvidia-nvml-dev wheel at build time so the struct
 * layouts are NVML's own. Everything else is missing on purpose: pynvml then raises
 * NVMLError_FunctionNotFound, so a backend that starts calling something new fails loudly here.
 *
 * State comes from a key=value file read on the first successful nvmlInit of the process: the one
 * FAKE_NVML_CONFIG names, else <root>/lib/firmware/nvidia/<version>/fake-nvml.conf, where <root> is
 * the driver root the library itself sits in (its directory less /usr/lib/<triplet>, /usr/lib64, ...).
 * That is how an installed fake driver finds its GPUs without any environment: in an operand that
 * loads it from /host/run/nvidia/driver, and in a workload container where CDI mounted the library
 * and the firmware directory. No file: nvmlInit answers NVML_ERROR_DRIVER_NOT_LOADED.
 * Keys (see build.sh for a sample):
 *   driver_version, cuda_driver_version (e.g. 12040), device_count, init_error,
 *   shared_state=1: MIG modes and instances live in fake-nvml.mig beside the config, as they live in
 *     the driver: what the MIG manager's process changes, every other process (and nvidia-smi -r) sees;
 *   device_nodes=1: like the real driver, need <root>/dev/nvidiactl (else DRIVER_NOT_LOADED) and
 *     show only the GPUs whose <root>/dev/nvidia<minor> exists (a container sees its own GPUs only),
 *   device.N.{name,uuid,serial,board_part_number,pci_bus_id,pci_device_id,memory_mib,reserved_mib,
 *             cc (e.g. 9.0),arch,numa_node,minor,mig_capable,mig_mode,mig_reset_required,power_mw,
 *             temperature,memory_temperature,utilization,sm_clock,mem_clock,energy_mj,nvlink}
 *   device.N.nvlink = comma-separated PCI bus ids at the far end of each active link
 *   device.N.gi_profile.P = id,slices,instances,memory_mib,sms,copy,dec,enc,jpeg,ofa (P: NVML index)
 *   topology.A.B = nvmlGpuTopologyLevel_t value (default NVML_TOPOLOGY_SYSTEM)
 *   event.xid = N:XID   (delivered to the first event set that registers GPU N for XID events)
 *
 * Faults at run time, across processes: lines appended to fake-nvml.faults beside the config file,
 * read on each device count and during event waits (at most FAULT_POLL_MS late):
 *   xid <uuid> <code>   an XID event (79, "fallen off the bus", also makes the GPU lost)
 *   lost <uuid>         the GPU stops answering;  recover <uuid>: it answers again
 * A process that starts later applies the lost/recover state but not old XID events.
 * Tests drive faults through extra exported functions (not part of NVML): fakeNvmlInjectXid,
 * fakeNvmlSetLost, fakeNvmlResetGpu, fakeNvmlSetUtilization. All state sits behind one mutex; event
 * waits block on a condition variable, so an injected XID wakes a waiting thread at once.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <time.h>

#include "nvml.h"

#define MAX_DEVICES 16
#define MAX_PROFILES 32
#define MAX_GI 8
#define MAX_LINKS 36
#define MAX_SETS 8
#define QUEUE_LEN 64
#define MIB (1024ULL * 1024ULL)
#define FAULT_POLL_MS 200
#define PATH_LEN 4096

struct nvmlDevice_st { unsigned dev; int mig; unsigned slot; };
struct nvmlGpuInstance_st { unsigned dev; unsigned slot; };
struct nvmlComputeInstance_st { unsigned dev; unsigned slot; };
struct nvmlEventSet_st { unsigned id; };

typedef struct {
    int present;
    unsigned id, slices, instances, sms, copy, dec, enc, jpeg, ofa;
    unsigned long long memory_mib;
} profile_t;

typedef struct {
    int used, has_ci;
    unsigned id, profile, ci_profile; /* profile: NVML index into profiles[] */
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
} gi_t;

typedef struct {
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    char serial[NVML_DEVICE_SERIAL_BUFFER_SIZE], part[NVML_DEVICE_PART_NUMBER_BUFFER_SIZE];
    unsigned domain, bus, device, pci_device_id;
    unsigned long long memory_mib, reserved_mib, energy_mj, dbe;
    int cc_major, cc_minor, arch, numa, minor;
    int mig_capable, mig_cur, mig_pend, mig_reset_required, lost;
    unsigned power_mw, temp, mem_temp, util, sm_clock, mem_clock, generation, next_gi_id;
    int n_links;
    char links[MAX_LINKS][NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    profile_t profiles[MAX_PROFILES];
    gi_t gis[MAX_GI];
} fake_dev;

typedef struct {
    nvmlDevice_t device;
    unsigned long long type, data;
    unsigned gi, ci;
} queued_event;

typedef struct {
    int used, lost_pending;
    unsigned long long mask[MAX_DEVICES];
    queued_event queue[QUEUE_LEN];
    unsigned head, len;
} event_set;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_refs, g_loaded, g_init_error;
static char g_driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
static int g_cuda;
static unsigned g_count;
static fake_dev g_devs[MAX_DEVICES];
static int g_topology[MAX_DEVICES][MAX_DEVICES];
static int g_boot_xid_dev = -1;
static unsigned long long g_boot_xid;
static struct timespec g_started;
static int g_device_nodes, g_shared_state;
static char g_mig_state[PATH_LEN]; /* fake-nvml.mig beside the config, with shared_state=1 */
static struct stat g_mig_seen;
static void mig_sync_in(void);
static void mig_sync_out(void);
static char g_root[PATH_LEN / 2];   /* the driver root the library sits in; "" is / */
static char g_faults[PATH_LEN]; /* the faults file beside the config; "" when there is none */
static long g_faults_offset;
static void poll_faults(int replay);
static struct nvmlDevice_st g_phys[MAX_DEVICES];
static struct nvmlDevice_st g_mig[MAX_DEVICES][MAX_GI];
static struct nvmlGpuInstance_st g_gi_handles[MAX_DEVICES][MAX_GI];
static struct nvmlComputeInstance_st g_ci_handles[MAX_DEVICES][MAX_GI];
static struct nvmlEventSet_st g_set_handles[MAX_SETS];
static event_set g_sets[MAX_SETS];

/* ---- config ------------------------------------------------------------------------------ */

static void copy_field(char *dst, size_t size, const char *src) {
    snprintf(dst, size, "%s", src);
}

static void parse_bus(const char *text, unsigned *domain, unsigned *bus, unsigned *device) {
    if (sscanf(text, "%x:%x:%x", domain, bus, device) != 3) { *domain = 0; *bus = 0; *device = 0; }
}

static void set_device_key(fake_dev *d, const char *key, const char *value) {
    if (!strcmp(key, "name")) copy_field(d->name, sizeof d->name, value);
    else if (!strcmp(key, "uuid")) copy_field(d->uuid, sizeof d->uuid, value);
    else if (!strcmp(key, "serial")) copy_field(d->serial, sizeof d->serial, value);
    else if (!strcmp(key, "board_part_number")) copy_field(d->part, sizeof d->part, value);
    else if (!strcmp(key, "pci_bus_id")) parse_bus(value, &d->domain, &d->bus, &d->device);
    else if (!strcmp(key, "pci_device_id")) d->pci_device_id = (unsigned)strtoul(value, NULL, 0);
    else if (!strcmp(key, "memory_mib")) d->memory_mib = strtoull(value, NULL, 0);
    else if (!strcmp(key, "reserved_mib")) d->reserved_mib = strtoull(value, NULL, 0);
    else if (!strcmp(key, "cc")) { if (sscanf(value, "%d.%d", &d->cc_major, &d->cc_minor) != 2) d->cc_major = -1; }
    else if (!strcmp(key, "arch")) d->arch = atoi(value);
    else if (!strcmp(key, "numa_node")) d->numa = atoi(value);
    else if (!strcmp(key, "minor")) d->minor = atoi(value);
    else if (!strcmp(key, "mig_capable")) d->mig_capable = atoi(value);
    else if (!strcmp(key, "mig_mode")) d->mig_cur = d->mig_pend = atoi(value);
    else if (!strcmp(key, "mig_reset_required")) d->mig_reset_required = atoi(value);
    else if (!strcmp(key, "power_mw")) d->power_mw = (unsigned)atoi(value);
    else if (!strcmp(key, "temperature")) d->temp = (unsigned)atoi(value);
    else if (!strcmp(key, "memory_temperature")) d->mem_temp = (unsigned)atoi(value);
    else if (!strcmp(key, "utilization")) d->util = (unsigned)atoi(value);
    else if (!strcmp(key, "sm_clock")) d->sm_clock = (unsigned)atoi(value);
    else if (!strcmp(key, "mem_clock")) d->mem_clock = (unsigned)atoi(value);
    else if (!strcmp(key, "energy_mj")) d->energy_mj = strtoull(value, NULL, 0);
    else if (!strcmp(key, "nvlink")) {
        char buf[2048];
        copy_field(buf, sizeof buf, value);
        d->n_links = 0;
        for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && d->n_links < MAX_LINKS;
             tok = strtok_r(NULL, ",", &save))
            copy_field(d->links[d->n_links++], NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE, tok);
    } else if (!strncmp(key, "gi_profile.", 11)) {
        unsigned index = (unsigned)atoi(key + 11);
        profile_t *p = index < MAX_PROFILES ? &d->profiles[index] : NULL;
        if (p && sscanf(value, "%u,%u,%u,%llu,%u,%u,%u,%u,%u,%u", &p->id, &p->slices, &p->instances,
                        &p->memory_mib, &p->sms, &p->copy, &p->dec, &p->enc, &p->jpeg, &p->ofa) == 10)
            p->present = 1;
    }
}

static void set_key(const char *key, const char *value) {
    unsigned a, b;
    int consumed = 0;
    if (!strcmp(key, "driver_version")) copy_field(g_driver, sizeof g_driver, value);
    else if (!strcmp(key, "cuda_driver_version")) g_cuda = atoi(value);
    else if (!strcmp(key, "device_count")) g_count = (unsigned)atoi(value) > MAX_DEVICES ? MAX_DEVICES : (unsigned)atoi(value);
    else if (!strcmp(key, "init_error")) g_init_error = atoi(value);
    else if (!strcmp(key, "device_nodes")) g_device_nodes = atoi(value);
    else if (!strcmp(key, "shared_state")) g_shared_state = atoi(value);
    else if (!strcmp(key, "event.xid")) { if (sscanf(value, "%d:%llu", &g_boot_xid_dev, &g_boot_xid) != 2) g_boot_xid_dev = -1; }
    else if (sscanf(key, "topology.%u.%u%n", &a, &b, &consumed) == 2 && a < MAX_DEVICES && b < MAX_DEVICES)
        g_topology[a][b] = g_topology[b][a] = atoi(value);
    else if (sscanf(key, "device.%u.%n", &a, &consumed) == 1 && consumed > 0 && a < MAX_DEVICES)
        set_device_key(&g_devs[a], key + consumed, value);
}

/* The driver root: the library's own directory (symlinks resolved) less its library folder. */
static void find_root(void) {
    static const char *folders[] = {"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                                    "/lib/x86_64-linux-gnu", "/usr/lib", "/lib64", "/lib", NULL};
    Dl_info info;
    char path[PATH_LEN];
    if (!dladdr((void *)&nvmlInit_v2, &info) || !info.dli_fname) return;
    if (!realpath(info.dli_fname, path)) copy_field(path, sizeof path, info.dli_fname);
    char *slash = strrchr(path, '/');
    if (!slash) return;
    *slash = 0;
    size_t n = strlen(path);
    for (const char **f = folders; *f; f++) {
        size_t k = strlen(*f);
        if (n >= k && !strcmp(path + n - k, *f)) { path[n - k] = 0; break; }
    }
    copy_field(g_root, sizeof g_root, path);
}

static FILE *open_config(char *used, size_t size) {
    const char *env = getenv("FAKE_NVML_CONFIG");
    if (env && *env) { copy_field(used, size, env); return fopen(env, "r"); }
    char dir[PATH_LEN * 3 / 4];
    snprintf(dir, sizeof dir, "%s/lib/firmware/nvidia", g_root);
    DIR *d = opendir(dir);
    FILE *f = NULL;
    for (struct dirent *e; d && !f && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        snprintf(used, size, "%s/%s/fake-nvml.conf", dir, e->d_name);
        f = fopen(used, "r");
    }
    if (d) closedir(d);
    return f;
}

static int char_device(const char *name) {
    char path[PATH_LEN];
    struct stat st;
    snprintf(path, sizeof path, "%s/dev/%s", g_root, name);
    return stat(path, &st) == 0 && S_ISCHR(st.st_mode);
}

/* Keep only the GPUs whose device node exists, renumbered as NVML numbers what a process can open. */
static void keep_visible(void) {
    static int old_topology[MAX_DEVICES][MAX_DEVICES];
    int from[MAX_DEVICES];
    unsigned kept = 0;
    memcpy(old_topology, g_topology, sizeof g_topology);
    for (unsigned i = 0; i < g_count; i++) {
        char name[32];
        snprintf(name, sizeof name, "nvidia%d", g_devs[i].minor);
        if (!char_device(name)) continue;
        if (kept != i) g_devs[kept] = g_devs[i];
        from[kept++] = (int)i;
    }
    for (unsigned a = 0; a < kept; a++)
        for (unsigned b = 0; b < kept; b++) g_topology[a][b] = old_topology[from[a]][from[b]];
    g_count = kept;
}

static nvmlReturn_t load_config(void) {
    char used[PATH_LEN] = "";
    find_root();
    FILE *f = open_config(used, sizeof used);
    if (!f) return NVML_ERROR_DRIVER_NOT_LOADED;
    memset(g_devs, 0, sizeof g_devs);
    g_count = 0;
    g_device_nodes = 0;
    g_shared_state = 0;
    for (unsigned i = 0; i < MAX_DEVICES; i++) {
        for (unsigned j = 0; j < MAX_DEVICES; j++) g_topology[i][j] = i == j ? NVML_TOPOLOGY_INTERNAL : NVML_TOPOLOGY_SYSTEM;
        g_phys[i] = (struct nvmlDevice_st){i, 0, 0};
        g_devs[i].next_gi_id = 1;
        for (unsigned s = 0; s < MAX_GI; s++) {
            g_mig[i][s] = (struct nvmlDevice_st){i, 1, s};
            g_gi_handles[i][s] = (struct nvmlGpuInstance_st){i, s};
            g_ci_handles[i][s] = (struct nvmlComputeInstance_st){i, s};
        }
    }
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        char *eq = strchr(line, '=');
        if (line[0] == '#' || !eq) continue;
        *eq = 0;
        set_key(line, eq + 1);
    }
    fclose(f);
    if (g_device_nodes && !char_device("nvidiactl")) return NVML_ERROR_DRIVER_NOT_LOADED; /* retried next init */
    if (g_device_nodes) keep_visible();
    char *slash = strrchr(used, '/');
    if (slash) snprintf(g_faults, sizeof g_faults, "%.*s/fake-nvml.faults", (int)(slash - used), used);
    g_mig_state[0] = 0;
    memset(&g_mig_seen, 0, sizeof g_mig_seen);
    if (slash && g_shared_state) snprintf(g_mig_state, sizeof g_mig_state, "%.*s/fake-nvml.mig", (int)(slash - used), used);
    g_faults_offset = 0;
    clock_gettime(CLOCK_MONOTONIC, &g_started);
    g_loaded = 1;
    poll_faults(1);
    return NVML_SUCCESS;
}

/* ---- lookups ------------------------------------------------------------------------------- */

#define LOCKED(body) do { pthread_mutex_lock(&g_mu); nvmlReturn_t r_ = (body); pthread_mutex_unlock(&g_mu); return r_; } while (0)

static nvmlReturn_t ready(void) {
    if (g_refs <= 0) return NVML_ERROR_UNINITIALIZED;
    mig_sync_in();
    return NVML_SUCCESS;
}

/* The physical device behind a handle (MIG handles resolve to their parent). */
static nvmlReturn_t lookup(nvmlDevice_t h, fake_dev **out) {
    nvmlReturn_t r = ready();
    if (r) return r;
    if (!h || h->dev >= g_count) return NVML_ERROR_INVALID_ARGUMENT;
    if (g_devs[h->dev].lost) return NVML_ERROR_GPU_IS_LOST;
    *out = &g_devs[h->dev];
    return NVML_SUCCESS;
}

static nvmlReturn_t lookup_gi(nvmlGpuInstance_t h, fake_dev **dev, gi_t **gi) {
    nvmlReturn_t r = ready();
    if (r) return r;
    if (!h || h->dev >= g_count || h->slot >= MAX_GI || !g_devs[h->dev].gis[h->slot].used) return NVML_ERROR_INVALID_ARGUMENT;
    if (g_devs[h->dev].lost) return NVML_ERROR_GPU_IS_LOST;
    *dev = &g_devs[h->dev];
    *gi = &(*dev)->gis[h->slot];
    return NVML_SUCCESS;
}

static nvmlReturn_t put_string(char *dst, unsigned length, const char *src) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

static double elapsed_s(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - g_started.tv_sec) + (double)(now.tv_nsec - g_started.tv_nsec) / 1e9;
}

static void fill_pci(nvmlPciInfo_t *pci, unsigned domain, unsigned bus, unsigned device, unsigned id) {
    memset(pci, 0, sizeof *pci);
    pci->domain = domain;
    pci->bus = bus;
    pci->device = device;
    pci->pciDeviceId = id;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, domain & 0xFFFF, bus, device);
    snprintf(pci->busId, sizeof pci->busId, NVML_DEVICE_PCI_BUS_ID_FMT, domain, bus, device);
}

/* ---- init, system ------------------------------------------------------------------------ */

static nvmlReturn_t do_init(void) {
    if (!g_loaded) {
        nvmlReturn_t r = load_config();
        if (r) return r;
    }
    if (g_init_error) return (nvmlReturn_t)g_init_error;
    g_refs++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; LOCKED(do_init()); }
nvmlReturn_t nvmlInit_v2(void) { LOCKED(do_init()); }

static nvmlReturn_t do_shutdown(void) {
    if (!g_refs) return NVML_ERROR_UNINITIALIZED;
    g_refs--;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) { LOCKED(do_shutdown()); }

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t get_driver(char *version, unsigned length) {
    nvmlReturn_t r = ready();
    return r ? r : put_string(version, length, g_driver);
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) { LOCKED(get_driver(version, length)); }

static nvmlReturn_t get_cuda(int *version) {
    nvmlReturn_t r = ready();
    if (r) return r;
    *version = g_cuda;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) { LOCKED(get_cuda(cudaDriverVersion)); }

/* ---- devices ------------------------------------------------------------------------------- */

static nvmlReturn_t get_count(unsigned *count) {
    nvmlReturn_t r = ready();
    if (r) return r;
    poll_faults(0);
    *count = g_count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) { LOCKED(get_count(deviceCount)); }

static nvmlReturn_t get_handle(unsigned index, nvmlDevice_t *device) {
    nvmlReturn_t r = ready();
    if (r) return r;
    if (index >= g_count || !device) return NVML_ERROR_INVALID_ARGUMENT;
    if (g_devs[index].lost) return NVML_ERROR_GPU_IS_LOST;
    *device = &g_phys[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) { LOCKED(get_handle(index, device)); }

/* One accessor per string attribute; MIG handles have their own UUID. */
static nvmlReturn_t get_string(nvmlDevice_t h, int which, char *out, unsigned length) {
    fake_dev *d;
    nvmlReturn_t r = lookup(h, &d);
    if (r) return r;
    if (which == 1 && h->mig) return put_string(out, length, d->gis[h->slot].uuid);
    const char *values[] = {d->name, d->uuid, d->serial, d->part};
    return put_string(out, length, values[which]);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) { LOCKED(get_string(device, 0, name, length)); }
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) { LOCKED(get_string(device, 1, uuid, length)); }
nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length) { LOCKED(get_string(device, 2, serial, length)); }
nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t device, char *partNumber, unsigned int length) { LOCKED(get_string(device, 3, partNumber, length)); }

static nvmlReturn_t get_pci(nvmlDevice_t h, nvmlPciInfo_t *pci) {
    fake_dev *d;
    nvmlReturn_t r = lookup(h, &d);
    if (r) return r;
    fill_pci(pci, d->domain, d->bus, d->device, d->pci_device_id);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) { LOCKED(get_pci(device, pci)); }

/* Memory: a MIG handle reports its profile's memory; used memory follows the utilisation. */
static nvmlReturn_t get_memory(nvmlDevice_t h, unsigned long long *total, unsigned long long *reserved,
                               unsigned long long *used) {
    fake_dev *d;
    nvmlReturn_t r = lookup(h, &d);
    if (r) return r;
    unsigned long long mib = h->mig ? d->profiles[d->gis[h->slot].profile].memory_mib : d->memory_mib;
    *total = mib * MIB;
    *reserved = h->mig ? 0 : d->reserved_mib * MIB;
    *used = (mib - (*reserved / MIB)) * (2 + 9 * (unsigned long long)d->util) / 1000 * MIB; /* 0.2 % idle, ~90 % at full load */
    return NVML_SUCCESS;
}

static nvmlReturn_t memory_v1(nvmlDevice_t h, nvmlMemory_t *m) {
    unsigned long long total, reserved, used;
    nvmlReturn_t r = get_memory(h, &total, &reserved, &used);
    if (r) return r;
    m->total = total;
    m->used = used + reserved; /* v1 "used" includes what the driver reserved */
    m->free = total - m->used;
    return NVML_SUCCESS;
}

static nvmlReturn_t memory_v2(nvmlDevice_t h, nvmlMemory_v2_t *m) {
    unsigned long long total, reserved, used;
    if (m->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlReturn_t r = get_memory(h, &total, &reserved, &used);
    if (r) return r;
    m->total = total;
    m->reserved = reserved;
    m->used = used;
    m->free = total - reserved - used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) { LOCKED(memory_v1(device, memory)); }
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) { LOCKED(memory_v2(device, memory)); }

/* Small integer attributes: 0 cc, 1 arch, 2 numa, 3 minor. */
static nvmlReturn_t get_int(nvmlDevice_t h, int which, int *a, int *b) {
    fake_dev *d;
    nvmlReturn_t r = lookup(h, &d);
    if (r) return r;
    switch (which) {
    case 0: if (d->cc_major < 0) return NVML_ERROR_NOT_SUPPORTED; *a = d->cc_major; *b = d->cc_minor; break;
    case 1: *a = d->arch; break;
    case 2: if (d->numa < 0) return NVML_ERROR_NOT_SUPPORTED; *a = d->numa; break;
    default: *a = d->minor; break;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) { LOCKED(get_int(device, 0, major, minor)); }

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch) {
    int value = 0;
    pthread_mutex_lock(&g_mu);
    nvmlReturn_t r = get_int(device, 1, &value, NULL);
    pthread_mutex_unlock(&g_mu);
    if (!r) *arch = (nvmlDeviceArchitecture_t)value;
    return r;
}

static nvmlReturn_t get_uint(nvmlDevice_t h, int which, unsigned *out) {
    int value = 0;
    nvmlReturn_t r = get_int(h, which, &value, NULL);
    if (!r) *out = (unsigned)value;
    return r;
}

nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node) { LOCKED(get_uint(device, 2, node)); }
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber) { LOCKED(get_uint(device, 3, minorNumber)); }

/* ---- MIG ----------------------------------------------------------------------------------- */

static void destroy_instances(fake_dev *d) {
    for (unsigned s = 0; s < MAX_GI; s++) d->gis[s].used = d->gis[s].has_ci = 0;
}

static nvmlReturn_t mig_capable(nvmlDevice_t h, fake_dev **d) {
    nvmlReturn_t r = lookup(h, d);
    if (r) return r;
    if (h->mig) return NVML_ERROR_INVALID_ARGUMENT;
    return (*d)->mig_capable ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

static nvmlReturn_t get_mig_mode(nvmlDevice_t h, unsigned *current, unsigned *pending) {
    fake_dev *d;
    nvmlReturn_t r = mig_capable(h, &d);
    if (r) return r;
    *current = (unsigned)d->mig_cur;
    *pending = (unsigned)d->mig_pend;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode) { LOCKED(get_mig_mode(device, currentMode, pendingMode)); }

static nvmlReturn_t set_mig_mode(nvmlDevice_t h, unsigned mode, nvmlReturn_t *status) {
    fake_dev *d;
    nvmlReturn_t r = mig_capable(h, &d);
    if (r) return r;
    if (mode > 1) return NVML_ERROR_INVALID_ARGUMENT;
    d->mig_pend = (int)mode;
    if (!d->mig_reset_required && d->mig_cur != d->mig_pend) {
        d->mig_cur = d->mig_pend;
        destroy_instances(d);
    }
    *status = d->mig_cur == d->mig_pend ? NVML_SUCCESS : NVML_ERROR_RESET_REQUIRED;
    mig_sync_out();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t *activationStatus) { LOCKED(set_mig_mode(device, mode, activationStatus)); }

static nvmlReturn_t gi_profile_info(nvmlDevice_t h, unsigned profile, nvmlGpuInstanceProfileInfo_t *info) {
    fake_dev *d;
    nvmlReturn_t r = mig_capable(h, &d);
    if (r) return r;
    if (profile >= MAX_PROFILES || !d->profiles[profile].present) return NVML_ERROR_INVALID_ARGUMENT;
    profile_t *p = &d->profiles[profile];
    memset(info, 0, sizeof *info);
    info->id = p->id;
    info->isP2pSupported = 1;
    info->sliceCount = p->slices;
    info->instanceCount = p->instances;
    info->multiprocessorCount = p->sms;
    info->copyEngineCount = p->copy;
    info->decoderCount = p->dec;
    info->encoderCount = p->enc;
    info->jpegCount = p->jpeg;
    info->ofaCount = p->ofa;
    info->memorySizeMB = p->memory_mib;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_t *info) { LOCKED(gi_profile_info(device, profile, info)); }

static int profile_by_id(fake_dev *d, unsigned id) {
    for (int p = 0; p < MAX_PROFILES; p++)
        if (d->profiles[p].present && d->profiles[p].id == id) return p;
    return -1;
}

/* Capacity = the largest profile: its slices and memory. */
static void used_capacity(fake_dev *d, unsigned *slices, unsigned long long *memory, unsigned *max_slices,
                          unsigned long long *max_memory) {
    *slices = 0; *memory = 0; *max_slices = 0; *max_memory = 0;
    for (int p = 0; p < MAX_PROFILES; p++) {
        if (!d->profiles[p].present) continue;
        if (d->profiles[p].slices > *max_slices) *max_slices = d->profiles[p].slices;
        if (d->profiles[p].memory_mib > *max_memory) *max_memory = d->profiles[p].memory_mib;
    }
    for (unsigned s = 0; s < MAX_GI; s++) {
        if (!d->gis[s].used) continue;
        *slices += d->profiles[d->gis[s].profile].slices;
        *memory += d->profiles[d->gis[s].profile].memory_mib;
    }
}

static unsigned long long fnv(const char *text, unsigned a, unsigned b) {
    unsigned long long h = 1469598103934665603ULL;
    for (; *text; text++) h = (h ^ (unsigned char)*text) * 1099511628211ULL;
    h = (h ^ a) * 1099511628211ULL;
    return (h ^ b) * 1099511628211ULL;
}

static nvmlReturn_t create_gi(nvmlDevice_t h, unsigned profile_id, nvmlGpuInstance_t *out) {
    fake_dev *d;
    nvmlReturn_t r = mig_capable(h, &d);
    if (r) return r;
    if (!d->mig_cur) return NVML_ERROR_NOT_SUPPORTED;
    int p = profile_by_id(d, profile_id);
    if (p < 0) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned same = 0, slices, max_slices, free_slot = MAX_GI;
    unsigned long long memory, max_memory;
    for (unsigned s = 0; s < MAX_GI; s++) {
        if (d->gis[s].used && d->gis[s].profile == (unsigned)p) same++;
        if (!d->gis[s].used && free_slot == MAX_GI) free_slot = s;
    }
    used_capacity(d, &slices, &memory, &max_slices, &max_memory);
    if (same >= d->profiles[p].instances || free_slot == MAX_GI || slices + d->profiles[p].slices > max_slices ||
        memory + d->profiles[p].memory_mib > max_memory)
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    gi_t *gi = &d->gis[free_slot];
    memset(gi, 0, sizeof *gi);
    gi->used = 1;
    gi->id = d->next_gi_id++;
    gi->profile = (unsigned)p;
    unsigned long long x = fnv(d->uuid, gi->id, ++d->generation), y = fnv(d->uuid, ~gi->id, d->generation);
    snprintf(gi->uuid, sizeof gi->uuid, "MIG-%08x-%04x-%04x-%04x-%012llx", (unsigned)(x >> 32), (unsigned)(x >> 16) & 0xFFFF,
             (unsigned)x & 0xFFFF, (unsigned)(y >> 48), y & 0xFFFFFFFFFFFFULL);
    *out = &g_gi_handles[h->dev][free_slot];
    mig_sync_out();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstance_t *gpuInstance) { LOCKED(create_gi(device, profileId, gpuInstance)); }

static nvmlReturn_t list_gis(nvmlDevice_t h, unsigned profile_id, nvmlGpuInstance_t *out, unsigned *count) {
    fake_dev *d;
    nvmlReturn_t r = mig_capable(h, &d);
    if (r) return r;
    int p = profile_by_id(d, profile_id);
    if (p < 0 || !count) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = 0;
    for (unsigned s = 0; s < MAX_GI; s++)
        if (d->gis[s].used && d->gis[s].profile == (unsigned)p) out[n++] = &g_gi_handles[h->dev][s];
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstance_t *gpuInstances, unsigned int *count) { LOCKED(list_gis(device, profileId, gpuInstances, count)); }

static nvmlReturn_t gi_by_id(nvmlDevice_t h, unsigned id, nvmlGpuInstance_t *out) {
    fake_dev *d;
    nvmlReturn_t r = mig_capable(h, &d);
    if (r) return r;
    for (unsigned s = 0; s < MAX_GI; s++)
        if (d->gis[s].used && d->gis[s].id == id) { *out = &g_gi_handles[h->dev][s]; return NVML_SUCCESS; }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *gpuInstance) { LOCKED(gi_by_id(device, id, gpuInstance)); }

static nvmlReturn_t gi_info(nvmlGpuInstance_t h, nvmlGpuInstanceInfo_t *info) {
    fake_dev *d;
    gi_t *gi;
    nvmlReturn_t r = lookup_gi(h, &d, &gi);
    if (r) return r;
    memset(info, 0, sizeof *info);
    info->device = &g_phys[h->dev];
    info->id = gi->id;
    info->profileId = d->profiles[gi->profile].id;
    info->placement.size = d->profiles[gi->profile].slices;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info) { LOCKED(gi_info(gpuInstance, info)); }

static const unsigned CI_SLICES[] = {1, 2, 3, 4, 7, 8, 6, 1, 7}; /* by NVML_COMPUTE_INSTANCE_PROFILE_* index */

static nvmlReturn_t ci_profile_info(nvmlGpuInstance_t h, unsigned profile, unsigned eng, nvmlComputeInstanceProfileInfo_t *info) {
    fake_dev *d;
    gi_t *gi;
    nvmlReturn_t r = lookup_gi(h, &d, &gi);
    if (r) return r;
    unsigned gi_slices = d->profiles[gi->profile].slices;
    /* Only the plain profiles (indices 0-6) exist here; a CI may not be larger than its GI. */
    if (eng != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED || profile > 6 || CI_SLICES[profile] > gi_slices)
        return NVML_ERROR_NOT_SUPPORTED;
    memset(info, 0, sizeof *info);
    info->id = profile;
    info->sliceCount = CI_SLICES[profile];
    info->instanceCount = gi_slices / CI_SLICES[profile];
    info->multiprocessorCount = d->profiles[gi->profile].sms * CI_SLICES[profile] / gi_slices;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile, nvmlComputeInstanceProfileInfo_t *info) { LOCKED(ci_profile_info(gpuInstance, profile, engProfile, info)); }

static nvmlReturn_t create_ci(nvmlGpuInstance_t h, unsigned profile_id, nvmlComputeInstance_t *out) {
    fake_dev *d;
    gi_t *gi;
    nvmlReturn_t r = lookup_gi(h, &d, &gi);
    if (r) return r;
    if (profile_id > 6 || CI_SLICES[profile_id] > d->profiles[gi->profile].slices) return NVML_ERROR_INVALID_ARGUMENT;
    if (gi->has_ci) return NVML_ERROR_INSUFFICIENT_RESOURCES; /* this fake keeps one CI per GI */
    gi->has_ci = 1;
    gi->ci_profile = profile_id;
    *out = &g_ci_handles[h->dev][h->slot];
    mig_sync_out();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance, unsigned int profileId, nvmlComputeInstance_t *computeInstance) { LOCKED(create_ci(gpuInstance, profileId, computeInstance)); }

static nvmlReturn_t list_cis(nvmlGpuInstance_t h, unsigned profile_id, nvmlComputeInstance_t *out, unsigned *count) {
    fake_dev *d;
    gi_t *gi;
    nvmlReturn_t r = lookup_gi(h, &d, &gi);
    if (r) return r;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = 0;
    if (gi->has_ci && gi->ci_profile == profile_id) { out[0] = &g_ci_handles[h->dev][h->slot]; *count = 1; }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId, nvmlComputeInstance_t *computeInstances, unsigned int *count) { LOCKED(list_cis(gpuInstance, profileId, computeInstances, count)); }

static nvmlReturn_t destroy_ci(nvmlComputeInstance_t h) {
    if (!h || h->dev >= g_count || h->slot >= MAX_GI) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = ready();
    if (r) return r;
    gi_t *gi = &g_devs[h->dev].gis[h->slot];
    if (!gi->used || !gi->has_ci) return NVML_ERROR_INVALID_ARGUMENT;
    gi->has_ci = 0;
    mig_sync_out();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance) { LOCKED(destroy_ci(computeInstance)); }

static nvmlReturn_t destroy_gi(nvmlGpuInstance_t h) {
    fake_dev *d;
    gi_t *gi;
    nvmlReturn_t r = lookup_gi(h, &d, &gi);
    if (r) return r;
    if (gi->has_ci) return NVML_ERROR_IN_USE;
    gi->used = 0;
    mig_sync_out();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance) { LOCKED(destroy_gi(gpuInstance)); }

static nvmlReturn_t max_mig(nvmlDevice_t h, unsigned *count) {
    fake_dev *d;
    nvmlReturn_t r = mig_capable(h, &d);
    if (r) return r;
    *count = 7;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) { LOCKED(max_mig(device, count)); }

static nvmlReturn_t mig_handle(nvmlDevice_t h, unsigned index, nvmlDevice_t *out) {
    fake_dev *d;
    nvmlReturn_t r = mig_capable(h, &d);
    if (r) return r;
    unsigned n = 0;
    for (unsigned s = 0; s < MAX_GI; s++) {
        if (!d->gis[s].used || !d->gis[s].has_ci) continue;
        if (n++ == index) { *out = &g_mig[h->dev][s]; return NVML_SUCCESS; }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice) { LOCKED(mig_handle(device, index, migDevice)); }

static nvmlReturn_t mig_ids(nvmlDevice_t h, int which, unsigned *id) {
    fake_dev *d;
    nvmlReturn_t r = lookup(h, &d);
    if (r) return r;
    if (!h->mig) return NVML_ERROR_INVALID_ARGUMENT;
    *id = which == 0 ? d->gis[h->slot].id : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) { LOCKED(mig_ids(device, 0, id)); }
nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) { LOCKED(mig_ids(device, 1, id)); }

/* ---- topology ------------------------------------------------------------------------------ */

static nvmlReturn_t common_ancestor(nvmlDevice_t a, nvmlDevice_t b, nvmlGpuTopologyLevel_t *level) {
    fake_dev *da, *db;
    nvmlReturn_t r = lookup(a, &da);
    if (!r) r = lookup(b, &db);
    if (r) return r;
    *level = (nvmlGpuTopologyLevel_t)g_topology[a->dev][b->dev];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2, nvmlGpuTopologyLevel_t *pathInfo) { LOCKED(common_ancestor(device1, device2, pathInfo)); }

static nvmlReturn_t nvlink(nvmlDevice_t h, unsigned link, nvmlEnableState_t *active, nvmlPciInfo_t *pci) {
    fake_dev *d;
    nvmlReturn_t r = lookup(h, &d);
    if (r) return r;
    if (!d->n_links) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= (unsigned)d->n_links) return NVML_ERROR_INVALID_ARGUMENT;
    if (active) *active = NVML_FEATURE_ENABLED;
    if (pci) {
        unsigned domain, bus, device;
        parse_bus(d->links[link], &domain, &bus, &device);
        fill_pci(pci, domain, bus, device, 0x22A310DE); /* an NVSwitch or the peer GPU */
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive) { LOCKED(nvlink(device, link, isActive, NULL)); }
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci) { LOCKED(nvlink(device, link, NULL, pci)); }

/* ---- metrics ------------------------------------------------------------------------------- */

/* Unsigned readings: 0 gpu util, 1 memory util, 2 encoder, 3 decoder, 4 temp, 5 power, 6 SM clock,
 * 7 memory clock, 8 PCIe replays. */
static nvmlReturn_t reading(nvmlDevice_t h, int which, unsigned *out) {
    fake_dev *d;
    nvmlReturn_t r = lookup(h, &d);
    if (r) return r;
    if (h->mig && which <= 1) return NVML_ERROR_NOT_SUPPORTED; /* as on real MIG devices */
    switch (which) {
    case 0: *out = d->util; break;
    case 1: *out = d->util * 6 / 10; break;
    case 2: case 3: case 8: *out = 0; break;
    case 4: *out = d->temp; break;
    case 5: *out = d->power_mw; break;
    case 6: *out = d->sm_clock; break;
    default: *out = d->mem_clock; break;
    }
    return NVML_SUCCESS;
}

static nvmlReturn_t utilization(nvmlDevice_t h, nvmlUtilization_t *u) {
    nvmlReturn_t r = reading(h, 0, &u->gpu);
    return r ? r : reading(h, 1, &u->memory);
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization_) { LOCKED(utilization(device, utilization_)); }

static nvmlReturn_t codec(nvmlDevice_t h, int which, unsigned *util, unsigned *period) {
    *period = 167000;
    return reading(h, which, util);
}

nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization_, unsigned int *samplingPeriodUs) { LOCKED(codec(device, 2, utilization_, samplingPeriodUs)); }
nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization_, unsigned int *samplingPeriodUs) { LOCKED(codec(device, 3, utilization_, samplingPeriodUs)); }

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType, unsigned int *temp) {
    if (sensorType != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    LOCKED(reading(device, 4, temp));
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) { LOCKED(reading(device, 5, power)); }
nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value) { LOCKED(reading(device, 8, value)); }

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock) {
    if (type != NVML_CLOCK_SM && type != NVML_CLOCK_MEM) return NVML_ERROR_NOT_SUPPORTED;
    LOCKED(reading(device, type == NVML_CLOCK_SM ? 6 : 7, clock));
}

static nvmlReturn_t energy(nvmlDevice_t h, unsigned long long *out) {
    fake_dev *d;
    nvmlReturn_t r = lookup(h, &d);
    if (r) return r;
    *out = d->energy_mj + (unsigned long long)(d->power_mw * elapsed_s()); /* mW x s = mJ */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy_) { LOCKED(energy(device, energy_)); }

static nvmlReturn_t ecc(nvmlDevice_t h, nvmlMemoryErrorType_t type, nvmlEccCounterType_t counter, unsigned long long *out) {
    fake_dev *d;
    nvmlReturn_t r = lookup(h, &d);
    if (r) return r;
    if (counter != NVML_VOLATILE_ECC && counter != NVML_AGGREGATE_ECC) return NVML_ERROR_INVALID_ARGUMENT;
    *out = type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED ? d->dbe : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType, nvmlEccCounterType_t counterType, unsigned long long *eccCounts) { LOCKED(ecc(device, errorType, counterType, eccCounts)); }

static nvmlReturn_t field_values(nvmlDevice_t h, int count, nvmlFieldValue_t *values) {
    fake_dev *d;
    nvmlReturn_t r = lookup(h, &d);
    if (r) return r;
    for (int i = 0; i < count; i++) {
        values[i].valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        values[i].nvmlReturn = NVML_SUCCESS;
        if (values[i].fieldId == NVML_FI_DEV_MEMORY_TEMP) values[i].value.uiVal = d->mem_temp;
        else if (values[i].fieldId == NVML_FI_DEV_PCIE_REPLAY_COUNTER) values[i].value.uiVal = 0;
        else values[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values) { LOCKED(field_values(device, valuesCount, values)); }

/* ---- events -------------------------------------------------------------------------------- */

#define SUPPORTED_EVENTS (nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError | nvmlEventTypeXidCriticalError)

static void push(event_set *set, unsigned dev, unsigned long long type, unsigned long long data, unsigned gi, unsigned ci) {
    if (set->len == QUEUE_LEN) return; /* full: drop, like a slow consumer on a real driver */
    queued_event *e = &set->queue[(set->head + set->len++) % QUEUE_LEN];
    *e = (queued_event){&g_phys[dev], type, data, gi, ci};
}

static nvmlReturn_t set_create(nvmlEventSet_t *out) {
    nvmlReturn_t r = ready();
    if (r) return r;
    for (unsigned i = 0; i < MAX_SETS; i++) {
        if (g_sets[i].used) continue;
        memset(&g_sets[i], 0, sizeof g_sets[i]);
        g_sets[i].used = 1;
        g_set_handles[i].id = i;
        *out = &g_set_handles[i];
        return NVML_SUCCESS;
    }
    return NVML_ERROR_INSUFFICIENT_RESOURCES;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) { LOCKED(set_create(set)); }

static nvmlReturn_t supported_events(nvmlDevice_t h, unsigned long long *types) {
    fake_dev *d;
    nvmlReturn_t r = lookup(h, &d);
    if (r) return r;
    *types = SUPPORTED_EVENTS;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes) { LOCKED(supported_events(device, eventTypes)); }

static nvmlReturn_t register_events(nvmlDevice_t h, unsigned long long types, nvmlEventSet_t s) {
    fake_dev *d;
    nvmlReturn_t r = lookup(h, &d);
    if (r) return r;
    if (!s || s->id >= MAX_SETS || !g_sets[s->id].used || h->mig) return NVML_ERROR_INVALID_ARGUMENT;
    if (types & ~SUPPORTED_EVENTS) return NVML_ERROR_NOT_SUPPORTED;
    g_sets[s->id].mask[h->dev] |= types;
    if ((types & nvmlEventTypeXidCriticalError) && g_boot_xid_dev == (int)h->dev) {
        push(&g_sets[s->id], h->dev, nvmlEventTypeXidCriticalError, g_boot_xid, 0xFFFFFFFFu, 0xFFFFFFFFu);
        g_boot_xid_dev = -1;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set) { LOCKED(register_events(device, eventTypes, set)); }

static int before(const struct timespec *a, const struct timespec *b) {
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

static struct timespec after_ms(struct timespec t, unsigned ms) {
    t.tv_sec += ms / 1000;
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) { t.tv_sec++; t.tv_nsec -= 1000000000L; }
    return t;
}

/* Waits in slices of FAULT_POLL_MS so that faults written by another process arrive while waiting. */
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t s, nvmlEventData_t *data, unsigned int timeoutms) {
    struct timespec now, deadline, slice;
    clock_gettime(CLOCK_REALTIME, &now);
    deadline = after_ms(now, timeoutms);
    pthread_mutex_lock(&g_mu);
    nvmlReturn_t r = ready();
    while (!r) {
        if (!s || s->id >= MAX_SETS || !g_sets[s->id].used) { r = NVML_ERROR_INVALID_ARGUMENT; break; }
        poll_faults(0);
        event_set *set = &g_sets[s->id];
        if (set->lost_pending && !set->len) { set->lost_pending = 0; r = NVML_ERROR_GPU_IS_LOST; break; }
        if (set->len) { /* queued events first: an XID 79 arrives, then the GPU answers "lost" */
            queued_event *e = &set->queue[set->head];
            set->head = (set->head + 1) % QUEUE_LEN;
            set->len--;
            data->device = e->device;
            data->eventType = e->type;
            data->eventData = e->data;
            data->gpuInstanceId = e->gi;
            data->computeInstanceId = e->ci;
            break;
        }
        clock_gettime(CLOCK_REALTIME, &now);
        if (!before(&now, &deadline)) { r = NVML_ERROR_TIMEOUT; break; }
        slice = after_ms(now, FAULT_POLL_MS);
        pthread_cond_timedwait(&g_cv, &g_mu, before(&slice, &deadline) ? &slice : &deadline);
        r = ready();
    }
    pthread_mutex_unlock(&g_mu);
    return r;
}

static nvmlReturn_t set_free(nvmlEventSet_t s) {
    nvmlReturn_t r = ready();
    if (r) return r;
    if (!s || s->id >= MAX_SETS || !g_sets[s->id].used) return NVML_ERROR_INVALID_ARGUMENT;
    g_sets[s->id].used = 0;
    pthread_cond_broadcast(&g_cv);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) { LOCKED(set_free(set)); }

/* ---- test controls (not NVML) -------------------------------------------------------------- */

static nvmlReturn_t inject(unsigned index, unsigned long long xid, unsigned gi, unsigned ci) {
    if (!g_loaded || index >= g_count) return NVML_ERROR_INVALID_ARGUMENT;
    if (xid == 48) g_devs[index].dbe++; /* XID 48: double-bit ECC error */
    for (unsigned i = 0; i < MAX_SETS; i++)
        if (g_sets[i].used && (g_sets[i].mask[index] & nvmlEventTypeXidCriticalError))
            push(&g_sets[i], index, nvmlEventTypeXidCriticalError, xid, gi, ci);
    pthread_cond_broadcast(&g_cv);
    return NVML_SUCCESS;
}

int fakeNvmlInjectXid(unsigned index, unsigned long long xid, unsigned gi, unsigned ci) { LOCKED(inject(index, xid, gi, ci)); }

static nvmlReturn_t set_lost(unsigned index, int lost) {
    if (!g_loaded || index >= g_count) return NVML_ERROR_INVALID_ARGUMENT;
    g_devs[index].lost = lost;
    for (unsigned i = 0; lost && i < MAX_SETS; i++)
        if (g_sets[i].used && g_sets[i].mask[index]) g_sets[i].lost_pending = 1;
    pthread_cond_broadcast(&g_cv);
    return NVML_SUCCESS;
}

int fakeNvmlSetLost(unsigned index, int lost) { LOCKED(set_lost(index, lost)); }

static nvmlReturn_t reset_gpu(unsigned index) {
    if (!g_loaded || index >= g_count) return NVML_ERROR_INVALID_ARGUMENT;
    destroy_instances(&g_devs[index]); /* MIG instances do not survive a GPU reset */
    g_devs[index].mig_cur = g_devs[index].mig_pend;
    mig_sync_out();
    return NVML_SUCCESS;
}

int fakeNvmlResetGpu(unsigned index) { LOCKED(reset_gpu(index)); }

static nvmlReturn_t set_util(unsigned index, unsigned pct) {
    if (!g_loaded || index >= g_count || pct > 100) return NVML_ERROR_INVALID_ARGUMENT;
    g_devs[index].util = pct;
    return NVML_SUCCESS;
}

int fakeNvmlSetUtilization(unsigned index, unsigned pct) { LOCKED(set_util(index, pct)); }

/* ---- faults from the faults file (caller holds g_mu) ------------------------------------------ */

static int by_uuid(const char *uuid) {
    for (unsigned i = 0; i < g_count; i++)
        if (!strcmp(g_devs[i].uuid, uuid)) return (int)i;
    return -1;
}

static void apply_fault(const char *line, int replay) {
    char verb[16], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    unsigned long long code = 0;
    int n = sscanf(line, "%15s %79s %llu", verb, uuid, &code);
    int index = n >= 2 ? by_uuid(uuid) : -1;
    if (index < 0) return; /* not one of this process's GPUs */
    if (!strcmp(verb, "xid") && n == 3) {
        if (!replay) inject((unsigned)index, code, 0xFFFFFFFFu, 0xFFFFFFFFu);
        if (code == 79) set_lost((unsigned)index, 1);
    } else if (!strcmp(verb, "lost")) {
        set_lost((unsigned)index, 1);
    } else if (!strcmp(verb, "recover")) {
        set_lost((unsigned)index, 0);
    }
}

static void poll_faults(int replay) {
    struct stat st;
    if (!g_faults[0] || stat(g_faults, &st) != 0) return;
    if (st.st_size < g_faults_offset) { g_faults_offset = 0; replay = 1; } /* rewritten: state only */
    if (st.st_size == g_faults_offset) return;
    FILE *f = fopen(g_faults, "r");
    if (!f) return;
    char line[256];
    if (fseek(f, g_faults_offset, SEEK_SET) == 0) {
        while (fgets(line, sizeof line, f)) {
            size_t n = strlen(line);
            if (line[n - 1] != '\n') break; /* a line still being written: read it whole next time */
            g_faults_offset += (long)n;
            line[n - 1] = 0;
            apply_fault(line, replay);
        }
    }
    fclose(f);
}

/* ---- MIG state shared through fake-nvml.mig (caller holds g_mu) ------------------------------- */
/* Lines: "gpu <uuid> <current> <pending> <next_gi_id> <generation>", then its instances as
 * "gi <uuid> <slot> <id> <profile index> <has_ci> <ci_profile> <MIG uuid>". A writer keeps the lines
 * of GPUs it does not see (a container sees only its own) and replaces the file atomically. */

static int same_file(const struct stat *a, const struct stat *b) {
    return a->st_ino == b->st_ino && a->st_size == b->st_size && a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
           a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

static void mig_sync_in(void) {
    struct stat st;
    if (!g_mig_state[0] || stat(g_mig_state, &st) != 0 || same_file(&st, &g_mig_seen)) return;
    FILE *f = fopen(g_mig_state, "r");
    if (!f) return;
    g_mig_seen = st;
    char line[512], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE], mig[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    while (fgets(line, sizeof line, f)) {
        int cur, pend, has_ci, index;
        unsigned next, generation, slot, id, profile, ci_profile;
        if (sscanf(line, "gpu %79s %d %d %u %u", uuid, &cur, &pend, &next, &generation) == 5) {
            if ((index = by_uuid(uuid)) < 0) continue;
            fake_dev *d = &g_devs[index];
            d->mig_cur = cur;
            d->mig_pend = pend;
            d->next_gi_id = next;
            d->generation = generation;
            destroy_instances(d);
        } else if (sscanf(line, "gi %79s %u %u %u %d %u %79s", uuid, &slot, &id, &profile, &has_ci, &ci_profile, mig) == 7) {
            if ((index = by_uuid(uuid)) < 0 || slot >= MAX_GI || profile >= MAX_PROFILES) continue;
            gi_t *gi = &g_devs[index].gis[slot];
            *gi = (gi_t){.used = 1, .has_ci = has_ci, .id = id, .profile = profile, .ci_profile = ci_profile};
            copy_field(gi->uuid, sizeof gi->uuid, mig);
        }
    }
    fclose(f);
}

/* Write the state to ``path`` atomically; 0 on success. */
static int write_state(const char *path) {
    char tmp[PATH_LEN * 2], line[512], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    snprintf(tmp, sizeof tmp, "%s.%d", path, (int)getpid());
    FILE *out = fopen(tmp, "w");
    if (!out) return -1;
    FILE *in = fopen(path, "r");
    while (in && fgets(line, sizeof line, in)) { /* other processes' GPUs stay as they are */
        if (sscanf(line, "%*s %79s", uuid) == 1 && by_uuid(uuid) < 0) fputs(line, out);
    }
    if (in) fclose(in);
    for (unsigned i = 0; i < g_count; i++) {
        fake_dev *d = &g_devs[i];
        if (!d->mig_capable) continue;
        fprintf(out, "gpu %s %d %d %u %u\n", d->uuid, d->mig_cur, d->mig_pend, d->next_gi_id, d->generation);
        for (unsigned s = 0; s < MAX_GI; s++) {
            gi_t *gi = &d->gis[s];
            if (gi->used)
                fprintf(out, "gi %s %u %u %u %d %u %s\n", d->uuid, s, gi->id, gi->profile, gi->has_ci, gi->ci_profile, gi->uuid);
        }
    }
    if (fclose(out) != 0 || rename(tmp, path) != 0) { unlink(tmp); return -1; }
    return 0;
}

/* A container given the driver's files read-only (CDI mounts them so) writes through the host root it
 * mounts, as the MIG manager does: HOST_ROOT (e.g. /host), then the driver root on the host
 * (NVIDIA_DRIVER_ROOT: "/" for a host driver, /run/nvidia/driver for a driver container's, where CDI
 * took the files from), in front of the same path. */
static void mig_sync_out(void) {
    if (!g_mig_state[0]) return;
    const char *host = getenv("HOST_ROOT");
    const char *driver_root = getenv("NVIDIA_DRIVER_ROOT");
    char through_host[PATH_LEN * 3];
    if (write_state(g_mig_state) != 0 && host && *host && g_mig_state[0] == '/') {
        if (!driver_root || !strcmp(driver_root, "/")) driver_root = "";
        snprintf(through_host, sizeof through_host, "%s%s%s", host, driver_root, g_mig_state);
        write_state(through_host);
    }
    stat(g_mig_state, &g_mig_seen);
}
