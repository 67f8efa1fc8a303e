/*
 * A fake nvidia-cuda-mps-control for the fake NVIDIA driver: the control daemon and its client, over
 * a unix socket in the pipe directory, answering the commands the MPS control daemon agent and MPS
 * clients use. There is no MPS server behind it (there is no GPU): it keeps the limits it is given.
 *
 *   nvidia-cuda-mps-control -d    start the daemon in the background ($CUDA_MPS_PIPE_DIRECTORY, default
 *                                 /tmp/nvidia-mps; log in $CUDA_MPS_LOG_DIRECTORY/control.log)
 *   nvidia-cuda-mps-control       read commands from stdin, one per line, print each answer
 *
 * Commands: set_default_active_thread_percentage P, get_default_active_thread_percentage,
 * set_default_device_pinned_mem_limit DEV LIMIT, get_default_device_pinned_mem_limit DEV,
 * get_server_list (empty), quit. Unknown commands answer with an error line, as the real one does.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_DEVICES 16
#define SOCKET_NAME "control"

static char g_percentage[32] = "100.0";
static char g_limits[MAX_DEVICES][32];

static const char *pipe_dir(void) {
    const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
    return dir && *dir ? dir : "/tmp/nvidia-mps";
}

static int address(struct sockaddr_un *addr) {
    memset(addr, 0, sizeof *addr);
    addr->sun_family = AF_UNIX;
    int n = snprintf(addr->sun_path, sizeof addr->sun_path, "%s/%s", pipe_dir(), SOCKET_NAME);
    return n > 0 && (size_t)n < sizeof addr->sun_path ? 0 : -1;
}

static void logline(const char *text) {
    const char *dir = getenv("CUDA_MPS_LOG_DIRECTORY");
    char path[4096];
    snprintf(path, sizeof path, "%s/control.log", dir && *dir ? dir : "/var/log/nvidia-mps");
    FILE *f = fopen(path, "a");
    if (f) { fprintf(f, "%s\n", text); fclose(f); }
}

/* One command; the answer goes in ``out`` (may be empty). Returns 1 for quit. */
static int answer(char *command, char *out, size_t size) {
    char verb[64] = "";
    unsigned dev = 0;
    char value[32] = "";
    out[0] = 0;
    command[strcspn(command, "\r\n")] = 0;
    sscanf(command, "%63s", verb);
    if (!strcmp(verb, "quit")) return 1;
    if (!strcmp(verb, "set_default_active_thread_percentage") && sscanf(command, "%*s %31s", value) == 1) {
        snprintf(g_percentage, sizeof g_percentage, "%.1f", atof(value));
        snprintf(out, size, "%s", g_percentage);
    } else if (!strcmp(verb, "get_default_active_thread_percentage")) {
        snprintf(out, size, "%s", g_percentage);
    } else if (!strcmp(verb, "set_default_device_pinned_mem_limit") &&
               sscanf(command, "%*s %u %31s", &dev, value) == 2 && dev < MAX_DEVICES) {
        snprintf(g_limits[dev], sizeof g_limits[dev], "%s", value);
    } else if (!strcmp(verb, "get_default_device_pinned_mem_limit") && sscanf(command, "%*s %u", &dev) == 1 &&
               dev < MAX_DEVICES) {
        snprintf(out, size, "%s", g_limits[dev][0] ? g_limits[dev] : "0");
    } else if (!strcmp(verb, "get_server_list")) {
        /* no server runs: the list is empty */
    } else {
        snprintf(out, size, "Invalid command: %s", command);
    }
    return 0;
}

static int serve(int listener) {
    for (;;) {
        int client = accept(listener, NULL, NULL);
        if (client < 0) {
            if (errno == EINTR) continue;
            return 1;
        }
        char command[512] = "", reply[600];
        ssize_t n = read(client, command, sizeof command - 1);
        int quit = 0;
        if (n > 0) {
            command[n] = 0;
            command[strcspn(command, "\r\n")] = 0;
            logline(command);
            quit = answer(command, reply, sizeof reply - 1);
            if (reply[0]) strcat(reply, "\n");
            if (write(client, reply, strlen(reply)) < 0) { /* the client went away: nothing to do */ }
        }
        close(client);
        if (quit) return 0;
    }
}

static int daemon_mode(void) {
    struct sockaddr_un addr;
    if (address(&addr) != 0) { fprintf(stderr, "pipe directory path too long\n"); return 1; }
    mkdir(pipe_dir(), 0755);
    int probe = socket(AF_UNIX, SOCK_STREAM, 0);
    if (connect(probe, (struct sockaddr *)&addr, sizeof addr) == 0) {
        close(probe);
        fprintf(stderr, "An instance of this daemon is already running\n");
        return 1;
    }
    close(probe);
    unlink(addr.sun_path);
    int listener = socket(AF_UNIX, SOCK_STREAM, 0);
    if (listener < 0 || bind(listener, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(listener, 16) != 0) {
        fprintf(stderr, "cannot listen on %s: %s\n", addr.sun_path, strerror(errno));
        return 1;
    }
    chmod(addr.sun_path, 0666);
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid > 0) return 0; /* the daemon runs on in the child, as the real one detaches */
    setsid();
    signal(SIGHUP, SIG_IGN);
    int null = open("/dev/null", O_RDWR); /* a daemon keeps none of its starter's pipes open */
    if (null >= 0) { dup2(null, 0); dup2(null, 1); dup2(null, 2); if (null > 2) close(null); }
    logline("[fake] MPS control daemon started");
    int rc = serve(listener);
    unlink(addr.sun_path);
    logline("[fake] MPS control daemon exited");
    _exit(rc);
}

static int client_mode(void) {
    char line[512];
    int status = 0;
    while (fgets(line, sizeof line, stdin)) {
        struct sockaddr_un addr;
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (address(&addr) != 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
            fprintf(stderr, "Cannot find MPS control daemon process\n");
            close(fd);
            return 1;
        }
        if (write(fd, line, strlen(line)) < 0) { close(fd); return 1; }
        shutdown(fd, SHUT_WR);
        char reply[600];
        ssize_t n;
        while ((n = read(fd, reply, sizeof reply)) > 0) fwrite(reply, 1, (size_t)n, stdout);
        if (!strncmp(reply, "Invalid command", 15)) status = 1;
        close(fd);
    }
    return status;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-d")) return daemon_mode();
    if (argc > 1) { fprintf(stderr, "nvidia-cuda-mps-control (fake): unsupported argument %s\n", argv[1]); return 2; }
    return client_mode();
}
