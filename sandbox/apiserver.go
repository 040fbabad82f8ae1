package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// apiServerPIDFile is where kwokctl's binary runtime keeps the API server's PID
// (no trailing newline); `kwokctl delete cluster` and Down read it.
func apiServerPIDFile(st *state) string {
	return filepath.Join(st.WorkDir, "kwok", "clusters", st.Name, "pids", BinKubeAPIServer+".pid")
}

// RestartAPIServer restarts the sandbox's kube-apiserver as an operator's
// restart would: SIGTERM (SIGKILL after 15 s), then the same command line,
// environment and working directory again, its output appended to kwokctl's
// log of it, its PID written where kwokctl keeps it (so Down still finds it);
// it returns once /readyz answers, or after timeout. etcd and the other
// components keep running.
func (s *Sandbox) RestartAPIServer(ctx context.Context, timeout time.Duration) error {
	if err := s.StopAPIServer(); err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	if err := s.StartAPIServer(ctx, timeout); err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	return nil
}

// StopAPIServer stops the sandbox's kube-apiserver and leaves it stopped, as
// an outage of the control plane would: SIGTERM (SIGKILL after 15 s). Its
// command line, environment and working directory are kept in the sandbox's
// state for StartAPIServer. etcd, the controller-manager, the scheduler, every
// node and the stack keep running, and every client of the API server (kwok,
// the engines, the datapath's TokenReviews, a manager) gets connection
// refused until StartAPIServer. Stopping a stopped API server is an error
// (ErrAPIServerStopped).
func (s *Sandbox) StopAPIServer() error {
	return s.withState(func(st *state) error {
		if st.StoppedAPIServer != nil {
			return fmt.Errorf("stop API server: %w since %s: StartAPIServer starts it again",
				ErrAPIServerStopped, st.StoppedAPIServer.At.Format(time.RFC3339))
		}
		pidFile := apiServerPIDFile(st)
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return fmt.Errorf("stop API server: %w", err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return fmt.Errorf("stop API server: %s: %w", pidFile, err)
		}
		args, env, dir, err := procCommand(pid, st.BinDir)
		if err != nil {
			return fmt.Errorf("stop API server (pid %d): %w", pid, err)
		}
		start, err := procStartTime(pid)
		if err != nil {
			return fmt.Errorf("stop API server (pid %d): %w", pid, err)
		}
		p := &proc{ProcessSpec: ProcessSpec{Name: BinKubeAPIServer}, PID: pid, StartTime: start}
		if _, err := terminate(p, 15*time.Second); err != nil {
			return fmt.Errorf("stop API server: %w", err)
		}
		st.StoppedAPIServer = &stoppedCommand{Args: args, Env: env, Dir: dir, At: time.Now()}
		return nil
	})
}

// StartAPIServer starts the kube-apiserver that StopAPIServer stopped, with
// the same command line, environment and working directory, its output
// appended to kwokctl's log of it and its PID written where kwokctl keeps it
// (so Down still finds it); it returns once /readyz answers, or after
// timeout. Starting an API server that StopAPIServer did not stop is an error
// (ErrAPIServerRunning).
func (s *Sandbox) StartAPIServer(ctx context.Context, timeout time.Duration) error {
	err := s.withState(func(st *state) error {
		c := st.StoppedAPIServer
		if c == nil {
			return fmt.Errorf("start API server: %w: StopAPIServer did not stop it", ErrAPIServerRunning)
		}
		log := filepath.Join(st.WorkDir, "kwok", "clusters", st.Name, "logs", BinKubeAPIServer+".log")
		npid, err := startWith(c.Args, c.Env, c.Dir, log)
		if err != nil {
			return fmt.Errorf("start API server: %w", err)
		}
		st.StoppedAPIServer = nil
		if err := os.WriteFile(apiServerPIDFile(st), []byte(strconv.Itoa(npid)), 0o644); err != nil {
			return fmt.Errorf("start API server: record pid %d: %w", npid, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return s.waitAPIReady(ctx, timeout)
}

// stoppedCommand is how StopAPIServer found kube-apiserver running, for
// StartAPIServer.
type stoppedCommand struct {
	Args []string  `json:"args"`
	Env  []string  `json:"env"`
	Dir  string    `json:"dir"`
	At   time.Time `json:"at"`
}

// procCommand reads the command line, environment and working directory of
// pid, which must run a binary of binDir (never an unrelated process that
// reused the PID).
func procCommand(pid int, binDir string) (args, env []string, dir string, err error) {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return nil, nil, "", err
	}
	if !strings.HasPrefix(exe, filepath.Clean(binDir)+"/") {
		return nil, nil, "", fmt.Errorf("runs %s, not a binary of %s", exe, binDir)
	}
	split := func(name string) ([]string, error) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
		if err != nil {
			return nil, err
		}
		return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), nil
	}
	if args, err = split("cmdline"); err != nil {
		return nil, nil, "", err
	}
	if env, err = split("environ"); err != nil {
		return nil, nil, "", err
	}
	if dir, err = os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err != nil {
		return nil, nil, "", err
	}
	args[0] = exe
	return args, env, dir, nil
}

// startWith starts args with exactly env in dir, in a session of its own,
// output appended to logPath.
func startWith(args, env []string, dir, logPath string) (int, error) {
	closeInheritedOnExec()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, fmt.Errorf("open log: %w", err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "==== %s started again by the sandbox: %s\n", time.Now().UTC().Format(time.RFC3339Nano), strings.Join(args, " "))
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env, cmd.Dir = env, dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", args[0], err)
	}
	go func() { _ = cmd.Wait() }()
	return cmd.Process.Pid, nil
}
