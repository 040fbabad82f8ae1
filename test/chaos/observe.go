package chaos

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/sandbox/ledger"
)

// attEvent is one state of a (volume, node) row of the datapath's attachment table.
type attEvent struct {
	State datapath.AttachmentState `json:"state"`
	Epoch uint64                   `json:"epoch"`
	At    time.Time                `json:"at"`
}

type rowKey struct{ vol, node string }

// history keeps every state the suite saw of each attachment row, polled from
// the datapath: the datapath keeps only a row's latest state, and a node fenced
// in one cycle may be granted the volume again in a later one, so the fence
// spans the data check needs are built from what was seen. It also checks that
// epochs never decrease.
type history struct {
	mu         sync.Mutex
	rows       map[rowKey][]attEvent
	maxEpoch   map[string]uint64
	violations []string
}

func newHistory() *history {
	return &history{rows: map[rowKey][]attEvent{}, maxEpoch: map[string]uint64{}}
}

// observe records the attachment rows of vol as the datapath returned them.
func (h *history) observe(vol string, atts []datapath.Attachment) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var volMax uint64
	for _, a := range atts {
		volMax = max(volMax, a.Epoch)
		k := rowKey{vol, a.Node}
		evs := h.rows[k]
		ev := attEvent{State: a.State, Epoch: a.Epoch, At: a.Updated}
		if n := len(evs); n > 0 {
			last := evs[n-1]
			if last.State == ev.State && last.Epoch == ev.Epoch && last.At.Equal(ev.At) {
				continue
			}
			if ev.Epoch < last.Epoch {
				h.violations = append(h.violations, fmt.Sprintf("epoch of volume %s on %s went back from %d (%s) to %d (%s)",
					vol, a.Node, last.Epoch, last.State, ev.Epoch, ev.State))
			}
		}
		h.rows[k] = append(evs, ev)
	}
	if prev := h.maxEpoch[vol]; volMax < prev {
		h.violations = append(h.violations, fmt.Sprintf("highest epoch of volume %s went back from %d to %d", vol, prev, volMax))
	} else {
		h.maxEpoch[vol] = volMax
	}
}

// takeViolations returns the epoch violations seen since the last call.
func (h *history) takeViolations() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	v := h.violations
	h.violations = nil
	return v
}

// spans is every time the datapath had node fenced on vol: from a fenced state
// to the next granted one (open if none).
func (h *history) spans(vol, node string) []ledger.Span {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []ledger.Span
	for _, ev := range h.rows[rowKey{vol, node}] {
		switch {
		case ev.State == datapath.StateFenced && (len(out) == 0 || !out[len(out)-1].To.IsZero()):
			out = append(out, ledger.Span{From: ev.At, Epoch: ev.Epoch})
		case ev.State == datapath.StateGranted && len(out) > 0 && out[len(out)-1].To.IsZero():
			out[len(out)-1].To = ev.At
		}
	}
	return out
}

// fences counts the fenced states seen for node, on any volume.
func (h *history) fences(node string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for k, evs := range h.rows {
		if k.node != node {
			continue
		}
		for _, ev := range evs {
			if ev.State == datapath.StateFenced {
				n++
			}
		}
	}
	return n
}

// rssBytes is the resident set size of pid (VmRSS of /proc/PID/status).
func rssBytes(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// memSeries is the RSS of one process (one incarnation) after each cycle.
type memSeries struct {
	Name  string  `json:"name"`
	PID   int     `json:"pid"`
	Cycle []int   `json:"cycle"`
	RSS   []int64 `json:"rssBytes"`
}

// memory keeps an RSS series per process incarnation.
type memory struct {
	series map[string]*memSeries
}

func newMemory() *memory { return &memory{series: map[string]*memSeries{}} }

// sample records the RSS of pid, named name, after cycle; a process that is
// gone is skipped.
func (m *memory) sample(cycle int, name string, pid int) {
	if pid <= 0 {
		return
	}
	b, err := rssBytes(pid)
	if err != nil {
		return
	}
	k := fmt.Sprintf("%s/%d", name, pid)
	s := m.series[k]
	if s == nil {
		s = &memSeries{Name: name, PID: pid}
		m.series[k] = s
	}
	s.Cycle, s.RSS = append(s.Cycle, cycle), append(s.RSS, b)
}

// Flatness rule: a series of at least minFlatSamples is flat when the median of
// its last quarter is at most flatRatio times the median of its first quarter
// plus flatSlack (a process settles after its start: caches, informers).
const (
	minFlatSamples = 12
	flatRatio      = 1.3
	flatSlack      = 16 << 20
)

// memVerdict is one series' verdict.
type memVerdict struct {
	Name        string `json:"name"`
	PID         int    `json:"pid"`
	Samples     int    `json:"samples"`
	FirstMedian int64  `json:"firstQuarterMedianBytes"`
	LastMedian  int64  `json:"lastQuarterMedianBytes"`
	Max         int64  `json:"maxBytes"`
	// Checked is false for a series too short to judge.
	Checked bool `json:"checked"`
	Flat    bool `json:"flat"`
}

func median(v []int64) int64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// verdicts judges every series, sorted by name and PID.
func (m *memory) verdicts() []memVerdict {
	var out []memVerdict
	for _, s := range m.series {
		v := memVerdict{Name: s.Name, PID: s.PID, Samples: len(s.RSS), Max: slices.Max(s.RSS)}
		q := max(1, len(s.RSS)/4)
		v.FirstMedian, v.LastMedian = median(s.RSS[:q]), median(s.RSS[len(s.RSS)-q:])
		v.Checked = len(s.RSS) >= minFlatSamples
		v.Flat = !v.Checked || float64(v.LastMedian) <= flatRatio*float64(v.FirstMedian)+flatSlack
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].PID < out[j].PID
	})
	return out
}
