package controller

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
)

// vaReplaced is the API server's answer to a delete whose UID precondition no
// longer holds: the name belongs to a new VolumeAttachment.
func vaReplaced(name string) error {
	return apierrors.NewConflict(storagev1.Resource("volumeattachments"), name,
		errors.New("Precondition failed: UID in precondition: uid-va-"+name+", UID in object meta: uid-new"))
}

// TestDeleteAttachment_Answers is the one VolumeAttachment delete, answer by
// answer: deleted (counted, remembered), already gone or replaced (neither
// counted nor an error, remembered), refused (an error, not remembered), and
// one already deleted (no second call).
func TestDeleteAttachment_Answers(t *testing.T) {
	for _, tc := range []struct {
		name        string
		answer      error
		wantDeleted bool
		wantErr     bool
		wantCounted float64
	}{
		{name: "deleted", wantDeleted: true, wantCounted: 1},
		{name: "already gone", answer: apierrors.NewNotFound(storagev1.Resource("volumeattachments"), "va-a1")},
		{name: "replaced by a new attachment of the same name", answer: vaReplaced("va-a1")},
		{name: "refused", answer: apierrors.NewServiceUnavailable("etcd is sad"), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, PolicyDeleteStatefulSetPod)
			statefulSetOnDownNode(f)
			f.start()
			if tc.answer != nil {
				f.client.PrependReactor("delete", "volumeattachments", func(core.Action) (bool, runtime.Object, error) {
					return true, nil, tc.answer
				})
			}
			a := Action{Kind: ActionDeleteVolumeAttachment, Name: "va-a1", UID: "uid-va-va-a1", PVName: "pv-a"}
			deleted, err := f.ctrl.deleteAttachment(context.Background(), "node-1", a)
			if deleted != tc.wantDeleted || (err != nil) != tc.wantErr {
				t.Fatalf("deleted %t, err %v; want deleted %t, error %t", deleted, err, tc.wantDeleted, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "va-a1") {
				t.Errorf("error %q does not name the attachment", err)
			}
			if got := testutil.ToFloat64(f.ctrl.metrics.AttachmentsDeleted); got != tc.wantCounted {
				t.Errorf("attachments deleted = %v, want %v", got, tc.wantCounted)
			}
			f.client.ClearActions()
			again, err := f.ctrl.deleteAttachment(context.Background(), "node-1", a)
			calls := len(f.actions())
			if tc.wantErr {
				if calls != 1 || err == nil {
					t.Errorf("after a refusal: %d calls, err %v; want the delete tried again", calls, err)
				}
				return
			}
			if again || err != nil || calls != 0 {
				t.Errorf("second delete of the same UID: deleted %t, err %v, %d calls; want nothing", again, err, calls)
			}
		})
	}
}

// TestController_SyncPod_ReplacedAttachmentDoesNotStopTheReap: the pod's attachment
// was replaced by a new one of the same name (409 on the UID precondition). The
// one judged is gone, so the reap goes on to the pod, with no Warning; the new
// attachment is attachment recovery's to judge.
func TestController_SyncPod_ReplacedAttachmentDoesNotStopTheReap(t *testing.T) {
	f := newFixture(t, PolicyDeleteStatefulSetPod)
	statefulSetOnDownNode(f)
	f.start()
	f.client.PrependReactor("delete", "volumeattachments", func(a core.Action) (bool, runtime.Object, error) {
		if name := a.(core.DeleteAction).GetName(); name == "va-a1" {
			return true, nil, vaReplaced(name)
		}
		return false, nil, nil
	})
	if err := f.ctrl.syncPod(context.Background(), "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.expectActions(
		"delete volumeattachments /va-a1 uid=uid-va-va-a1",
		"delete volumeattachments /va-b1 uid=uid-va-va-b1",
		"delete pods app/db-0 grace=0 uid=uid-app-db-0")
	f.expectEvents("Normal "+EventVolumeAttachmentDeleted, "Normal "+EventVolumeAttachmentDeleted, "Normal "+EventPodForceDeleted)
}

// TestController_SyncAttachments_ReplacedAttachmentIsNoError: attachment recovery
// answers the same 409 the same way: no error, no Warning, no retry.
func TestController_SyncAttachments_ReplacedAttachmentIsNoError(t *testing.T) {
	ctx := context.Background()
	f := attachFixture(t, AttachmentWait)
	f.start()
	if _, err := f.backend.fenceAll(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	f.ctrl.nodes.markFenced("node-1", t0, fencePlan{})
	f.client.PrependReactor("delete", "volumeattachments", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, vaReplaced("va-a1")
	})
	if err := f.ctrl.syncAttachments(ctx, "node-1"); err != nil {
		t.Fatalf("a replaced attachment is an error: %v", err)
	}
	for _, e := range f.events() {
		if strings.HasPrefix(e, "Warning") {
			t.Errorf("Warning for a replaced attachment: %q", e)
		}
	}
}
