// Package junitsummary counts the results of the upstream storage end-to-end
// suite (e2e.test's JUnit report, as `make conformance` writes it) per test
// suite: passed, failed, skipped at run time (with the reason the test gave),
// and how many specs the focus and skip expressions left out. It reads the
// report only; running the suite is test/conformance/run.sh's.
package junitsummary

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// ErrNoSuite: the report holds no testsuite element.
var ErrNoSuite = errors.New("junit: no testsuite in the report")

type junit struct {
	Suites []suiteXML `xml:"testsuite"`
}

type suiteXML struct {
	Cases []caseXML `xml:"testcase"`
}

type caseXML struct {
	Name    string      `xml:"name,attr"`
	Status  string      `xml:"status,attr"`
	Skipped *messageXML `xml:"skipped"`
	Failure *messageXML `xml:"failure"`
	Error   *messageXML `xml:"error"`
}

type messageXML struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// Outcome is what became of one spec.
type Outcome string

// The outcomes.
const (
	Passed Outcome = "passed"
	Failed Outcome = "failed"
	// Skipped: the spec ran and skipped itself (a capability the driver does
	// not declare, a pattern it does not support).
	Skipped Outcome = "skipped"
	// NotSelected: the focus and skip expressions left it out.
	NotSelected Outcome = "not-selected"
)

// Spec is one test case of the report.
type Spec struct {
	Name string
	// Suite is the storage test suite ("subPath"); "" for a spec outside
	// the External Storage tests (the suite's setup, for one).
	Suite   string
	Outcome Outcome
	// Reason is a skip's message or the first line of a failure.
	Reason string
}

// Counts are the outcomes of one suite's specs.
type Counts struct {
	Passed, Failed, Skipped, NotSelected int
}

// Summary is the report, counted.
type Summary struct {
	Specs []Spec
	// BySuite counts each suite's specs; the key "" holds what is outside
	// every suite.
	BySuite map[string]*Counts
	Total   Counts
}

// suiteRE finds the suite in a spec's name: the word after the test pattern,
// as in "External Storage [Driver: d] [Testpattern: Dynamic PV (default fs)]
// subPath should ...".
var suiteRE = regexp.MustCompile(`External Storage \[Driver: [^\]]+\] \[Testpattern: [^\]]+\]\s+(?:\[[^\]]+\]\s+)*(\S+)`)

// Read counts the JUnit report r.
func Read(r io.Reader) (*Summary, error) {
	var j junit
	if err := xml.NewDecoder(r).Decode(&j); err != nil {
		return nil, fmt.Errorf("junit: %w", err)
	}
	if len(j.Suites) == 0 {
		return nil, ErrNoSuite
	}
	s := &Summary{BySuite: map[string]*Counts{}}
	for _, ts := range j.Suites {
		for _, c := range ts.Cases {
			spec := classify(c)
			s.Specs = append(s.Specs, spec)
			if s.BySuite[spec.Suite] == nil {
				s.BySuite[spec.Suite] = &Counts{}
			}
			s.BySuite[spec.Suite].add(spec.Outcome)
			if spec.Suite != "" || spec.Outcome == Failed {
				s.Total.add(spec.Outcome)
			}
		}
	}
	return s, nil
}

func (c *Counts) add(o Outcome) {
	switch o {
	case Passed:
		c.Passed++
	case Failed:
		c.Failed++
	case Skipped:
		c.Skipped++
	case NotSelected:
		c.NotSelected++
	}
}

// classify decides one case's outcome. Ginkgo writes a spec the filters left
// out as skipped with the bare message "skipped", and one that skipped itself
// as "skipped - REASON".
func classify(c caseXML) Spec {
	s := Spec{Name: strings.TrimPrefix(c.Name, "[It] ")}
	if m := suiteRE.FindStringSubmatch(s.Name); m != nil {
		s.Suite = m[1]
	}
	switch {
	case c.Failure != nil || c.Error != nil || isFailedStatus(c.Status):
		s.Outcome = Failed
		s.Reason = failureLine(c)
	case c.Skipped != nil || c.Status == "skipped" || c.Status == "pending":
		msg := ""
		if c.Skipped != nil {
			msg = strings.TrimSpace(c.Skipped.Message)
		}
		if msg == "" || msg == "skipped" || c.Status == "pending" {
			s.Outcome = NotSelected
			break
		}
		s.Outcome = Skipped
		s.Reason = strings.TrimSpace(strings.TrimPrefix(msg, "skipped - "))
	default:
		s.Outcome = Passed
	}
	return s
}

func isFailedStatus(status string) bool {
	switch status {
	case "failed", "panicked", "interrupted", "timedout", "aborted":
		return true
	}
	return false
}

// failureLine is the first line of a failure that says something.
func failureLine(c caseXML) string {
	for _, m := range []*messageXML{c.Failure, c.Error} {
		if m == nil {
			continue
		}
		for _, text := range []string{m.Message, m.Text} {
			for _, line := range strings.Split(text, "\n") {
				if line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "[FAILED]")); line != "" {
					return line
				}
			}
		}
	}
	return "failed (no message in the report)"
}

// Suites returns the suites of s that ran at least one spec or were selected,
// sorted, without "".
func (s *Summary) Suites() []string {
	var out []string
	for name, c := range s.BySuite {
		if name != "" && c.Passed+c.Failed+c.Skipped > 0 {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Write prints s: one line per suite with its counts, the total, every
// failure with its first line, and the skip reasons with how often each
// occurred.
func (s *Summary) Write(w io.Writer) {
	fmt.Fprintf(w, "%-14s %7s %7s %8s\n", "SUITE", "PASSED", "FAILED", "SKIPPED")
	for _, name := range s.Suites() {
		c := s.BySuite[name]
		fmt.Fprintf(w, "%-14s %7d %7d %8d\n", name, c.Passed, c.Failed, c.Skipped)
	}
	fmt.Fprintf(w, "%-14s %7d %7d %8d   (%d specs not selected by the focus and skip expressions)\n",
		"total", s.Total.Passed, s.Total.Failed, s.Total.Skipped, s.Total.NotSelected)
	reasons := map[string]int{}
	for _, sp := range s.Specs {
		switch sp.Outcome {
		case Failed:
			fmt.Fprintf(w, "FAILED: %s\n    %s\n", sp.Name, shorten(sp.Reason, 300))
		case Skipped:
			reasons[sp.Reason]++
		}
	}
	keys := make([]string, 0, len(reasons))
	for k := range reasons {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "skipped %3d× %s\n", reasons[k], k)
	}
}

// shorten cuts s to at most n bytes, saying so (a failed command can quote
// kilobytes of base64).
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + " [...]"
}
