// Command pause is the infra container of every pod on the local cluster's real nodes: it holds the
// pod's namespaces open. It blocks until SIGINT or SIGTERM and then exits 0; meanwhile, as PID 1 of the
// pod's PID namespace when the namespace is shared, it reaps every zombie child on SIGCHLD.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-v" || os.Args[1] == "--version") {
		fmt.Println("pause (gpu-operator local cluster)")
		return
	}
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		fmt.Fprintf(os.Stderr, "pause: %v, exiting\n", sig)
		os.Exit(0)
	}
}

// reap collects every child that has exited; several may share one SIGCHLD.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
