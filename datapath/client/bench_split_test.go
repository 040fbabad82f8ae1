package client_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/devcerts"
)

// The Sequential benchmark runs its server in this process, beside the
// client, unless VIGIL_BENCH_SERVER_CPUS names processors (taskset's list,
// "1" say): the server then runs in a process of its own (this test binary
// started again in server mode) pinned to them, as client and server on two
// machines do. Pin the benchmark itself to the others:
//
//	go test -c -o /tmp/client.test ./datapath/client/ &&
//	VIGIL_BENCH_SERVER_CPUS=1 taskset -c 0 /tmp/client.test -test.run '^$' -test.bench Sequential
const (
	envServerCPUs = "VIGIL_BENCH_SERVER_CPUS"
	// Set in the server process only.
	envServe       = "VIGIL_BENCH_SERVE_DIR"
	envServeTLS    = "VIGIL_BENCH_SERVE_TLS"
	envServeTokens = "VIGIL_BENCH_SERVE_TOKENS"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(envServe); dir != "" {
		if err := serveForBench(dir, os.Getenv(envServeTLS) == "1", os.Getenv(envServeTokens)); err != nil {
			fmt.Fprintln(os.Stderr, "bench server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveForBench is the server process: a store in dir served on loopback
// (TLS with a new CA in dir when tlsOn) with the tokens given; it prints
// "ADDRESS CAFILE" and serves until its standard input ends.
func serveForBench(dir string, tlsOn bool, tokens string) error {
	auth, err := datapath.ParseTokens(strings.NewReader(tokens), "benchmark tokens")
	if err != nil {
		return err
	}
	store, err := datapath.Open(dir, datapath.Options{Capacity: 1 << 40})
	if err != nil {
		return err
	}
	defer store.Close()
	var opts []datapath.ServerOption
	caFile := "-"
	if tlsOn {
		files, err := devcerts.WriteServerFiles(dir, []string{"127.0.0.1"}, time.Hour)
		if err != nil {
			return err
		}
		cfg, err := datapath.ServerTLS(files.Cert, files.Key)
		if err != nil {
			return err
		}
		opts, caFile = append(opts, datapath.WithTLS(cfg)), files.CA
	}
	srv, err := datapath.NewServer(store, auth, opts...)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	fmt.Printf("%s %s\n", lis.Addr(), caFile)
	_, _ = io.Copy(io.Discard, os.Stdin)
	srv.Stop(time.Second)
	return <-done
}

// benchTarget is what the Sequential benchmark writes to: the controller's
// client (create, grant), node n1's client (the writes), and a directory on
// the same file system as the server's data for the local file.
type benchTarget struct {
	ctrl, node interface {
		CreateVolume(context.Context, string, int64, datapath.AccessMode) (datapath.Volume, error)
		Grant(context.Context, string, string) (uint64, error)
		WriteAt(context.Context, string, string, uint64, int64, []byte) error
	}
	dir string
	// serverPID is the server process (0: this one).
	serverPID int
}

// cpu is the user and system CPU time that the client and the server have
// used (a server process's in clock ticks, 10 ms).
func (t benchTarget) cpu() time.Duration {
	d := processCPU()
	if t.serverPID == 0 {
		return d
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", t.serverPID))
	if err != nil {
		return d
	}
	// After the command's name in parentheses: fields 3.. of proc(5);
	// utime and stime are fields 14 and 15.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return d
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return d + time.Duration(ut+st)*10*time.Millisecond
}

// startBenchTarget starts the benchmark's server: in this process, or in a
// process of its own pinned to the processors in VIGIL_BENCH_SERVER_CPUS.
func startBenchTarget(b *testing.B, tlsOn bool) benchTarget {
	cpus := os.Getenv(envServerCPUs)
	if cpus == "" {
		srv := datapathtest.StartWith(b, datapathtest.Config{TLS: tlsOn})
		var opts []client.Option
		if tlsOn {
			opts = append(opts, client.WithCAFile(srv.CAFile))
		}
		c := dial(b, srv, opts...)
		return benchTarget{ctrl: c, node: c, dir: srv.Dir}
	}
	ctrlTok, nodeTok := benchToken(b), benchToken(b)
	dir := b.TempDir()
	cmd := exec.Command("taskset", "-c", cpus, os.Args[0])
	tlsFlag := "0"
	if tlsOn {
		tlsFlag = "1"
	}
	cmd.Env = append(os.Environ(), envServe+"="+dir, envServeTLS+"="+tlsFlag,
		envServeTokens+"=controller "+ctrlTok+"\nnode n1 "+nodeTok)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start the server process (%s=%s needs taskset): %v", envServerCPUs, cpus, err)
	}
	b.Cleanup(func() {
		_ = stdin.Close()
		if err := cmd.Wait(); err != nil {
			b.Errorf("server process: %v", err)
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != 2 {
		b.Fatalf("server process said %q: %v", line, err)
	}
	var opts []client.Option
	if f[1] != "-" {
		opts = append(opts, client.WithCAFile(f[1]))
	}
	ctx := context.Background()
	ctrl, err := client.Dial(ctx, f[0], ctrlTok, opts...)
	if err != nil {
		b.Fatal(err)
	}
	node, err := client.Dial(ctx, f[0], nodeTok, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ctrl.Close(); _ = node.Close() })
	return benchTarget{ctrl: ctrl, node: node, dir: dir, serverPID: cmd.Process.Pid}
}

func benchToken(b *testing.B) string {
	var k [24]byte
	if _, err := rand.Read(k[:]); err != nil {
		b.Fatal(err)
	}
	return hex.EncodeToString(k[:])
}
