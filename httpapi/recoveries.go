package httpapi

import (
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vigil-storage/vigil/api/v1alpha1"
)

// The steps of a recovery's timeline, in order.
const (
	StepDetected     = "detected"
	StepFenced       = "fenced"
	StepPodsReaped   = "pods-reaped"
	StepAttachments  = "attachments-freed"
	StepReplacements = "replacements-running"
	StepNodeBack     = "node-back-clean"
)

// stepLabels are the steps as people read them.
var stepLabels = map[string]string{
	StepDetected: "Detected", StepFenced: "Fenced", StepPodsReaped: "Pods reaped",
	StepAttachments: "Attachments freed", StepReplacements: "Replacements Running", StepNodeBack: "Node back and clean",
}

// Step is one step of a recovery: when it completed (nil if it has not) and how
// long after detection.
type Step struct {
	Step  string     `json:"step"`
	Label string     `json:"label"`
	At    *time.Time `json:"at,omitempty"`
	// AfterSeconds is At - DetectedAt.
	AfterSeconds *float64 `json:"afterSeconds,omitempty"`
	// Count is how many things the step covered (volumes, pods, attachments,
	// replacements); -1 for steps that are not counted.
	Count int `json:"count"`
}

// RecoveryView is a NodeRecovery with its timeline computed.
type RecoveryView struct {
	Name            string     `json:"name"`
	Node            string     `json:"node"`
	Phase           string     `json:"phase"`
	Closed          bool       `json:"closed"`
	Reason          string     `json:"reason,omitempty"`
	Message         string     `json:"message,omitempty"`
	DetectedAt      *time.Time `json:"detectedAt,omitempty"`
	RecoverySeconds *float64   `json:"recoverySeconds,omitempty"`
	TimeToRecover   string     `json:"timeToRecover,omitempty"`
	Steps           []Step     `json:"steps"`
	// Record is the object as the API server has it (omitted in lists and events).
	Record *v1alpha1.NodeRecovery `json:"record,omitempty"`
}

// RecoveryOf computes the view of r. withRecord includes the object itself.
func RecoveryOf(r *v1alpha1.NodeRecovery, withRecord bool) RecoveryView {
	st := &r.Status
	v := RecoveryView{
		Name: r.Name, Node: r.Spec.NodeName, Phase: string(st.Phase), Closed: st.Phase.Closed(),
		Reason: st.Reason, Message: st.Message, DetectedAt: timeOf(st.DetectedAt),
		RecoverySeconds: st.RecoverySeconds, TimeToRecover: st.TimeToRecover, Steps: Timeline(r),
	}
	if v.TimeToRecover == "" && st.RecoverySeconds != nil {
		v.TimeToRecover = formatSeconds(*st.RecoverySeconds)
	}
	if withRecord {
		v.Record = r
	}
	return v
}

// Timeline is the six steps of a recovery from its status: detected → fenced →
// pods reaped → attachments freed → replacements Running → node back and clean.
// A step's time is when its last item completed.
func Timeline(r *v1alpha1.NodeRecovery) []Step {
	st := &r.Status
	var pods, freed, running []*metav1.MicroTime
	for i := range st.Pods {
		pods = append(pods, &st.Pods[i].ReapedAt)
	}
	for i := range st.Attachments {
		freed = append(freed, &st.Attachments[i].FreedAt)
	}
	for i := range st.Replacements {
		running = append(running, st.Replacements[i].RunningAt)
	}
	fenced := st.FencedAt
	if fenced == nil {
		fenced = st.TaintedAt
	}
	replacements := st.RecoveredAt
	if replacements == nil && len(running) > 0 && allSet(running) {
		replacements = latest(running)
	}
	var back *metav1.MicroTime
	if st.Return != nil {
		back = st.Return.UntaintedAt
	}
	steps := []Step{
		{Step: StepDetected, At: timeOf(st.DetectedAt), Count: -1},
		{Step: StepFenced, At: timeOf(fenced), Count: len(st.Volumes)},
		{Step: StepPodsReaped, At: timeOf(latest(pods)), Count: len(st.Pods)},
		{Step: StepAttachments, At: timeOf(latest(freed)), Count: len(st.Attachments)},
		{Step: StepReplacements, At: timeOf(replacements), Count: len(st.Replacements)},
		{Step: StepNodeBack, At: timeOf(back), Count: -1},
	}
	for i := range steps {
		steps[i].Label = stepLabels[steps[i].Step]
		if steps[i].At != nil && st.DetectedAt != nil {
			d := steps[i].At.Sub(st.DetectedAt.Time).Seconds()
			steps[i].AfterSeconds = &d
		}
	}
	// RecoverySeconds is the controller's own figure for this step: use it, so
	// the timeline and the time to recover always agree.
	if st.RecoverySeconds != nil && steps[4].At != nil && st.RecoveredAt != nil {
		d := *st.RecoverySeconds
		steps[4].AfterSeconds = &d
	}
	return steps
}

func allSet(ts []*metav1.MicroTime) bool {
	for _, t := range ts {
		if t == nil {
			return false
		}
	}
	return true
}

// latest is the latest non-nil time, nil when there is none.
func latest(ts []*metav1.MicroTime) *metav1.MicroTime {
	var out *metav1.MicroTime
	for _, t := range ts {
		if t != nil && (out == nil || t.After(out.Time)) {
			out = t
		}
	}
	return out
}

func timeOf(t *metav1.MicroTime) *time.Time {
	if t == nil || t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func formatSeconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(10 * time.Millisecond).String()
}

// RecoveriesOf converts and sorts records, newest detection first.
func RecoveriesOf(rs []v1alpha1.NodeRecovery) []RecoveryView {
	out := make([]RecoveryView, len(rs))
	for i := range rs {
		out[i] = RecoveryOf(&rs[i], false)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i].DetectedAt, out[j].DetectedAt
		switch {
		case a == nil || b == nil:
			return a != nil
		case !a.Equal(*b):
			return a.After(*b)
		}
		return out[i].Name < out[j].Name
	})
	return out
}
