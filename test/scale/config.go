package scale

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/vigil-storage/vigil/sandbox"
)

// ErrBadConfig: a SCALE_* variable has a value that is not allowed.
var ErrBadConfig = errors.New("bad scale config")

// Config is one run of the benchmark.
type Config struct {
	Racks, RackSize int
	// Pods in total, Protected of them on Vigil volumes.
	Pods, Protected int
	ReportDir       string
}

// Nodes is the number of nodes of the run.
func (c Config) Nodes() int { return c.Racks * c.RackSize }

// Smoke is the run without SCALE_*: small enough for any machine.
var Smoke = Config{Racks: 2, RackSize: 10, Pods: 200, Protected: 50}

// Bench is `make bench-scale`'s run: 500 nodes, 20,000 pods, 5,000 protected.
var Bench = Config{Racks: 10, RackSize: 50, Pods: 20000, Protected: 5000}

// maxPodsPerNode is what a node of the sandbox accepts (the kubelet's default 110).
const maxPodsPerNode = 110

// ConfigFromEnv reads SCALE_RACKS, SCALE_RACK_SIZE, SCALE_PODS,
// SCALE_PROTECTED and SCALE_REPORT through getenv, on top of Smoke.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	c := Smoke
	for _, v := range []struct {
		name   string
		dst    *int
		lo, hi int
	}{{"SCALE_RACKS", &c.Racks, 1, sandbox.MaxRacks}, {"SCALE_RACK_SIZE", &c.RackSize, 1, sandbox.MaxRackSize},
		{"SCALE_PODS", &c.Pods, 1, 200000}, {"SCALE_PROTECTED", &c.Protected, 0, 200000}} {
		s := getenv(v.name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < v.lo || n > v.hi {
			return c, fmt.Errorf("%w: %s=%q: want a whole number from %d to %d", ErrBadConfig, v.name, s, v.lo, v.hi)
		}
		*v.dst = n
	}
	if c.Protected > c.Pods {
		return c, fmt.Errorf("%w: SCALE_PROTECTED=%d exceeds SCALE_PODS=%d", ErrBadConfig, c.Protected, c.Pods)
	}
	if c.Pods > c.Nodes()*maxPodsPerNode {
		return c, fmt.Errorf("%w: SCALE_PODS=%d does not fit %d nodes of %d pods each", ErrBadConfig, c.Pods, c.Nodes(), maxPodsPerNode)
	}
	c.ReportDir = getenv("SCALE_REPORT")
	if c.ReportDir == "" {
		c.ReportDir = filepath.Join(os.TempDir(), "vigil-scale-report")
	}
	return c, nil
}
