package controller

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/util/retry"

	"github.com/vigil-storage/vigil"
)

// modifyNode is the one way the controllers change a Node. It reads the Node
// live (the informer's copy is slimmed), lets change edit a copy, and sends only
// the difference as a strategic merge patch that also carries the
// metadata.resourceVersion it read. The API server applies such a patch only to
// that version of the Node and answers anything newer with 409 Conflict; then
// the Node is read again and change runs again on what is there now (client-go's
// retry.DefaultRetry), so a taint or a volumesInUse entry someone else wrote
// meanwhile is never overwritten. Any other answer is returned as it is.
//
// subresource is "" for the Node's metadata and spec, "status" for its status.
// change reports whether it changed anything; when it did not, nothing is sent.
// A Node that does not exist needs nothing: nil.
func (c *Controller) modifyNode(ctx context.Context, name, subresource string, change func(*corev1.Node) bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if node.ResourceVersion == "" {
			return fmt.Errorf("node %s was read without a resourceVersion: no precondition, so it is not changed", name)
		}
		modified := node.DeepCopy()
		if !change(modified) {
			return nil
		}
		patch, err := nodePatch(node, modified)
		if err != nil {
			return fmt.Errorf("patch of node %s: %w", name, err)
		}
		var sub []string
		if subresource != "" {
			sub = []string{subresource}
		}
		_, err = c.client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch,
			metav1.PatchOptions{FieldManager: vigil.FieldManager}, sub...)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}

// nodePatch is the strategic merge patch from old to modified, with old's
// resourceVersion as the precondition.
func nodePatch(old, modified *corev1.Node) ([]byte, error) {
	a, err := json.Marshal(old)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(modified)
	if err != nil {
		return nil, err
	}
	diff, err := strategicpatch.CreateTwoWayMergePatch(a, b, corev1.Node{})
	if err != nil {
		return nil, err
	}
	var patch map[string]any
	if err := json.Unmarshal(diff, &patch); err != nil {
		return nil, err
	}
	meta, _ := patch["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		patch["metadata"] = meta
	}
	meta["resourceVersion"] = old.ResourceVersion
	return json.Marshal(patch)
}
