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
 *   device.N.pci_class = 24-bit PCI class (0x030200); device.N.fabric = state,status,cluster-uuid,clique
 *   device.N.nvlink = comma-separated PCI bus ids at the far end of each active link
 *   device.N.tel.{mem_util,fb_used_mib,enc_util,dec_util,pcie_replays,pcie_tx_kbps,pcie_rx_kbps,ecc_sbe,clock_events,
 *                 virtualization_mode,vgpu_licensed,gpm (1: GPM supported),gpm.<NVML_GPM_METRIC_* id> (percent),
 *                 nvlink_kib (tx,rx: NVLink throughput counters), remapped_rows (cor,unc,pending,failure)}:
 *     readings a GPU gives only when configured (memory_temperature likewise), as a GDDR part has no
 *     memory sensor and a GPU before Hopper no GPM
 *   device.N.gi_profile.P = id,slices,instances,memory_mib,sms,copy,dec,enc,jpeg,ofa (P: NVML index)
 *   topology.A.B = nvmlGpuTopologyLevel_t value (default NVML_TOPOLOGY_SYSTEM)
 *   event.xid = N:XID   (delivered to the first event set that registers GPU N for XID events)
 *
 * Faults at run time, across processes: lines appended to fake-nvml.faults beside the config file,
 * read on each device count and during event waits (at most FAULT_POLL_MS late):
 *   xid <uuid> <code>   an XID event (79, "fallen off the bus", also makes the GPU lost); it sets the
 *                       GPU's recovery action (field 230) as the driver would, see XID_ACTIONS
 *   lost <uuid>         the GPU stops answering;  recover <uuid>: it answers again
 *   reset <uuid>        the GPU was reset: its recovery action goes back to NONE (fakeNvmlResetGpu,
 *                       which nvidia-smi -r calls, appends this line, so every process sees the reset)
 * A process that starts later applies the lost/recover state and recovery actions but not old XID events.
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
#define MAX_CI 8
#define MAX_LINKS 36
#define MAX_SETS 8
#define QUEUE_LEN 64
#define MIB (1024ULL * 1024ULL)
#define FAULT_POLL_MS 200
#define PATH_LEN 4096

struct nvmlDevice_st { unsigned dev; int mig; unsigned slot, ci; }; /* MIG: GPU instance slot, CI slot */
struct nvmlGpuInstance_st { unsigned dev; unsigned slot; };
struct nvmlComputeInstance_st { unsigned dev; unsigned slot, ci; };
struct nvmlEventSet_st { unsigned id; };

typedef struct {
    int present;
    unsigned id, slices, instances, sms, copy, dec, enc, jpeg, ofa;
    unsigned long long memory_mib;
} profile_t;

/* Readings beyond the basic ones, each with whether this GPU can give it at all (has_*). */
typedef struct {
    int has_mem_temp, has_mem_util, has_remap, has_nvlink, has_fb_used, gpm, virt_mode, vgpu_licensed;
    unsigned long long fb_used_mib;
    unsigned mem_util, enc_util, dec_util, pcie_replays, pcie_tx_kbps, pcie_rx_kbps;
    unsigned remap_cor, remap_unc, remap_pending, remap_failure;
    unsigned long long sbe, nvlink_tx_kib, nvlink_rx_kib, clock_events;
    double gpm_pct[NVML_GPM_METRIC_MAX];
} telemetry_t;

typedef struct { /* a compute instance: one MIG device */
    int used;
    unsigned id, profile; /* profile: NVML_COMPUTE_INSTANCE_PROFILE_* index */
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
} ci_t;

typedef struct {
    int used;
    unsigned id, profile; /* profile: NVML index into profiles[] */
    ci_t cis[MAX_CI];
} gi_t;

