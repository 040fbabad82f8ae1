// Command pause is the first process of every pod on a sandbox node
// (containerd's sandbox_image): it holds the pod's namespaces open and does
// nothing else. It reaps any child handed to it (as PID 1 of a pod that shares
// its PID namespace) and exits 0 on SIGTERM or SIGINT. The image builder
// compiles it static (CGO_ENABLED=0) into the pause image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
