package controller

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
)

func waitClosed(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(15 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// Two replicas campaign against one fake API server. The leader dies (every
// write it makes fails from then on, as for a powered-off replica); the standby
// takes over once the lease expires, and the two never lead at the same time.
func TestRunAsLeader_StandbyTakesOverWhenLeaderDies(t *testing.T) {
	// One API server (the tracker), one client per replica.
	clientA := fake.NewClientset()
	clientB := &fake.Clientset{}
	clientB.AddReactor("*", "*", core.ObjectReaction(clientA.Tracker()))
	var dead atomic.Bool
	clientA.PrependReactor("*", "leases", func(a core.Action) (bool, runtime.Object, error) {
		if dead.Load() && a.GetVerb() != "get" {
			return true, nil, errors.New("replica a is powered off")
		}
		return false, nil, nil
	})
	clients := map[string]*fake.Clientset{"a": clientA, "b": clientB}
	cfg := func(id string) LeaderConfig {
		return LeaderConfig{Client: clients[id], Namespace: "vigil-system", Name: "vigil-manager", Identity: id,
			LeaseDuration: 3 * time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}
	}
	var leading, most atomic.Int32
	lead := func(started chan struct{}) func(context.Context) {
		return func(ctx context.Context) {
			n := leading.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			close(started)
			<-ctx.Done()
			leading.Add(-1)
		}
	}
	aLeads, bLeads := make(chan struct{}), make(chan struct{})
	errA, errB := make(chan error, 1), make(chan error, 1)
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	go func() { errA <- RunAsLeader(ctxA, cfg("a"), lead(aLeads)) }()
	waitClosed(t, aLeads, "replica a to lead")

	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	go func() { errB <- RunAsLeader(ctxB, cfg("b"), lead(bLeads)) }()
	dead.Store(true)
	select {
	case err := <-errA:
		if !errors.Is(err, ErrLeadershipLost) {
			t.Fatalf("replica a returned %v, want ErrLeadershipLost", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("replica a never noticed it lost the lease")
	}
	waitClosed(t, bLeads, "replica b to take over")
	if m := most.Load(); m != 1 {
		t.Errorf("%d replicas led at once", m)
	}
	cancelB()
	if err := <-errB; err != nil {
		t.Fatalf("replica b on shutdown: %v", err)
	}
	lease, err := clientB.CoordinationV1().Leases("vigil-system").Get(context.Background(), "vigil-manager", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h != nil && *h != "" {
		t.Errorf("lease still held by %q after a clean shutdown", *h)
	}
}

func TestRunAsLeader_MissingIdentityIsAnError(t *testing.T) {
	err := RunAsLeader(context.Background(), LeaderConfig{Client: fake.NewClientset(), Namespace: "ns", Name: "l"}, func(context.Context) {})
	if err == nil {
		t.Fatal("want an error naming the missing identity")
	}
}