typedef struct {
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    char serial[NVML_DEVICE_SERIAL_BUFFER_SIZE], part[NVML_DEVICE_PART_NUMBER_BUFFER_SIZE];
    unsigned domain, bus, device, pci_device_id;
    unsigned long long memory_mib, reserved_mib, energy_mj, dbe;
    int cc_major, cc_minor, arch, numa, minor;
    int mig_capable, mig_cur, mig_pend, mig_reset_required, lost;
    unsigned power_mw, temp, mem_temp, util, sm_clock, mem_clock, generation, next_gi_id;
    unsigned recovery_action; /* nvmlDeviceGpuRecoveryAction_t the driver asks for (field 230) */
    unsigned pci_class; /* 24-bit PCI class (0x030200: 3D controller); 0: nvmlDeviceGetPciInfoExt unsupported */
    int fabric; /* nvmlDeviceGetGpuFabricInfo answers (else NOT_SUPPORTED) */
    unsigned fabric_state, fabric_status, fabric_clique;
    unsigned char fabric_cluster[NVML_GPU_FABRIC_UUID_LEN];
    telemetry_t tel;
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
static struct nvmlDevice_st g_mig[MAX_DEVICES][MAX_GI][MAX_CI];
static struct nvmlGpuInstance_st g_gi_handles[MAX_DEVICES][MAX_GI];
static struct nvmlComputeInstance_st g_ci_handles[MAX_DEVICES][MAX_GI][MAX_CI];
static struct nvmlEventSet_st g_set_handles[MAX_SETS];
static event_set g_sets[MAX_SETS];

/* ---- config ------------------------------------------------------------------------------ */

static void copy_field(char *dst, size_t size, const char *src) {
    snprintf(dst, size, "%s", src);
}

static void parse_bus(const char *text, unsigned *domain, unsigned *bus, unsigned *device) {
    if (sscanf(text, "%x:%x:%x", domain, bus, device) != 3) { *domain = 0; *bus = 0; *device = 0; }
}

/* device.N.tel.<key>: the readings of telemetry_t; a GPU without a key cannot give that reading. */
static void set_telemetry(telemetry_t *t, const char *key, const char *value) {
    unsigned long long v = strtoull(value, NULL, 0);
    unsigned metric;
    if (!strcmp(key, "mem_util")) { t->mem_util = (unsigned)v; t->has_mem_util = 1; }
    else if (!strcmp(key, "fb_used_mib")) { t->fb_used_mib = v; t->has_fb_used = 1; }
    else if (!strcmp(key, "enc_util")) t->enc_util = (unsigned)v;
    else if (!strcmp(key, "dec_util")) t->dec_util = (unsigned)v;
    else if (!strcmp(key, "pcie_replays")) t->pcie_replays = (unsigned)v;
    else if (!strcmp(key, "pcie_tx_kbps")) t->pcie_tx_kbps = (unsigned)v;
    else if (!strcmp(key, "pcie_rx_kbps")) t->pcie_rx_kbps = (unsigned)v;
    else if (!strcmp(key, "ecc_sbe")) t->sbe = v;
    else if (!strcmp(key, "clock_events")) t->clock_events = v;
    else if (!strcmp(key, "virtualization_mode")) t->virt_mode = (int)v;
    else if (!strcmp(key, "vgpu_licensed")) t->vgpu_licensed = (int)v;
    else if (!strcmp(key, "nvlink_kib")) {
        t->has_nvlink = sscanf(value, "%llu,%llu", &t->nvlink_tx_kib, &t->nvlink_rx_kib) == 2;
    } else if (!strcmp(key, "remapped_rows")) {
        t->has_remap = sscanf(value, "%u,%u,%u,%u", &t->remap_cor, &t->remap_unc, &t->remap_pending, &t->remap_failure) == 4;
    } else if (!strcmp(key, "gpm")) t->gpm = (int)v;
    else if (sscanf(key, "gpm.%u", &metric) == 1 && metric < NVML_GPM_METRIC_MAX) t->gpm_pct[metric] = strtod(value, NULL);
}

/* device.N.fabric = state,status,cluster-uuid,clique (uuid: 32 hex digits, dashes allowed) */
static void parse_fabric(fake_dev *d, const char *value) {
    char uuid[64] = "";
    memset(d->fabric_cluster, 0, sizeof d->fabric_cluster);
    d->fabric = sscanf(value, "%u,%u,%63[^,],%u", &d->fabric_state, &d->fabric_status, uuid, &d->fabric_clique) == 4;
    unsigned n = 0;
    for (const char *c = uuid; *c && n < 2 * NVML_GPU_FABRIC_UUID_LEN; c++) {
        if (*c == '-') continue;
        char digit[2] = {*c, 0};
        d->fabric_cluster[n / 2] |= (unsigned char)(strtoul(digit, NULL, 16) << (n % 2 ? 0 : 4));
        n++;
    }
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
    else if (!strcmp(key, "memory_temperature")) { d->mem_temp = (unsigned)atoi(value); d->tel.has_mem_temp = 1; }
    else if (!strncmp(key, "tel.", 4)) set_telemetry(&d->tel, key + 4, value);
    else if (!strcmp(key, "utilization")) d->util = (unsigned)atoi(value);
    else if (!strcmp(key, "sm_clock")) d->sm_clock = (unsigned)atoi(value);
    else if (!strcmp(key, "mem_clock")) d->mem_clock = (unsigned)atoi(value);
    else if (!strcmp(key, "energy_mj")) d->energy_mj = strtoull(value, NULL, 0);
    else if (!strcmp(key, "pci_class")) d->pci_class = (unsigned)strtoul(value, NULL, 0);
    else if (!strcmp(key, "fabric")) parse_fabric(d, value);
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
        g_phys[i] = (struct nvmlDevice_st){i, 0, 0, 0};
        g_devs[i].next_gi_id = 1;
        for (unsigned s = 0; s < MAX_GI; s++) {
            g_gi_handles[i][s] = (struct nvmlGpuInstance_st){i, s};
            for (unsigned c = 0; c < MAX_CI; c++) {
                g_mig[i][s][c] = (struct nvmlDevice_st){i, 1, s, c};
                g_ci_handles[i][s][c] = (struct nvmlComputeInstance_st){i, s, c};
            }
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
    if (which == 1 && h->mig) return put_string(out, length, d->gis[h->slot].cis[h->ci].uuid);
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
    if (d->tel.has_fb_used && !h->mig) *used = d->tel.fb_used_mib * MIB;
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

/* PCI class (gpu.mode in GFD): physical GPUs only, and only when the config names one. */
static nvmlReturn_t pci_info_ext(nvmlDevice_t h, nvmlPciInfoExt_t *pci) {
    fake_dev *d;
    nvmlReturn_t r = lookup(h, &d);
    if (r) return r;
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    if (pci->version != nvmlPciInfoExt_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (h->mig || !d->pci_class) return NVML_ERROR_NOT_SUPPORTED;
    nvmlPciInfo_t base;
    fill_pci(&base, d->domain, d->bus, d->device, d->pci_device_id);
    pci->domain = base.domain;
    pci->bus = base.bus;
    pci->device = base.device;
    pci->pciDeviceId = base.pciDeviceId;
    pci->pciSubSystemId = 0;
    pci->baseClass = (d->pci_class >> 16) & 0xFF;
    pci->subClass = (d->pci_class >> 8) & 0xFF;
    memcpy(pci->busId, base.busId, sizeof pci->busId);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t device, nvmlPciInfoExt_t *pci) { LOCKED(pci_info_ext(device, pci)); }

/* NVLink fabric registration (GFD's gpu.clique): NOT_SUPPORTED unless the config gives device.N.fabric. */
static nvmlReturn_t fabric_info(nvmlDevice_t h, nvmlGpuFabricInfo_t *info) {
    fake_dev *d;
    nvmlReturn_t r = lookup(h, &d);
    if (r) return r;
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    if (h->mig || !d->fabric) return NVML_ERROR_NOT_SUPPORTED;
    memcpy(info->clusterUuid, d->fabric_cluster, sizeof info->clusterUuid);
    info->status = (nvmlReturn_t)d->fabric_status;
    info->cliqueId = d->fabric_clique;
    info->state = (nvmlGpuFabricState_t)d->fabric_state;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *gpuFabricInfo) { LOCKED(fabric_info(device, gpuFabricInfo)); }

/* A MIG device's share of its GPU: its GPU-instance profile, SMs scaled to its compute instance. */
static nvmlReturn_t attributes(nvmlDevice_t h, nvmlDeviceAttributes_t *a) {
    static const unsigned ci_slices[] = {1, 2, 3, 4, 7, 8, 6, 1, 7}; /* by NVML_COMPUTE_INSTANCE_PROFILE_* index */
    fake_dev *d;
    nvmlReturn_t r = lookup(h, &d);
    if (r) return r;
    if (!a) return NVML_ERROR_INVALID_ARGUMENT;
    if (!h->mig) return NVML_ERROR_NOT_SUPPORTED; /* as on real GPUs: MIG devices only */
    gi_t *gi = &d->gis[h->slot];
    if (!gi->used || !gi->cis[h->ci].used) return NVML_ERROR_NOT_FOUND;
    profile_t *p = &d->profiles[gi->profile];
    unsigned ci_profile = gi->cis[h->ci].profile;
    unsigned ci = ci_profile < sizeof ci_slices / sizeof ci_slices[0] ? ci_slices[ci_profile] : p->slices;
    memset(a, 0, sizeof *a);
    a->multiprocessorCount = p->slices ? p->sms * ci / p->slices : 0;
    a->sharedCopyEngineCount = p->copy;
    a->sharedDecoderCount = p->dec;
    a->sharedEncoderCount = p->enc;
    a->sharedJpegCount = p->jpeg;
    a->sharedOfaCount = p->ofa;
    a->gpuInstanceSliceCount = p->slices;
    a->computeInstanceSliceCount = ci;
    a->memorySizeMB = p->memory_mib;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes_) { LOCKED(attributes(device, attributes_)); }

/* ---- MIG ----------------------------------------------------------------------------------- */

static void destroy_instances(fake_dev *d) {
    memset(d->gis, 0, sizeof d->gis);
}

static int has_cis(const gi_t *gi) {
    for (unsigned c = 0; c < MAX_CI; c++)
        if (gi->cis[c].used) return 1;
    return 0;
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

/* Whether a GPU instance of gi_slices offers compute-instance profile index ``profile``: only the plain
 * profiles (0-6) exist here, none larger than the GPU instance, and a partial one at most about half of
 * it (a 4g instance offers 1c and 2c, not 3c), as real GPUs do. */
static int ci_offered(unsigned gi_slices, unsigned profile) {
    if (profile > 6 || CI_SLICES[profile] > gi_slices) return 0;
    return CI_SLICES[profile] == gi_slices || 2 * CI_SLICES[profile] <= gi_slices + 1;
}

static nvmlReturn_t ci_profile_info(nvmlGpuInstance_t h, unsigned profile, unsigned eng, nvmlComputeInstanceProfileInfo_t *info) {
    fake_dev *d;
    gi_t *gi;
    nvmlReturn_t r = lookup_gi(h, &d, &gi);
    if (r) return r;
    unsigned gi_slices = d->profiles[gi->profile].slices;
    if (eng != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED || !ci_offered(gi_slices, profile)) return NVML_ERROR_NOT_SUPPORTED;
    memset(info, 0, sizeof *info);
    info->id = profile;
    info->sliceCount = CI_SLICES[profile];
    info->instanceCount = gi_slices / CI_SLICES[profile];
    info->multiprocessorCount = d->profiles[gi->profile].sms * CI_SLICES[profile] / gi_slices;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile, nvmlComputeInstanceProfileInfo_t *info) { LOCKED(ci_profile_info(gpuInstance, profile, engProfile, info)); }

/* Compute instances share their GPU instance's slices: the sizes of those in use may not exceed it. */
static nvmlReturn_t create_ci(nvmlGpuInstance_t h, unsigned profile_id, nvmlComputeInstance_t *out) {
    fake_dev *d;
    gi_t *gi;
    nvmlReturn_t r = lookup_gi(h, &d, &gi);
    if (r) return r;
    unsigned gi_slices = d->profiles[gi->profile].slices, used = 0, same = 0, free_slot = MAX_CI, id = 0;
    if (!ci_offered(gi_slices, profile_id)) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned c = 0; c < MAX_CI; c++) {
        if (!gi->cis[c].used) { if (free_slot == MAX_CI) free_slot = c; continue; }
        used += CI_SLICES[gi->cis[c].profile];
        same += gi->cis[c].profile == profile_id;
    }
    if (free_slot == MAX_CI || used + CI_SLICES[profile_id] > gi_slices || same >= gi_slices / CI_SLICES[profile_id])
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    for (int taken = 1; taken; id++) { /* the lowest free ID, from 0 as in NVML */
        taken = 0;
        for (unsigned c = 0; c < MAX_CI; c++) taken |= gi->cis[c].used && gi->cis[c].id == id;
        if (!taken) break;
    }
    ci_t *ci = &gi->cis[free_slot];
    *ci = (ci_t){.used = 1, .id = id, .profile = profile_id};
    unsigned long long x = fnv(d->uuid, gi->id * MAX_CI + id, ++d->generation), y = fnv(d->uuid, ~gi->id, d->generation);
    snprintf(ci->uuid, sizeof ci->uuid, "MIG-%08x-%04x-%04x-%04x-%012llx", (unsigned)(x >> 32), (unsigned)(x >> 16) & 0xFFFF,
             (unsigned)x & 0xFFFF, (unsigned)(y >> 48), y & 0xFFFFFFFFFFFFULL);
    *out = &g_ci_handles[h->dev][h->slot][free_slot];
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
    for (unsigned c = 0; c < MAX_CI; c++)
        if (gi->cis[c].used && gi->cis[c].profile == profile_id) out[(*count)++] = &g_ci_handles[h->dev][h->slot][c];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId, nvmlComputeInstance_t *computeInstances, unsigned int *count) { LOCKED(list_cis(gpuInstance, profileId, computeInstances, count)); }

static nvmlReturn_t ci_by_id(nvmlGpuInstance_t h, unsigned id, nvmlComputeInstance_t *out) {
    fake_dev *d;
    gi_t *gi;
    nvmlReturn_t r = lookup_gi(h, &d, &gi);
    if (r) return r;
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned c = 0; c < MAX_CI; c++)
        if (gi->cis[c].used && gi->cis[c].id == id) { *out = &g_ci_handles[h->dev][h->slot][c]; return NVML_SUCCESS; }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id, nvmlComputeInstance_t *computeInstance) { LOCKED(ci_by_id(gpuInstance, id, computeInstance)); }

/* The compute instance behind a handle, which must still exist. */
static nvmlReturn_t lookup_ci(nvmlComputeInstance_t h, ci_t **ci) {
    if (!h || h->dev >= g_count || h->slot >= MAX_GI || h->ci >= MAX_CI) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = ready();
    if (r) return r;
    gi_t *gi = &g_devs[h->dev].gis[h->slot];
    if (!gi->used || !gi->cis[h->ci].used) return NVML_ERROR_INVALID_ARGUMENT;
    *ci = &gi->cis[h->ci];
    return NVML_SUCCESS;
}

static nvmlReturn_t ci_info(nvmlComputeInstance_t h, nvmlComputeInstanceInfo_t *info) {
    ci_t *ci;
    nvmlReturn_t r = lookup_ci(h, &ci);
    if (r) return r;
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    if (g_devs[h->dev].lost) return NVML_ERROR_GPU_IS_LOST;
    memset(info, 0, sizeof *info);
    info->device = &g_phys[h->dev];
    info->gpuInstance = &g_gi_handles[h->dev][h->slot];
    info->id = ci->id;
    info->profileId = ci->profile;
    info->placement.size = CI_SLICES[ci->profile];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info) { LOCKED(ci_info(computeInstance, info)); }

static nvmlReturn_t destroy_ci(nvmlComputeInstance_t h) {
    ci_t *ci;
    nvmlReturn_t r = lookup_ci(h, &ci);
    if (r) return r;
    ci->used = 0;
    mig_sync_out();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance) { LOCKED(destroy_ci(computeInstance)); }

static nvmlReturn_t destroy_gi(nvmlGpuInstance_t h) {
    fake_dev *d;
    gi_t *gi;
    nvmlReturn_t r = lookup_gi(h, &d, &gi);
    if (r) return r;
    if (has_cis(gi)) return NVML_ERROR_IN_USE;
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
    unsigned n = 0; /* one MIG device per compute instance, by GPU instance slot then CI slot */
    for (unsigned s = 0; s < MAX_GI; s++) {
        for (unsigned c = 0; d->gis[s].used && c < MAX_CI; c++) {
            if (!d->gis[s].cis[c].used) continue;
            if (n++ == index) { *out = &g_mig[h->dev][s][c]; return NVML_SUCCESS; }
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice) { LOCKED(mig_handle(device, index, migDevice)); }

static nvmlReturn_t mig_ids(nvmlDevice_t h, int which, unsigned *id) {
    fake_dev *d;
    nvmlReturn_t r = lookup(h, &d);
    if (r) return r;
    if (!h->mig) return NVML_ERROR_INVALID_ARGUMENT;
    *id = which == 0 ? d->gis[h->slot].id : d->gis[h->slot].cis[h->ci].id;
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
    case 1: *out = d->tel.has_mem_util ? d->tel.mem_util : d->util * 6 / 10; break;
    case 2: *out = d->tel.enc_util; break;
    case 3: *out = d->tel.dec_util; break;
    case 8: *out = d->tel.pcie_replays; break;
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
    *out = type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED ? d->dbe : d->tel.sbe;
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
        unsigned id = values[i].fieldId;
        if (id == NVML_FI_DEV_MEMORY_TEMP && d->tel.has_mem_temp) values[i].value.uiVal = d->mem_temp;
        else if (id == NVML_FI_DEV_PCIE_REPLAY_COUNTER) values[i].value.uiVal = d->tel.pcie_replays;
        else if ((id == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX || id == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX) &&
                 d->tel.has_nvlink && values[i].scopeId == 0xFFFFFFFFu) { /* UINT_MAX: summed over all links */
            values[i].valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
            values[i].value.ullVal = id == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX ? d->tel.nvlink_tx_kib : d->tel.nvlink_rx_kib;
        }
        else if (values[i].fieldId == NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) values[i].value.uiVal = d->recovery_action;
        else values[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values) { LOCKED(field_values(device, valuesCount, values)); }

static nvmlReturn_t pcie_throughput(nvmlDevice_t h, nvmlPcieUtilCounter_t counter, unsigned *out) {
    fake_dev *d;
    nvmlReturn_t r = lookup(h, &d);
    if (r) return r;
    if (!out || (counter != NVML_PCIE_UTIL_TX_BYTES && counter != NVML_PCIE_UTIL_RX_BYTES)) return NVML_ERROR_INVALID_ARGUMENT;
    *out = counter == NVML_PCIE_UTIL_TX_BYTES ? d->tel.pcie_tx_kbps : d->tel.pcie_rx_kbps; /* KB/s */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter, unsigned int *value) { LOCKED(pcie_throughput(device, counter, value)); }

static nvmlReturn_t remapped_rows(nvmlDevice_t h, unsigned *cor, unsigned *unc, unsigned *pending, unsigned *failure) {
    fake_dev *d;
    nvmlReturn_t r = lookup(h, &d);
    if (r) return r;
    if (!d->tel.has_remap) return NVML_ERROR_NOT_SUPPORTED; /* GPUs before Ampere, GDDR parts */
    *cor = d->tel.remap_cor; *unc = d->tel.remap_unc; *pending = d->tel.remap_pending; *failure = d->tel.remap_failure;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows, unsigned int *isPending, unsigned int *failureOccurred) { LOCKED(remapped_rows(device, corrRows, uncRows, isPending, failureOccurred)); }

static nvmlReturn_t clock_events(nvmlDevice_t h, unsigned long long *out) {
    fake_dev *d;
    nvmlReturn_t r = lookup(h, &d);
    if (r) return r;
    *out = d->tel.clock_events;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons) { LOCKED(clock_events(device, reasons)); }

static nvmlReturn_t virt_mode(nvmlDevice_t h, nvmlGpuVirtualizationMode_t *out) {
    fake_dev *d;
    nvmlReturn_t r = lookup(h, &d);
    if (r) return r;
    *out = (nvmlGpuVirtualizationMode_t)d->tel.virt_mode;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device, nvmlGpuVirtualizationMode_t *mode) { LOCKED(virt_mode(device, mode)); }

static nvmlReturn_t licensable(nvmlDevice_t h, nvmlGridLicensableFeatures_t *out) {
    fake_dev *d;
    nvmlReturn_t r = lookup(h, &d);
    if (r) return r;
    memset(out, 0, sizeof *out);
    if (d->tel.virt_mode != NVML_GPU_VIRTUALIZATION_MODE_VGPU) return NVML_SUCCESS; /* nothing licensable */
    out->isGridLicenseSupported = 1;
    out->licensableFeaturesCount = 1;
    out->gridLicensableFeatures[0].featureCode = NVML_GRID_LICENSE_FEATURE_CODE_VGPU;
    out->gridLicensableFeatures[0].featureState = d->tel.vgpu_licensed ? 1 : 0;
    out->gridLicensableFeatures[0].featureEnabled = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGridLicensableFeatures_v4(nvmlDevice_t device, nvmlGridLicensableFeatures_t *features) { LOCKED(licensable(device, features)); }

/* ---- GPM: a sample remembers its GPU and when it was taken; metrics between two samples are the GPU's
 * configured percentages. Samples under 100 ms apart read 100 % for DRAM activity, as a real H200's did. */

struct nvmlGpmSample_st { unsigned dev; int taken; double at; };

static double gpm_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static nvmlReturn_t gpm_support(nvmlDevice_t h, nvmlGpmSupport_t *out) {
    fake_dev *d;
    nvmlReturn_t r = lookup(h, &d);
    if (r) return r;
    if (!out || out->version != NVML_GPM_SUPPORT_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    out->isSupportedDevice = d->tel.gpm ? 1 : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *gpmSupport) { LOCKED(gpm_support(device, gpmSupport)); }

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) {
    if (!sample) return NVML_ERROR_INVALID_ARGUMENT;
    *sample = calloc(1, sizeof **sample);
    return *sample ? NVML_SUCCESS : NVML_ERROR_MEMORY;
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
    if (!sample) return NVML_ERROR_INVALID_ARGUMENT;
    free(sample);
    return NVML_SUCCESS;
}

static nvmlReturn_t gpm_sample(nvmlDevice_t h, nvmlGpmSample_t sample) {
    fake_dev *d;
    nvmlReturn_t r = lookup(h, &d);
    if (r) return r;
    if (!sample) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->tel.gpm || h->mig) return NVML_ERROR_NOT_SUPPORTED;
    sample->dev = (unsigned)(d - g_devs);
    sample->taken = 1;
    sample->at = gpm_now();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t gpmSample) { LOCKED(gpm_sample(device, gpmSample)); }

static nvmlReturn_t gpm_metrics(nvmlGpmMetricsGet_t *m) {
    nvmlReturn_t r = ready();
    if (r) return r;
    if (!m || m->version != NVML_GPM_METRICS_GET_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (!m->sample1 || !m->sample2 || !m->sample1->taken || !m->sample2->taken || m->sample1->dev != m->sample2->dev ||
        m->numMetrics > NVML_GPM_METRIC_MAX)
        return NVML_ERROR_INVALID_ARGUMENT;
    fake_dev *d = &g_devs[m->sample1->dev];
    double apart = m->sample2->at - m->sample1->at;
    for (unsigned i = 0; i < m->numMetrics; i++) {
        unsigned id = m->metrics[i].metricId;
        m->metrics[i].nvmlReturn = id < NVML_GPM_METRIC_MAX ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
        m->metrics[i].value = id < NVML_GPM_METRIC_MAX ? d->tel.gpm_pct[id] : 0.0;
        if (id == NVML_GPM_METRIC_DRAM_BW_UTIL && (apart < 0.0 ? -apart : apart) < 0.1) m->metrics[i].value = 100.0;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *metricsGet) { LOCKED(gpm_metrics(metricsGet)); }

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

/* The recovery action (nvmlDeviceGpuRecoveryAction_t) the driver asks for after an XID: a small table
 * after the resolution column of NVIDIA's XID catalogue, the same as gpu_operator.gpu.recovery's.
 * Uncorrectable memory errors (48, 95), row remapping (63 pending, 64 failure), NVLink (74), GSP
 * (119, 120) and unrecovered ECC (140) need a GPU reset; fallen off the bus (79) a node reboot.
 * Anything else (application errors 13, 31, 43, ...; 94, a contained ECC error) asks for nothing. */
static const struct { unsigned long long xid; unsigned action; } XID_ACTIONS[] = {
    {48, NVML_GPU_RECOVERY_ACTION_GPU_RESET},  {63, NVML_GPU_RECOVERY_ACTION_GPU_RESET},
    {64, NVML_GPU_RECOVERY_ACTION_GPU_RESET},  {74, NVML_GPU_RECOVERY_ACTION_GPU_RESET},
    {79, NVML_GPU_RECOVERY_ACTION_NODE_REBOOT}, {95, NVML_GPU_RECOVERY_ACTION_GPU_RESET},
    {119, NVML_GPU_RECOVERY_ACTION_GPU_RESET}, {120, NVML_GPU_RECOVERY_ACTION_GPU_RESET},
    {140, NVML_GPU_RECOVERY_ACTION_GPU_RESET},
};

static void set_recovery_action(unsigned index, unsigned long long xid) {
    for (size_t i = 0; i < sizeof XID_ACTIONS / sizeof XID_ACTIONS[0]; i++)
        if (XID_ACTIONS[i].xid == xid) g_devs[index].recovery_action = XID_ACTIONS[i].action;
}

static nvmlReturn_t inject(unsigned index, unsigned long long xid, unsigned gi, unsigned ci) {
    if (!g_loaded || index >= g_count) return NVML_ERROR_INVALID_ARGUMENT;
    if (xid == 48) g_devs[index].dbe++; /* XID 48: double-bit ECC error */
    set_recovery_action(index, xid);
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

static void append_fault(const char *line);

static nvmlReturn_t reset_gpu(unsigned index) {
    if (!g_loaded || index >= g_count) return NVML_ERROR_INVALID_ARGUMENT;
    destroy_instances(&g_devs[index]); /* MIG instances do not survive a GPU reset */
    g_devs[index].mig_cur = g_devs[index].mig_pend;
    g_devs[index].recovery_action = NVML_GPU_RECOVERY_ACTION_NONE; /* the reset the driver asked for */
    mig_sync_out();
    char line[128];
    snprintf(line, sizeof line, "reset %s", g_devs[index].uuid);
    append_fault(line); /* the driver's state: every other process sees the reset too */
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
        else set_recovery_action((unsigned)index, code); /* old events are gone, what they asked for is not */
        if (code == 79) set_lost((unsigned)index, 1);
    } else if (!strcmp(verb, "lost")) {
        set_lost((unsigned)index, 1);
    } else if (!strcmp(verb, "recover")) {
        set_lost((unsigned)index, 0);
    } else if (!strcmp(verb, "reset")) {
        g_devs[index].recovery_action = NVML_GPU_RECOVERY_ACTION_NONE;
    }
}

/* Append one line to the faults file (through HOST_ROOT when the driver's files are read-only here, as
 * mig_sync_out writes). Lines of other processes come first; this process does not read its own back. */
static void append_fault(const char *line) {
    if (!g_faults[0]) return;
    poll_faults(0);
    FILE *f = fopen(g_faults, "a");
    const char *host = getenv("HOST_ROOT"), *driver_root = getenv("NVIDIA_DRIVER_ROOT");
    if (!f && host && *host && g_faults[0] == '/') {
        char through_host[PATH_LEN * 3];
        if (!driver_root || !strcmp(driver_root, "/")) driver_root = "";
        snprintf(through_host, sizeof through_host, "%s%s%s", host, driver_root, g_faults);
        f = fopen(through_host, "a");
    }
    if (!f) return;
    size_t n = strlen(line) + 1;
    fprintf(f, "%s\n", line);
    fflush(f);
    long end = ftell(f);
    fclose(f);
    if (end - (long)n == g_faults_offset) g_faults_offset = end;
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
/* Lines: "gpu <uuid> <current> <pending> <next_gi_id> <generation>", then its GPU instances as
 * "gi <uuid> <slot> <id> <profile index>", each followed by its compute instances (the MIG devices) as
 * "ci <uuid> <gi slot> <ci slot> <id> <ci profile index> <MIG uuid>". A writer keeps the lines of GPUs
 * it does not see (a container sees only its own) and replaces the file atomically. */

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
        int cur, pend, index;
        unsigned next, generation, slot, ci_slot, id, profile;
        if (sscanf(line, "gpu %79s %d %d %u %u", uuid, &cur, &pend, &next, &generation) == 5) {
            if ((index = by_uuid(uuid)) < 0) continue;
            fake_dev *d = &g_devs[index];
            d->mig_cur = cur;
            d->mig_pend = pend;
            d->next_gi_id = next;
            d->generation = generation;
            destroy_instances(d);
        } else if (sscanf(line, "gi %79s %u %u %u", uuid, &slot, &id, &profile) == 4) {
            if ((index = by_uuid(uuid)) < 0 || slot >= MAX_GI || profile >= MAX_PROFILES) continue;
            g_devs[index].gis[slot] = (gi_t){.used = 1, .id = id, .profile = profile};
        } else if (sscanf(line, "ci %79s %u %u %u %u %79s", uuid, &slot, &ci_slot, &id, &profile, mig) == 6) {
            if ((index = by_uuid(uuid)) < 0 || slot >= MAX_GI || ci_slot >= MAX_CI || profile > 6) continue;
            ci_t *ci = &g_devs[index].gis[slot].cis[ci_slot];
            *ci = (ci_t){.used = 1, .id = id, .profile = profile};
            copy_field(ci->uuid, sizeof ci->uuid, mig);
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
            if (!gi->used) continue;
            fprintf(out, "gi %s %u %u %u\n", d->uuid, s, gi->id, gi->profile);
            for (unsigned c = 0; c < MAX_CI; c++)
                if (gi->cis[c].used)
                    fprintf(out, "ci %s %u %u %u %u %s\n", d->uuid, s, c, gi->cis[c].id, gi->cis[c].profile, gi->cis[c].uuid);
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
