package manager

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func TestCheckNoOtherLeader_RefusesWhileTheLeaseIsHeld(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	lease := func(holder string, renewedAgo time.Duration) *coordinationv1.Lease {
		renew := metav1.NewMicroTime(now.Add(-renewedAgo))
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "vigil-system", Name: "vigil-manager"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), RenewTime: &renew, LeaseDurationSeconds: ptr.To[int32](15)}}
	}
	if err := checkNoOtherLeader(ctx, fake.NewClientset(), "vigil-system", "vigil-manager", now); err != nil {
		t.Fatalf("no Lease: %v", err)
	}
	err := checkNoOtherLeader(ctx, fake.NewClientset(lease("host-a_1234", 5*time.Second)), "vigil-system", "vigil-manager", now)
	if err == nil || !strings.Contains(err.Error(), "host-a_1234") || !strings.Contains(err.Error(), "single manager only") {
		t.Fatalf("held Lease: err = %v, want a refusal naming the holder", err)
	}
	if err := checkNoOtherLeader(ctx, fake.NewClientset(lease("host-a_1234", time.Minute)), "vigil-system", "vigil-manager", now); err != nil {
		t.Fatalf("expired Lease: %v", err)
	}
	if err := checkNoOtherLeader(ctx, fake.NewClientset(lease("", time.Second)), "vigil-system", "vigil-manager", now); err != nil {
		t.Fatalf("released Lease: %v", err)
	}
}
