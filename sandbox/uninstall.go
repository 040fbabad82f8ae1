package sandbox

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// Uninstalled is what Uninstall deleted and how long it took.
type Uninstalled struct {
	// Objects is the number of objects of the kustomization.
	Objects int
	// Deleted is how long the deletes took; Took is Uninstall's whole time,
	// until the last object was gone.
	Deleted, Took time.Duration
}

// Uninstall is `kubectl delete -k deploy/` on a sandbox where Install
// applied cfg's kustomization: it deletes every object of it in the order
// kustomize gives (the Namespace first, so its contents go with it), with
// background propagation, an object already gone being no error, then waits
// until each is gone, as kubectl's --wait does. It is only that step of the
// procedure of docs/operations.md (Uninstalling): the workloads and claims
// that use Vigil's volumes must be gone before, and what Vigil left on the
// Nodes and on the nodes' disks is removed after, by whoever runs it.
func (s *Sandbox) Uninstall(ctx context.Context, cfg InstallConfig) (*Uninstalled, error) {
	t0 := time.Now()
	logf := cfg.defaults()
	objs, err := RenderDeploy(cfg.Dir)
	if err != nil {
		return nil, err
	}
	dc, err := dynamic.NewForConfig(s.rest)
	if err != nil {
		return nil, err
	}
	// Every mapping before the first delete: once the CRDs are gone, their
	// kinds no longer map.
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(s.client.Discovery()))
	ris := make([]dynamic.ResourceInterface, len(objs))
	for i, o := range objs {
		if ris[i], err = resourceOf(dc, mapper, o); err != nil {
			return nil, fmt.Errorf("delete %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	logf("uninstall: deleting %d objects of %s", len(objs), installSource(cfg.Dir))
	bg := metav1.DeletePropagationBackground
	for i, o := range objs {
		err := ris[i].Delete(ctx, o.GetName(), metav1.DeleteOptions{PropagationPolicy: &bg})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("delete %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
	deleted := time.Since(t0)
	logf("uninstall: deleted in %.1fs; waiting until every object is gone", deleted.Seconds())
	err = Poll(ctx, cfg.Timeout, "every object of "+installSource(cfg.Dir)+" gone", func(ctx context.Context) (bool, string, error) {
		var left []string
		for i, o := range objs {
			_, err := ris[i].Get(ctx, o.GetName(), metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				left = append(left, fmt.Sprintf("%s %s: %v", o.GetKind(), o.GetName(), err))
			default:
				left = append(left, o.GetKind()+" "+o.GetName())
			}
		}
		return len(left) == 0, fmt.Sprintf("%d left: %s", len(left), strings.Join(left, ", ")), nil
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("uninstall: %w", err)
	}
	return &Uninstalled{Objects: len(objs), Deleted: deleted, Took: time.Since(t0)}, nil
}

// resourceOf is the dynamic client of o's resource (in its namespace).
func resourceOf(dc dynamic.Interface, mapper *restmapper.DeferredDiscoveryRESTMapper, o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	m, err := mapper.RESTMapping(schema.GroupKind{Group: gvk.Group, Kind: gvk.Kind}, gvk.Version)
	if err != nil {
		return nil, err
	}
	if m.Scope.Name() == "namespace" {
		return dc.Resource(m.Resource).Namespace(o.GetNamespace()), nil
	}
	return dc.Resource(m.Resource), nil
}
