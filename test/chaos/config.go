package chaos

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Environment variables of the suite (make chaos passes CHAOS_CYCLES).
const (
	EnvCycles = "CHAOS_CYCLES"
	EnvSeed   = "CHAOS_SEED"
	EnvReplay = "CHAOS_REPLAY"
	EnvFaults = "CHAOS_FAULTS"
	EnvReport = "CHAOS_REPORT"
	// EnvKeep, when set, leaves the sandbox in place after the run, for its logs.
	EnvKeep = "CHAOS_KEEP"
	// EnvDatapathServers: 0 (the one datapath server on the host) or
	// GroupServers (a group of servers on nodes, drawing ServerKinds).
	// Unset, it is GroupServers when CHAOS_FAULTS lists only ServerKinds.
	EnvDatapathServers = "CHAOS_DATAPATH_SERVERS"
)

// DefaultCycles is the cycles of a run without CHAOS_CYCLES: the short run of
// `make test`. `make chaos` runs 100.
const DefaultCycles = 5

// MaxCycles bounds CHAOS_CYCLES, so that a typo cannot start a week-long run.
const MaxCycles = 10000

// Config is one run of the suite.
type Config struct {
	// Cycles to run (CHAOS_CYCLES).
	Cycles int
	// Seed of the run (CHAOS_SEED; default random, always printed).
	Seed uint64
	// Replay, when set (CHAOS_REPLAY=SEED), runs one cycle with that cycle seed
	// instead of Cycles drawn from Seed.
	Replay *uint64
	// Faults is CHAOS_FAULTS as given (see ParseKinds).
	Faults string
	// ReportDir receives chaos-report.md and chaos-report.json (CHAOS_REPORT;
	// default $TMPDIR/vigil-chaos-report; its servers/ for a run with
	// servers on nodes, so that make chaos's two runs keep both reports).
	ReportDir string
	// Servers is the count of datapath servers on nodes (CHAOS_DATAPATH_SERVERS).
	Servers int
}

// ConfigFromEnv reads the CHAOS_* variables through getenv; a bad value is an
// ErrBadConfig that names the variable, the value and what is allowed.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	c := Config{Cycles: DefaultCycles, Faults: getenv(EnvFaults), ReportDir: getenv(EnvReport)}
	if v := getenv(EnvCycles); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxCycles {
			return c, fmt.Errorf("%w: %s=%q: want a whole number from 1 to %d", ErrBadConfig, EnvCycles, v, MaxCycles)
		}
		c.Cycles = n
	}
	if v := getenv(EnvSeed); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return c, fmt.Errorf("%w: %s=%q: want an unsigned 64-bit decimal number (the seed a run printed)", ErrBadConfig, EnvSeed, v)
		}
		c.Seed = s
	} else {
		var b [8]byte
		_, _ = rand.Read(b[:])
		c.Seed = binary.LittleEndian.Uint64(b[:])
	}
	if v := getenv(EnvReplay); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return c, fmt.Errorf("%w: %s=%q: want the seed of one cycle, as a cycle printed it", ErrBadConfig, EnvReplay, v)
		}
		c.Replay, c.Cycles = &s, 1
	}
	var err error
	if c.Servers, err = serversFromEnv(getenv(EnvDatapathServers), c.Faults); err != nil {
		return c, err
	}
	if _, err := ParseKinds(c.Faults, true, c.Servers); err != nil {
		return c, err
	}
	if c.ReportDir == "" {
		c.ReportDir = filepath.Join(os.TempDir(), "vigil-chaos-report")
	}
	if c.Servers > 0 {
		c.ReportDir = filepath.Join(c.ReportDir, "servers")
	}
	return c, nil
}

// serversFromEnv reads CHAOS_DATAPATH_SERVERS; unset, a CHAOS_FAULTS list of
// server kinds only implies GroupServers.
func serversFromEnv(v, faults string) (int, error) {
	switch strings.TrimSpace(v) {
	case "0":
		return 0, nil
	case strconv.Itoa(GroupServers):
		return GroupServers, nil
	case "":
	default:
		return 0, fmt.Errorf("%w: %s=%q: want 0 (the one datapath server on the host) or %d (a group of servers on nodes)",
			ErrBadConfig, EnvDatapathServers, v, GroupServers)
	}
	if f := strings.TrimSpace(faults); f == "" || f == "auto" || f == "all" {
		return 0, nil
	}
	for _, name := range strings.Split(faults, ",") {
		if !Kind(strings.TrimSpace(name)).NeedsServers() {
			return 0, nil
		}
	}
	return GroupServers, nil
}

// seedOf is the seed of cycle i of the run.
func (c Config) seedOf(i int) uint64 {
	if c.Replay != nil {
		return *c.Replay
	}
	return CycleSeed(c.Seed, i)
}

// Bounds of the invariants, in the sandbox's shortened timings (node-monitor
// grace period 10 s, engines heartbeating every second).
const (
	// progressBound: after a fault that needs no failover is over, every writer
	// acknowledges a new record within this.
	progressBound = 30 * time.Second
	// failoverBound: from a failover fault's start, every covered pod of the
	// node runs elsewhere and its writer acknowledges records within this.
	failoverBound = 90 * time.Second
	// returnBound: a node that came back (started again, healed) is Ready,
	// untainted and without a mount of a pod it no longer runs within this.
	returnBound = 30 * time.Second
	// ioBound: once a pod's node is back (and cleaned up), the pod's writer
	// acknowledges a new record within this: no pod is left with failing I/O.
	ioBound = 30 * time.Second
)
