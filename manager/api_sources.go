package manager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/httpapi"
)

// recoveryInformer reads NodeRecovery objects through an informer.
type recoveryInformer struct {
	informer cache.SharedIndexInformer
}

// recoveryResync: the recoveries are watched; no periodic resync is needed.
const recoveryResync = 0 * time.Second

func newRecoveryInformer(c *v1alpha1.Client) *recoveryInformer {
	return &recoveryInformer{informer: v1alpha1.NewInformer(c, recoveryResync)}
}

func (r *recoveryInformer) onChange(f func()) error {
	_, err := r.informer.AddEventHandler(changeHandler(f))
	return err
}

// run runs the informer until ctx ends.
func (r *recoveryInformer) run(ctx context.Context) { r.informer.RunWithContext(ctx) }

var errRecoveriesNotSynced = errors.New("the NodeRecovery cache has not synced: is the CRD installed? (kubectl apply -f deploy/crds/)")

// Recoveries lists every record.
func (r *recoveryInformer) Recoveries(context.Context) ([]v1alpha1.NodeRecovery, error) {
	if !r.informer.HasSynced() {
		return nil, fmt.Errorf("%w: %w", errRecoveriesNotSynced, httpapi.ErrUnavailable)
	}
	items := r.informer.GetStore().List()
	out := make([]v1alpha1.NodeRecovery, 0, len(items))
	for _, it := range items {
		if nr, ok := it.(*v1alpha1.NodeRecovery); ok {
			out = append(out, *nr.DeepCopy())
		}
	}
	return out, nil
}

// Recovery returns one record.
func (r *recoveryInformer) Recovery(_ context.Context, name string) (*v1alpha1.NodeRecovery, error) {
	if !r.informer.HasSynced() {
		return nil, fmt.Errorf("%w: %w", errRecoveriesNotSynced, httpapi.ErrUnavailable)
	}
	it, ok, err := r.informer.GetStore().GetByKey(name)
	if err != nil {
		return nil, err
	}
	nr, isRecovery := it.(*v1alpha1.NodeRecovery)
	if !ok || !isRecovery {
		return nil, fmt.Errorf("noderecovery %q: %w", name, httpapi.ErrNotFound)
	}
	return nr.DeepCopy(), nil
}

func changeHandler(f func()) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { f() },
		UpdateFunc: func(any, any) { f() },
		DeleteFunc: func(any) { f() },
	}
}
