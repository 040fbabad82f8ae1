// Package powerfstest runs the power-loss layer (internal/powerfs) as a
// child process of a test binary, so a test can cut the power: SIGKILL the
// layer (and the processes writing through it) at once, detach the dead
// mount and mount a new layer on the same backing directory.
//
// A package that uses it calls RunIfChild first thing in its TestMain.
package powerfstest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/internal/powerfs"
	"github.com/vigil-storage/vigil/internal/testenv"
)

// Environment of a layer child: the backing directory and the mount point.
const (
	backingEnv = "VIGIL_POWERFS_CHILD_BACKING"
	mountEnv   = "VIGIL_POWERFS_CHILD_MOUNT"
)

// RunIfChild turns the test binary into a layer process when it was started
// by Start: it serves until killed and never returns. Otherwise it returns.
func RunIfChild() {
	backing, mnt := os.Getenv(backingEnv), os.Getenv(mountEnv)
	if backing == "" || mnt == "" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := powerfs.Serve(ctx, backing, mnt, powerfs.Options{}, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "powerfs child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Require skips (or, under CI=true, fails) a test on a machine that cannot
// mount the layer.
func Require(t testing.TB) {
	t.Helper()
	testenv.RequireNoError(t, "FUSE", powerfs.Usable())
}

// Layer is a running layer process.
type Layer struct {
	Backing, Mount string
	cmd            *exec.Cmd
}

// Start runs a layer over backing at mnt (both existing directories) in a
// child process and returns once it serves. The test's cleanup kills it and
// detaches the mount.
func Start(t testing.TB, backing, mnt string) *Layer {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), backingEnv+"="+backing, mountEnv+"="+mnt)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	l := &Layer{Backing: backing, Mount: mnt, cmd: cmd}
	t.Cleanup(func() { l.kill() })
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if !strings.HasPrefix(s, powerfs.ReadyLine) {
			t.Fatalf("powerfs layer over %s at %s did not start: %q", backing, mnt, s)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("powerfs layer over %s at %s: not serving after 30 s", backing, mnt)
	}
	return l
}

// Process is the layer's process, for a test that kills it together with
// others (see Cut).
func (l *Layer) Process() *os.Process { return l.cmd.Process }

// kill SIGKILLs the layer if it still runs, reaps it and detaches its mount.
func (l *Layer) kill() error {
	_ = l.cmd.Process.Signal(syscall.SIGKILL)
	_ = l.cmd.Wait()
	return powerfs.Detach(l.Mount)
}

// Cut is the power cut: SIGKILL to the layer and to every process in procs
// at once (each one given as its exec.Cmd, which Cut reaps), then the dead
// mount is detached. What was not fsynced through the layer is gone.
func Cut(t testing.TB, l *Layer, procs ...*exec.Cmd) {
	t.Helper()
	_ = l.cmd.Process.Signal(syscall.SIGKILL)
	for _, p := range procs {
		_ = p.Process.Signal(syscall.SIGKILL)
	}
	for _, p := range procs {
		_ = p.Wait()
	}
	if err := l.kill(); err != nil {
		t.Fatal(err)
	}
}

// CutMidStream runs this test binary again as a child with env added (the
// child writes through the layer and prints "ACK n" once its n-th record is
// acknowledged), cuts the power with l once at least minAcked records of
// what are acknowledged, while the child still writes, and returns the last
// record it acknowledged.
func CutMidStream(t testing.TB, l *Layer, env []string, minAcked int, what string) (acked int) {
	t.Helper()
	w := exec.Command(os.Args[0], "-test.run=^$")
	w.Env = append(os.Environ(), env...)
	w.Stderr = os.Stderr
	out, err := w.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Process.Kill(); _ = w.Wait() })
	acks := make(chan int)
	go func() {
		defer close(acks)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "ACK ")); err == nil {
				acks <- n
			}
		}
	}()
	deadline := time.After(time.Minute)
	for acked < minAcked {
		select {
		case n, ok := <-acks:
			if !ok {
				t.Fatalf("the child stopped after %d acknowledged %s", acked, what)
			}
			acked = n
		case <-deadline:
			t.Fatalf("only %d %s acknowledged in a minute", acked, what)
		}
	}
	Cut(t, l, w)
	for n := range acks {
		acked = n
	}
	return acked
}
