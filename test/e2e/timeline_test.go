package e2e

import (
	"fmt"
	"strings"
	"time"
)

// timeline records when each event was first seen, relative to a start (the power
// cut), and prints them as a table.
type timeline struct {
	start time.Time
	order []string
	at    map[string]time.Duration
}

func newTimeline(start time.Time) *timeline {
	return &timeline{start: start, at: map[string]time.Duration{}}
}

// mark records event at now unless it was seen before.
func (tl *timeline) mark(event string, now time.Time) {
	if _, ok := tl.at[event]; ok {
		return
	}
	tl.at[event] = now.Sub(tl.start)
	tl.order = append(tl.order, event)
}

func (tl *timeline) seen(event string) (time.Duration, bool) {
	d, ok := tl.at[event]
	return d, ok
}

func (tl *timeline) table(title string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s\n| t (s) | event |\n| ---: | --- |\n", title)
	for _, e := range tl.order {
		fmt.Fprintf(&b, "| %6.1f | %s |\n", tl.at[e].Seconds(), e)
	}
	return b.String()
}
