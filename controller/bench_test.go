package controller

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/vigil-storage/vigil"
)

// BenchmarkDecide measures decide over the whole decision-table cross product
// (10,368 snapshots built beforehand): a realistic mix of skips, waits and deletes.
//
//	go test -run '^$' -bench BenchmarkDecide -cpu 1 ./controller
func BenchmarkDecide(b *testing.B) {
	cases := allTableCases()
	snaps := make([]*Snapshot, len(cases))
	sets := make([]*Settings, len(cases))
	for i, c := range cases {
		snaps[i], sets[i] = c.build()
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	n := 0
	for b.Loop() {
		i := n % len(snaps)
		_ = decide(snaps[i], sets[i], t0)
		n++
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "decisions/s")
}

// reap110 loads one Ready node with 110 protected StatefulSet pods (terminating,
// deadline passed, the kubelet gone quiet), runs the reaper with real informers on
// the fake clientset, marks the node Ready=Unknown and returns how long it took
// until all 110 pods were force-deleted (and their 110 attachments deleted).
// A non-nil limiter throttles every delete, as the manager's client-side rate
// limit (--kube-api-qps, --kube-api-burst) would.
func reap110(tb testing.TB, limiter flowcontrol.RateLimiter) time.Duration {
	const pods = 110
	// The fake clientset's watchers panic when 100 events queue up; a real API
	// server has no such limit, so give them room for the burst of deletes.
	watch.DefaultChanSize = 10000
	now := time.Now()
	node := newNode("node-1", corev1.ConditionTrue, -time.Hour)
	objs := []runtime.Object{node}
	for i := range pods {
		name, claim, pv := fmt.Sprintf("db-%d", i), fmt.Sprintf("data-db-%d", i), fmt.Sprintf("pv-%d", i)
		p := newPod("app", name, "node-1", controllerRef("apps/v1", "StatefulSet", "db", "uid-sts"), pvcVolume("data", claim))
		ts := metav1.NewTime(now.Add(-time.Second))
		p.DeletionTimestamp = &ts
		objs = append(objs, p, newPVC("app", claim, pv, nil), newPV(pv, vigil.DriverName), newVA("va-"+pv, pv, "node-1"))
	}
	client := fake.NewClientset(objs...)
	var deleted atomic.Int32
	done := make(chan struct{})
	if limiter != nil {
		client.PrependReactor("delete", "*", func(core.Action) (bool, runtime.Object, error) {
			limiter.Accept()
			return false, nil, nil
		})
	}
	client.PrependReactor("delete", "pods", func(core.Action) (bool, runtime.Object, error) {
		if deleted.Add(1) == pods {
			close(done)
		}
		return false, nil, nil
	})
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(TransformForCache))
	m, _ := NewMetrics(prometheus.NewRegistry())
	set := newFakeSettings(PolicyDeleteStatefulSetPod)
	r, err := New(Config{Client: client, Informers: factory, Settings: set, Recorder: &record.FakeRecorder{}, Metrics: m})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	go func() { _ = r.Run(ctx, 8) }()

	down := node.DeepCopy()
	down.Status.Conditions[0].Status = corev1.ConditionUnknown
	down.Status.Conditions[0].LastTransitionTime = metav1.Now()
	down.ResourceVersion = "2"
	trigger := time.Now()
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, down, metav1.UpdateOptions{}); err != nil {
		tb.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		tb.Fatalf("only %d of %d pods reaped after 30 s", deleted.Load(), pods)
	}
	elapsed := time.Since(trigger)
	cancel()
	factory.Shutdown()
	return elapsed
}

// BenchmarkController_NodeDown110Pods reports the time from a node turning Ready=Unknown
// to the last of its 110 protected pods being force-deleted (target: < 2 s).
//
//	go test -run '^$' -bench BenchmarkController_NodeDown110Pods -benchtime 5x ./controller
//
// The qps200-burst500 case throttles the 220 deletes as the manager's default
// client rate limit does (Events have a client of their own).
func BenchmarkController_NodeDown110Pods(b *testing.B) {
	for _, bc := range []struct {
		name    string
		limiter func() flowcontrol.RateLimiter
	}{
		{"unlimited", func() flowcontrol.RateLimiter { return nil }},
		{"qps200-burst500", func() flowcontrol.RateLimiter { return flowcontrol.NewTokenBucketRateLimiter(200, 500) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var worst, total time.Duration
			n := 0
			for b.Loop() {
				d := reap110(b, bc.limiter())
				total += d
				worst = max(worst, d)
				n++
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(n), "ms-to-reap-110/op")
			b.ReportMetric(float64(worst.Milliseconds()), "worst-ms")
		})
	}
}

// TestController_Run_NodeDown110PodsAllReaped runs the whole reaper (informers, queue,
// workers) once and reports the figure; it asserts completion, not a time.
func TestController_Run_NodeDown110PodsAllReaped(t *testing.T) {
	t.Logf("110 pods reaped %v after the node turned Ready=Unknown", reap110(t, nil))
}
