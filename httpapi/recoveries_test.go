package httpapi

import (
	"testing"

	"github.com/vigil-storage/vigil/api/v1alpha1"
)

func TestTimeline_CompleteRecovery(t *testing.T) {
	r := sampleRecovery()
	steps := Timeline(&r)
	want := []struct {
		step  string
		after float64
		count int
	}{
		{StepDetected, 0, -1}, {StepFenced, 0.4, 1}, {StepPodsReaped, 2.3, 2},
		{StepAttachments, 2.0, 1}, {StepReplacements, 4.2, 1}, {StepNodeBack, 61.5, -1},
	}
	if len(steps) != len(want) {
		t.Fatalf("%d steps", len(steps))
	}
	for i, w := range want {
		s := steps[i]
		if s.Step != w.step || s.AfterSeconds == nil || *s.AfterSeconds < w.after-1e-9 || *s.AfterSeconds > w.after+1e-9 || s.Count != w.count || s.Label == "" {
			t.Errorf("step %d = %+v (after %v), want %+v", i, s, deref(s.AfterSeconds), w)
		}
	}
}

func deref(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}

func TestTimeline_InProgressLeavesLaterStepsOpen(t *testing.T) {
	r := v1alpha1.NodeRecovery{Status: v1alpha1.NodeRecoveryStatus{Phase: v1alpha1.PhaseFenced, DetectedAt: atp(0), TaintedAt: atp(0.7),
		Replacements: []v1alpha1.Replacement{{Name: "a", RunningAt: atp(3)}, {Name: "b"}}}}
	steps := Timeline(&r)
	if steps[1].At == nil || *steps[1].AfterSeconds != 0.7 {
		t.Errorf("fenced falls back to the taint time: %+v", steps[1])
	}
	for _, i := range []int{2, 3, 4, 5} {
		if steps[i].At != nil {
			t.Errorf("step %s done: %+v", steps[i].Step, steps[i])
		}
	}
}

func TestRecoveriesOf_NewestFirst(t *testing.T) {
	a, b, c := sampleRecovery(), sampleRecovery(), sampleRecovery()
	a.Name, b.Name, c.Name = "old", "new", "undetected"
	b.Status.DetectedAt = atp(100)
	c.Status.DetectedAt = nil
	got := RecoveriesOf([]v1alpha1.NodeRecovery{a, c, b})
	if got[0].Name != "new" || got[1].Name != "old" || got[2].Name != "undetected" {
		t.Fatalf("order %s %s %s", got[0].Name, got[1].Name, got[2].Name)
	}
}

func TestRecoveryOf_TimeToRecoverFromSeconds(t *testing.T) {
	r := sampleRecovery()
	r.Status.TimeToRecover = ""
	if v := RecoveryOf(&r, false); v.TimeToRecover != "4.2s" || v.Record != nil || !v.Closed {
		t.Fatalf("%+v", v)
	}
}
