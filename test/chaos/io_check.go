package chaos

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/vigil-storage/vigil/sandbox"
)

// ioState is what the I/O invariant knows of one claim's current pod.
type ioState struct {
	Claim string
	// Pod and Node of the claim's current writer; Pod is "" when the claim
	// has no running pod whose volume is published.
	Pod, Node string
	// LastAck is the time of the writer's last acknowledged record.
	LastAck time.Time
	// LastErr is the writer's last failed write, fsync or open ("" if none
	// or not read).
	LastErr string
}

// failingIO is the invariant "no pod is left with failing I/O once its node
// is back": every claim's current pod acknowledged a write after since, the
// time its node was back. It returns one line per pod that did not, sorted.
func failingIO(states []ioState, since time.Time) []string {
	var out []string
	for _, s := range states {
		switch {
		case s.Pod == "":
			out = append(out, fmt.Sprintf("claim %s: no running pod writes it since its node was back at %s",
				s.Claim, since.Format("15:04:05.000")))
		case !s.LastAck.After(since):
			last := "none"
			if !s.LastAck.IsZero() {
				last = s.LastAck.Format("15:04:05.000")
			}
			line := fmt.Sprintf("pod %s (claim %s) on %s is left with failing I/O: no write acknowledged since its node was back at %s (last acknowledged: %s)",
				s.Pod, s.Claim, s.Node, since.Format("15:04:05.000"), last)
			if s.LastErr != "" {
				line += "; its writer's last error: " + s.LastErr
			}
			out = append(out, line)
		}
	}
	sort.Strings(out)
	return out
}

// ioStates is the state of the listed claims (every claim when claims is
// nil). A claim without a running writer is skipped with skipMissing (the
// data check names it); a writer on a node that is off or cut off is
// skipped (its node is not back). withErr reads each writer's last error
// from its log.
func (h *Harness) ioStates(claims map[string]bool, skipMissing, withErr bool) []ioState {
	cur := h.current()
	var out []ioState
	for _, ci := range h.claimNames() {
		if claims != nil && !claims[ci] {
			continue
		}
		w := cur[ci]
		if w == nil {
			if !skipMissing {
				out = append(out, ioState{Claim: ci})
			}
			continue
		}
		h.mu.Lock()
		away := h.off[w.Node] || h.cut[w.Node] != ""
		h.mu.Unlock()
		if away {
			continue
		}
		s := ioState{Claim: ci, Pod: w.PodName, Node: w.Node, LastAck: lastAck(w)}
		if withErr {
			s.LastErr = lastWriterError(filepath.Join(h.nodeDir(w.Node), w.proc()+".log"))
		}
		out = append(out, s)
	}
	return out
}

// awaitIO waits, up to bound, until failingIO finds nothing for the listed
// claims (every claim when nil); it returns what is still failing then.
func (h *Harness) awaitIO(ctx context.Context, claims map[string]bool, since time.Time, bound time.Duration, skipMissing bool) []string {
	err := sandbox.Poll(ctx, bound, "every pod writing once its node is back", func(context.Context) (bool, string, error) {
		return len(failingIO(h.ioStates(claims, skipMissing, false), since)) == 0, "", nil
	}, nil)
	if err == nil {
		return nil
	}
	v := failingIO(h.ioStates(claims, skipMissing, true), since)
	for i := range v {
		v[i] += fmt.Sprintf(" (waited %s)", bound)
	}
	return v
}

// claimNames is the claims' names, sorted.
func (h *Harness) claimNames() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.claims))
	for c := range h.claims {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// lastWriterError is the last failure a writer logged ("record N: fsync
// PATH: input/output error (not acknowledged; …)"), "" if none.
func lastWriterError(log string) string {
	f, err := os.Open(log)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > 8192 {
		_, _ = f.Seek(st.Size()-8192, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "not acknowledged") {
			return strings.TrimSpace(lines[i])
		}
	}
	return ""
}
