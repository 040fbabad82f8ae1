package scale

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestConfigFromEnv_Defaults(t *testing.T) {
	c, err := ConfigFromEnv(func(string) string { return "" })
	if err != nil || c.Racks != Smoke.Racks || c.Pods != Smoke.Pods || c.ReportDir == "" {
		t.Errorf("ConfigFromEnv() = %+v, %v; want the smoke size", c, err)
	}
	env := map[string]string{"SCALE_RACKS": "10", "SCALE_RACK_SIZE": "50", "SCALE_PODS": "20000", "SCALE_PROTECTED": "5000"}
	c, err = ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil || c.Nodes() != 500 || c.Pods != Bench.Pods || c.Protected != Bench.Protected {
		t.Errorf("bench env: %+v, %v", c, err)
	}
}

func TestConfigFromEnv_Bad(t *testing.T) {
	for _, env := range []map[string]string{
		{"SCALE_RACKS": "0"}, {"SCALE_RACKS": "21"}, {"SCALE_RACK_SIZE": "x"}, {"SCALE_PODS": "-5"},
		{"SCALE_PROTECTED": "300"}, {"SCALE_PODS": "5000"},
	} {
		_, err := ConfigFromEnv(func(k string) string { return env[k] })
		if !errors.Is(err, ErrBadConfig) {
			t.Errorf("ConfigFromEnv(%v) = %v, want ErrBadConfig", env, err)
			continue
		}
		for k := range env {
			if !strings.Contains(err.Error(), k) {
				t.Errorf("ConfigFromEnv(%v) = %q, want %s named", env, err, k)
			}
		}
	}
}

func TestWatcher_Result(t *testing.T) {
	old := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-000-0", UID: "u1"}, Spec: corev1.PodSpec{NodeName: "n1"}}
	w := newWatcher([]string{"n1"}, []corev1.Pod{old})
	cut := time.Now()
	var f Failure
	if w.result(&f, cut) {
		t.Fatal("result done before anything happened")
	}
	unknown := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}}}
	w.node(unknown)
	w.pod(&old) // the old pod's own updates are no replacement
	w.deleted(cache.DeletedFinalStateUnknown{Obj: &old})
	if w.result(&f, cut) || f.Reaped != 1 || f.Replacements != 0 {
		t.Fatalf("after the reap: done, %+v; want reaped 1, no replacement yet", f)
	}
	other := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-000-x", UID: "u3"}, Spec: corev1.PodSpec{NodeName: "n2"}}
	w.pod(&other)
	pending := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-000-0", UID: "u2"}}
	w.pod(&pending) // created, not bound yet
	if w.result(&f, cut) {
		t.Fatal("done before the replacement was bound")
	}
	bound := pending
	bound.Spec.NodeName = "n2"
	w.pod(&bound)
	if !w.result(&f, cut) || !f.Complete || f.Replacements != 1 || f.ScheduledAt < f.ReapedAt || f.ReapedAfterDetection < 0 {
		t.Errorf("after the replacement: %+v, want complete with ordered times", f)
	}
}
