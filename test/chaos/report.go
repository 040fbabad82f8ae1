package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Report is a run's outcome: chaos-report.md (tables) and chaos-report.json.
type Report struct {
	Seed   uint64  `json:"seed"`
	Replay *uint64 `json:"replay,omitempty"`
	// Loop: the managers could fence and reap by themselves.
	Loop bool `json:"closedLoop"`
	// Enabled is the kinds cycles were drawn from; NotRun the others and why.
	Enabled []Kind        `json:"enabled"`
	NotRun  []NotRun      `json:"notRun,omitempty"`
	Setup   time.Duration `json:"setup"`
	Cycles  []CycleResult `json:"cycles"`
	Kinds   []KindSummary `json:"kinds"`
	Memory  []memVerdict  `json:"memory"`
}

// NotRun is a kind no cycle could draw, and why.
type NotRun struct {
	Kind Kind   `json:"kind"`
	Why  string `json:"why"`
}

// KindSummary is one row of the table per fault kind.
type KindSummary struct {
	Kind           Kind          `json:"kind"`
	Cycles         int           `json:"cycles"`
	Failovers      int           `json:"failovers"`
	RecoveryMedian time.Duration `json:"recoveryMedian"`
	RecoveryMax    time.Duration `json:"recoveryMax"`
	NodeReturnMax  time.Duration `json:"nodeReturnMax,omitempty"`
	StallMax       time.Duration `json:"stallMax"`
	Violations     int           `json:"violations"`
}

// Summarize fills Kinds from Cycles: one row per enabled kind, in AllKinds order.
func (r *Report) Summarize() {
	r.Kinds = nil
	for _, k := range AllKinds {
		if !slices.Contains(r.Enabled, k) {
			continue
		}
		s := KindSummary{Kind: k}
		var rec []time.Duration
		for _, c := range r.Cycles {
			if c.Fault.Kind != k {
				continue
			}
			s.Cycles++
			if c.Failover {
				s.Failovers++
			}
			if c.Recovery > 0 {
				rec = append(rec, c.Recovery)
			}
			s.NodeReturnMax = max(s.NodeReturnMax, c.NodeReturn)
			s.StallMax = max(s.StallMax, c.Stall)
			s.Violations += len(c.Violations)
		}
		if len(rec) > 0 {
			slices.Sort(rec)
			s.RecoveryMedian, s.RecoveryMax = rec[len(rec)/2], rec[len(rec)-1]
		}
		r.Kinds = append(r.Kinds, s)
	}
}

func secs(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

// Markdown is the report as tables.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Chaos run, seed %d\n\n", r.Seed)
	if r.Replay != nil {
		fmt.Fprintf(&b, "Replay of the cycle of seed %d.\n\n", *r.Replay)
	}
	fmt.Fprintf(&b, "%d cycles after a setup of %s; managers with the closed loop: %v.\n\n", len(r.Cycles), secs(r.Setup), r.Loop)
	b.WriteString("Recovery: for a failover, from the fault to the last replacement's first acknowledged write; " +
		"otherwise from the fault's end to every writer writing again. Longest stall: the longest time a writer went without " +
		"an acknowledged write during a cycle. Node return: from its start or heal to Ready, untainted and clean.\n\n")
	b.WriteString("| fault | cycles | failovers | recovery median | recovery max | longest stall | node return max | violations |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, k := range r.Kinds {
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %s | %s | %s | %d |\n", k.Kind, k.Cycles, k.Failovers, secs(k.RecoveryMedian),
			secs(k.RecoveryMax), secs(k.StallMax), secs(k.NodeReturnMax), k.Violations)
	}
	for _, n := range r.NotRun {
		fmt.Fprintf(&b, "| %s | not run: %s | | | | | | |\n", n.Kind, n.Why)
	}
	var acked, writers int
	if len(r.Cycles) > 0 {
		last := r.Cycles[len(r.Cycles)-1]
		acked, writers = last.Acked, last.Writers
	}
	fmt.Fprintf(&b, "\nData: %d writers, %d acknowledged records checked after the last cycle.\n", writers, acked)
	b.WriteString("\n| process | samples | RSS first quarter | RSS last quarter | max | flat |\n| --- | ---: | ---: | ---: | ---: | --- |\n")
	for _, m := range r.Memory {
		flat := "yes"
		if !m.Checked {
			flat = fmt.Sprintf("not judged (< %d samples)", minFlatSamples)
		} else if !m.Flat {
			flat = "NO"
		}
		fmt.Fprintf(&b, "| %s (pid %d) | %d | %.1f MiB | %.1f MiB | %.1f MiB | %s |\n", m.Name, m.PID, m.Samples,
			mib(m.FirstMedian), mib(m.LastMedian), mib(m.Max), flat)
	}
	var bad []string
	for _, c := range r.Cycles {
		for _, v := range c.Violations {
			bad = append(bad, fmt.Sprintf("- cycle %d (seed %d, %s): %s", c.Fault.Cycle, c.Fault.Seed, c.Fault.Kind, v))
		}
	}
	if len(bad) > 0 {
		b.WriteString("\n## Violations\n\n" + strings.Join(bad, "\n") + "\n")
	}
	return b.String()
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// Write writes chaos-report.md and chaos-report.json into dir and returns their paths.
func (r *Report) Write(dir string) (md, js string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	md, js = filepath.Join(dir, "chaos-report.md"), filepath.Join(dir, "chaos-report.json")
	if err := os.WriteFile(md, []byte(r.Markdown()), 0o644); err != nil {
		return "", "", err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", "", err
	}
	return md, js, os.WriteFile(js, b, 0o644)
}
