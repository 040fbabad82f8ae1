package settings

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/vigil-storage/vigil"
)

// configMapRetry is how a write retries after a resourceVersion conflict (another
// writer changed the ConfigMap between our read and our update): quickly at
// first, for as long as a busy ConfigMap plausibly needs.
var configMapRetry = wait.Backoff{Steps: 40, Duration: 5 * time.Millisecond, Factor: 1.5, Jitter: 0.5, Cap: 500 * time.Millisecond}

// configMapSyncTimeout bounds how long Watch waits for the informer's first list.
const configMapSyncTimeout = 30 * time.Second

// configMapStore keeps settings in one ConfigMap, one key per setting. Every write
// is read-modify-update with the resourceVersion read, retried on conflict, so
// concurrent writers (several manager replicas, kubectl) never lose an update.
type configMapStore struct {
	client          kubernetes.Interface
	namespace, name string

	mu       sync.Mutex
	closed   bool
	ctx      context.Context // cancelled by Close: ends every informer
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	watchers watchers
}

// NewConfigMapStore returns a Store over the ConfigMap namespace/name. The
// ConfigMap need not exist (the first Set creates it), but the API server must
// answer: an unreachable server or a refused read is an ErrStoreUnavailable.
func NewConfigMapStore(ctx context.Context, client kubernetes.Interface, namespace, name string) (Store, error) {
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return nil, fmt.Errorf("configmap store: namespace %q: %s", namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, fmt.Errorf("configmap store: name %q: %s", name, strings.Join(errs, "; "))
	}
	c := &configMapStore{client: client, namespace: namespace, name: name}
	if _, _, err := c.read(ctx); err != nil {
		return nil, err
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c, nil
}

func (c *configMapStore) ref() string { return "configmap " + c.namespace + "/" + c.name }

func (c *configMapStore) checkOpen() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	return nil
}

// read returns the ConfigMap, or nil when it does not exist.
func (c *configMapStore) read(ctx context.Context) (*corev1.ConfigMap, bool, error) {
	cm, err := c.client.CoreV1().ConfigMaps(c.namespace).Get(ctx, c.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w: %w", c.ref(), ErrStoreUnavailable, err)
	}
	return cm, true, nil
}

func (c *configMapStore) Get(ctx context.Context, name string) (string, bool, error) {
	if err := c.checkOpen(); err != nil {
		return "", false, err
	}
	cm, found, err := c.read(ctx)
	if err != nil || !found {
		return "", false, err
	}
	v, ok := cm.Data[name]
	return v, ok, nil
}

func (c *configMapStore) List(ctx context.Context) (map[string]string, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	cm, found, err := c.read(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string)
	if found {
		maps.Copy(out, cm.Data)
	}
	return out, nil
}

func (c *configMapStore) Set(ctx context.Context, name, value string) error {
	return c.modify(ctx, func(data map[string]string) bool {
		if old, ok := data[name]; ok && old == value {
			return false
		}
		data[name] = value
		return true
	})
}

func (c *configMapStore) Delete(ctx context.Context, name string) error {
	return c.modify(ctx, func(data map[string]string) bool {
		if _, ok := data[name]; !ok {
			return false
		}
		delete(data, name)
		return true
	})
}

// modify applies change to a fresh copy of the data and writes it back under the
// resourceVersion it read, retrying from the read after a conflict.
func (c *configMapStore) modify(ctx context.Context, change func(map[string]string) bool) error {
	if err := c.checkOpen(); err != nil {
		return err
	}
	retriable := func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }
	err := retry.OnError(configMapRetry, retriable, func() error {
		cm, found, err := c.read(ctx)
		if err != nil {
			return err
		}
		if !found {
			data := map[string]string{}
			if !change(data) {
				return nil
			}
			_, err := c.client.CoreV1().ConfigMaps(c.namespace).Create(ctx, c.newConfigMap(data),
				metav1.CreateOptions{FieldManager: vigil.FieldManager})
			return err
		}
		cm = cm.DeepCopy()
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		if !change(cm.Data) {
			return nil
		}
		_, err = c.client.CoreV1().ConfigMaps(c.namespace).Update(ctx, cm, metav1.UpdateOptions{FieldManager: vigil.FieldManager})
		return err
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrStoreUnavailable):
		return err
	case retriable(err):
		return fmt.Errorf("%s: still conflicting with other writers after %d attempts: %w", c.ref(), configMapRetry.Steps, err)
	}
	return fmt.Errorf("%s: write: %w", c.ref(), err)
}

func (c *configMapStore) newConfigMap(data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: c.namespace, Name: c.name,
			Labels: map[string]string{"app.kubernetes.io/part-of": "vigil", "app.kubernetes.io/component": "settings"},
		},
		Data: data,
	}
}

// Watch runs an informer on the one ConfigMap and reports the keys that each
// add, update or delete of it changes.
func (c *configMapStore) Watch(ctx context.Context) (<-chan StoreEvent, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.ctx, cancel)
	q, err := c.watchers.add(wctx)
	if err != nil {
		c.mu.Unlock()
		cancel()
		return nil, err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(c.client, 0,
		informers.WithNamespace(c.namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", c.name).String()
		}))
	inf := factory.Core().V1().ConfigMaps().Informer()
	reg, err := inf.AddEventHandler(c.handler(q))
	if err != nil {
		c.mu.Unlock()
		cancel()
		return nil, fmt.Errorf("%s: watch: %w", c.ref(), err)
	}
	factory.Start(wctx.Done())
	c.wg.Go(func() {
		<-wctx.Done()
		stop()
		factory.Shutdown()
	})
	c.mu.Unlock()
	syncCtx, syncDone := context.WithTimeoutCause(wctx, configMapSyncTimeout,
		fmt.Errorf("no answer within %s", configMapSyncTimeout))
	defer syncDone()
	if !cache.WaitForCacheSync(syncCtx.Done(), reg.HasSynced) {
		cancel()
		return nil, fmt.Errorf("%s: watch: %w: %w", c.ref(), ErrStoreUnavailable, context.Cause(syncCtx))
	}
	return q.out, nil
}

// handler turns informer notifications into per-key events. Objects of the
// initial list are the baseline, not changes.
func (c *configMapStore) handler(q *queue[StoreEvent]) cache.ResourceEventHandler {
	data := func(obj any) (map[string]string, bool) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok || cm.Name != c.name || cm.Namespace != c.namespace {
			return nil, false
		}
		return cm.Data, true
	}
	push := func(before, after map[string]string) {
		for _, ev := range diff(before, after) {
			q.push(ev)
		}
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if d, ok := data(obj); ok && !initial {
				push(nil, d)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			before, ok1 := data(oldObj)
			after, ok2 := data(newObj)
			if ok1 && ok2 {
				push(before, after)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := data(obj); ok {
				push(d, nil)
			}
		},
	}
}

// Close stops every informer and ends the watches.
func (c *configMapStore) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	c.watchers.closeAll()
	return nil
}
