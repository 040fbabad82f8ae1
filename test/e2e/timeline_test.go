package e2e

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// timeline records when each event was first seen, relative to a start (the power
// cut), and prints them as a table in the order of their times. It is safe
// for concurrent use (a recoveryWatch marks it while the test does).
type timeline struct {
	mu    sync.Mutex
	start time.Time
	order []string
	at    map[string]time.Duration
}

func newTimeline(start time.Time) *timeline {
	return &timeline{start: start, at: map[string]time.Duration{}}
}

// mark records event at now unless it was seen before.
func (tl *timeline) mark(event string, now time.Time) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if _, ok := tl.at[event]; ok {
		return
	}
	tl.at[event] = now.Sub(tl.start)
	tl.order = append(tl.order, event)
}

func (tl *timeline) seen(event string) (time.Duration, bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	d, ok := tl.at[event]
	return d, ok
}

func (tl *timeline) table(title string) string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	sort.SliceStable(tl.order, func(i, j int) bool { return tl.at[tl.order[i]] < tl.at[tl.order[j]] })
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s\n| t (s) | event |\n| ---: | --- |\n", title)
	for _, e := range tl.order {
		fmt.Fprintf(&b, "| %6.1f | %s |\n", tl.at[e].Seconds(), e)
	}
	return b.String()
}
