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

// newRecoveryInformer watches the records through c; a nil c (run
// --recoveries=false) watches nothing and answers that records are off.
func newRecoveryInformer(c *v1alpha1.Client) *recoveryInformer {
	if c == nil {
		return &recoveryInformer{}
	}
	return &recoveryInformer{informer: v1alpha1.NewInformer(c, recoveryResync)}
}

func (r *recoveryInformer) onChange(f func()) error {
	if r.informer == nil {
		return nil
	}
	_, err := r.informer.AddEventHandler(changeHandler(f))
	return err
}

// run runs the informer until ctx ends.
func (r *recoveryInformer) run(ctx context.Context) {
	if r.informer != nil {
		r.informer.RunWithContext(ctx)
	}
}

// ready is nil when the records can be read.
func (r *recoveryInformer) ready() error {
	switch {
	case r.informer == nil:
		return fmt.Errorf("%w: %w", errRecoveriesOff, httpapi.ErrUnavailable)
	case !r.informer.HasSynced():
		return fmt.Errorf("%w: %w", errRecoveriesNotSynced, httpapi.ErrUnavailable)
	}
	return nil
}

var (
	errRecoveriesNotSynced = errors.New("the NodeRecovery cache has not synced yet")
	errRecoveriesOff       = errors.New("recovery records are off (vigil-manager run --recoveries=false)")
)

// Recoveries lists every record.
func (r *recoveryInformer) Recoveries(context.Context) ([]v1alpha1.NodeRecovery, error) {
	if err := r.ready(); err != nil {
		return nil, err
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
	if err := r.ready(); err != nil {
		return nil, err
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
