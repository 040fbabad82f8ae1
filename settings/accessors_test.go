package settings_test

import (
	"context"
	"strings"
	"testing"

	"github.com/vigil-storage/vigil/settings"
)

// TestSettings_Accessors_DoNotAllocate: accessors read values parsed when they
// changed; they neither parse nor allocate (the string list is copied on purpose).
func TestSettings_Accessors_DoNotAllocate(t *testing.T) {
	s, _ := newSettings(t, settings.NewMemoryStore(), "")
	if err := s.Set(context.Background(), "node-down-pod-deletion-policy", "delete-both-statefulset-and-deployment-pod"); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		_ = s.NodeDownPodDeletionPolicy()
		_ = s.VolumeAttachmentRecoveryPolicy()
		_ = s.FastFencedTrigger()
		_ = s.NodeDownGracePeriod()
		_ = s.NotReadyDebounce()
		_ = s.CrashLoopPodDeletion()
		_ = s.CrashLoopRestartLimit()
		_ = s.DatapathConnectivityLossThreshold()
		_ = s.DefaultReplicaCount()
		_ = s.DryRun()
	})
	if allocs != 0 {
		t.Fatalf("accessors allocate %v times per run, want 0", allocs)
	}
}

func BenchmarkSettings_NodeDownPodDeletionPolicy(b *testing.B) {
	s, err := settings.New(settings.NewMemoryStore(), "")
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if s.NodeDownPodDeletionPolicy() == "" {
				b.Fatal("empty policy")
			}
		}
	})
}

// TestSettings_DefaultReplicaCount: 3 by default, 1 to 5 accepted, anything
// else refused with what is allowed and the value left as it was.
func TestSettings_DefaultReplicaCount(t *testing.T) {
	ctx := context.Background()
	s, _ := newSettings(t, settings.NewMemoryStore(), "")
	if got := s.DefaultReplicaCount(); got != 3 {
		t.Fatalf("default = %d, want 3", got)
	}
	for _, bad := range []string{"0", "6", "-1", "x", "", "2.5"} {
		err := s.Set(ctx, settings.NameDefaultReplicaCount, bad)
		if err == nil || !strings.Contains(err.Error(), "1") || !strings.Contains(err.Error(), "5") {
			t.Errorf("set %q: %v, want a refusal naming 1 to 5", bad, err)
		}
		if got := s.DefaultReplicaCount(); got != 3 {
			t.Errorf("after refused %q: %d, want 3", bad, got)
		}
	}
	for _, good := range []string{"1", "5", "2"} {
		if err := s.Set(ctx, settings.NameDefaultReplicaCount, good); err != nil {
			t.Fatalf("set %s: %v", good, err)
		}
	}
	if got := s.DefaultReplicaCount(); got != 2 {
		t.Errorf("after set 2: %d", got)
	}
}
