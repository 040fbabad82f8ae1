package junitsummary

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

const report = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="6" disabled="0" errors="0" failures="1" time="10">
  <testsuite name="Kubernetes e2e suite" tests="6" skipped="3" failures="1" errors="0">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="1"></testcase>
    <testcase name="[It] External Storage [Driver: driver.vigil.io] [Testpattern: Dynamic PV (default fs)] subPath should support existing directory" status="passed" time="20"></testcase>
    <testcase name="[It] External Storage [Driver: driver.vigil.io] [Testpattern: Dynamic PV (block volmode)] volumeMode should fail to use a volume in a pod with mismatched mode [Slow]" status="failed" time="30">
      <failure type="failed">[FAILED] Timed out after 300s.
pod never failed
</failure>
    </testcase>
    <testcase name="[It] External Storage [Driver: driver.vigil.io] [Testpattern: Dynamic PV (ext3)] volumes should store data" status="skipped" time="0">
      <skipped message="skipped - Driver driver.vigil.io doesn&#39;t support ext3 -- skipping"></skipped>
    </testcase>
    <testcase name="[It] External Storage [Driver: driver.vigil.io] [Testpattern: Dynamic PV (default fs)] [Serial] disruptive should test that pv written before kubelet restart is readable after restart" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[It] [sig-apps] Deployment should run the lifecycle" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
  </testsuite>
</testsuites>`

// TestRead_CountsPerSuite is the specification: passed, failed with the
// first line that says why, skipped at run time with its reason, and specs
// the filters left out counted apart; specs outside the External Storage
// tests count only when they fail.
func TestRead_CountsPerSuite(t *testing.T) {
	s, err := Read(strings.NewReader(report))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Counts{
		"subPath":    {Passed: 1},
		"volumeMode": {Failed: 1},
		"volumes":    {Skipped: 1},
		"disruptive": {NotSelected: 1},
		"":           {Passed: 1, NotSelected: 1},
	}
	for suite, w := range want {
		if got := s.BySuite[suite]; got == nil || *got != w {
			t.Errorf("suite %q: %+v, want %+v", suite, got, w)
		}
	}
	if len(s.BySuite) != len(want) {
		t.Errorf("suites %v, want %d", s.BySuite, len(want))
	}
	if w := (Counts{Passed: 1, Failed: 1, Skipped: 1, NotSelected: 1}); s.Total != w {
		t.Errorf("total %+v, want %+v", s.Total, w)
	}
	if got := strings.Join(s.Suites(), ","); got != "subPath,volumeMode,volumes" {
		t.Errorf("Suites() = %s, want subPath,volumeMode,volumes", got)
	}
	var out bytes.Buffer
	s.Write(&out)
	for _, line := range []string{
		"total                1       1        1   (1 specs not selected",
		"FAILED: External Storage [Driver: driver.vigil.io] [Testpattern: Dynamic PV (block volmode)] volumeMode should fail",
		"    Timed out after 300s.",
		"skipped   1× Driver driver.vigil.io doesn't support ext3 -- skipping",
	} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("Write lacks %q:\n%s", line, out.String())
		}
	}
}

// TestRead_SetupFailure_Counted: a failure outside every suite (the suite's
// setup) counts in the total, so a run that never reached a test is not a
// clean zero.
func TestRead_SetupFailure_Counted(t *testing.T) {
	s, err := Read(strings.NewReader(`<testsuites><testsuite><testcase name="[SynchronizedBeforeSuite]" status="failed"><failure>node not ready</failure></testcase></testsuite></testsuites>`))
	if err != nil {
		t.Fatal(err)
	}
	if s.Total.Failed != 1 || s.Specs[0].Reason != "node not ready" {
		t.Errorf("total %+v, reason %q; want 1 failure, node not ready", s.Total, s.Specs[0].Reason)
	}
}

// TestRead_BadInput: what is not a JUnit report is an error, never zero counts.
func TestRead_BadInput(t *testing.T) {
	for in, want := range map[string]string{
		"":                          "junit: EOF",
		"<testsuites></testsuites>": ErrNoSuite.Error(),
		"<testsuites><testsuite>":   "junit: XML syntax error",
	} {
		_, err := Read(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Read(%q) = %v, want an error with %q", in, err, want)
		}
		if in == "<testsuites></testsuites>" && !errors.Is(err, ErrNoSuite) {
			t.Errorf("Read(%q) = %v, want ErrNoSuite", in, err)
		}
	}
}
