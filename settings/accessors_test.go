package settings_test

import (
	"context"
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
