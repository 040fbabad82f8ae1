package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// ErrLeadershipLost is returned by RunAsLeader when this replica stopped being the
// leader before its context ended; the caller should exit so a fresh process
// campaigns again from a clean state.
var ErrLeadershipLost = errors.New("controller: leadership lost")

// LeaderConfig configures leader election over a coordination.k8s.io Lease.
type LeaderConfig struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string // the Lease name
	Identity  string // unique per replica, e.g. the pod name
	// Durations; zero values take client-go's usual 15 s / 10 s / 2 s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// RunAsLeader campaigns for the Lease and runs lead while this replica holds it;
// lead's context ends when leadership is lost or ctx ends. It blocks until then.
// On a clean shutdown (ctx cancelled) the Lease is released so a standby takes
// over at once; a replica that dies stops renewing and a standby takes over when
// the lease expires.
func RunAsLeader(ctx context.Context, cfg LeaderConfig, lead func(ctx context.Context)) error {
	if cfg.Client == nil || cfg.Namespace == "" || cfg.Name == "" || cfg.Identity == "" {
		return fmt.Errorf("leader election: client, lease namespace, lease name and identity are required (got namespace %q, name %q, identity %q)",
			cfg.Namespace, cfg.Name, cfg.Identity)
	}
	def := func(d, v time.Duration) time.Duration {
		if d == 0 {
			return v
		}
		return d
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1ObjectMeta(cfg.Namespace, cfg.Name),
		Client:     cfg.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
	}
	// lead runs on a goroutine of the elector; RunAsLeader returns only after it
	// has returned, so nothing acts once this replica may no longer be the leader.
	var (
		mu              sync.Mutex
		running, closed bool
		stopped         = make(chan struct{})
	)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   def(cfg.LeaseDuration, 15*time.Second),
		RenewDeadline:   def(cfg.RenewDeadline, 10*time.Second),
		RetryPeriod:     def(cfg.RetryPeriod, 2*time.Second),
		ReleaseOnCancel: true,
		Name:            cfg.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				mu.Lock()
				if closed {
					mu.Unlock()
					return
				}
				running = true
				mu.Unlock()
				defer close(stopped)
				lead(ctx)
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	le.Run(ctx)
	mu.Lock()
	closed = true
	wasRunning := running
	mu.Unlock()
	if wasRunning {
		<-stopped
	}
	if ctx.Err() != nil {
		return nil
	}
	return ErrLeadershipLost
}

func metav1ObjectMeta(namespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: name}
}
