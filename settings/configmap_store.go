package settings

import (
	"context"
	"encoding/json"
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

// HistoryKey is the key of the settings ConfigMap that holds the change history:
// one JSON record per line, oldest first. Its leading dot keeps it apart from
// setting names (and a mounted ConfigMap's reader skips it); the store hides it
// from Get, List and Watch and refuses to Set or Delete it.
const HistoryKey = ".vigil-history"

// historyMaxBytes bounds the history key, so that it leaves the ConfigMap
// (1 MiB in all) room for the values: the oldest records go first.
const historyMaxBytes = 512 << 10

// configMapStore keeps settings in one ConfigMap, one key per setting, and the
// change history under HistoryKey of the same ConfigMap, so a change and its
// record are one update. Every write is read-modify-update with the
// resourceVersion read, retried on conflict, so concurrent writers (several
// manager replicas, kubectl) never lose an update.
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
	if name == HistoryKey {
		return "", false, nil
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
	if !found {
		return map[string]string{}, nil
	}
	return settingValues(cm.Data), nil
}

// settingValues is a copy of data without the history.
func settingValues(data map[string]string) map[string]string {
	out := maps.Clone(data)
	if out == nil {
		out = map[string]string{}
	}
	delete(out, HistoryKey)
	return out
}

func (c *configMapStore) reserved(name string) error {
	if name == HistoryKey {
		return fmt.Errorf("%s: %q is reserved for the change history, not a setting", c.ref(), name)
	}
	return nil
}

func (c *configMapStore) Set(ctx context.Context, name, value string) error {
	if err := c.reserved(name); err != nil {
		return err
	}
	return c.modify(ctx, func(data map[string]string) (bool, error) {
		if old, ok := data[name]; ok && old == value {
			return false, nil
		}
		data[name] = value
		return true, nil
	})
}

func (c *configMapStore) Delete(ctx context.Context, name string) error {
	if err := c.reserved(name); err != nil {
		return err
	}
	return c.modify(ctx, func(data map[string]string) (bool, error) {
		if _, ok := data[name]; !ok {
			return false, nil
		}
		delete(data, name)
		return true, nil
	})
}

// Update is one update of the ConfigMap (values and history key together),
// retried from a fresh read after a conflict: fn then runs again.
func (c *configMapStore) Update(ctx context.Context, fn UpdateFunc) error {
	return c.modify(ctx, func(data map[string]string) (bool, error) {
		before := settingValues(data)
		values := maps.Clone(before)
		hist := data[HistoryKey]
		records, err := fn(values, func(match func(ChangeRecord) bool) (ChangeRecord, bool) {
			return newestLine(hist, match)
		})
		if err != nil {
			return false, err
		}
		if _, ok := values[HistoryKey]; ok {
			return false, c.reserved(HistoryKey)
		}
		events := diff(before, values)
		for _, ev := range events {
			if ev.Deleted {
				delete(data, ev.Name)
			} else {
				data[ev.Name] = ev.Value
			}
		}
		if len(records) > 0 {
			h, err := appendLines(hist, records)
			if err != nil {
				return false, err
			}
			data[HistoryKey] = h
		}
		return len(events) > 0 || len(records) > 0, nil
	})
}

func (c *configMapStore) History(ctx context.Context, limit int) ([]ChangeRecord, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	cm, found, err := c.read(ctx)
	if err != nil || !found {
		return nil, err
	}
	var out []ChangeRecord
	lines := strings.Split(strings.TrimSuffix(cm.Data[HistoryKey], "\n"), "\n")
	for i := len(lines) - 1; i >= 0 && (limit <= 0 || len(out) < limit); i-- {
		if lines[i] == "" {
			continue
		}
		var r ChangeRecord
		if err := json.Unmarshal([]byte(lines[i]), &r); err != nil {
			return nil, fmt.Errorf("%s: key %s, line %d: not a change record: %w", c.ref(), HistoryKey, i+1, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// newestLine searches the history text from its last line back; a line that
// does not decode is skipped.
func newestLine(hist string, match func(ChangeRecord) bool) (ChangeRecord, bool) {
	for rest := strings.TrimSuffix(hist, "\n"); rest != ""; {
		i := strings.LastIndexByte(rest, '\n')
		line := rest[i+1:]
		rest = rest[:max(i, 0)]
		var r ChangeRecord
		if json.Unmarshal([]byte(line), &r) == nil && match(r) {
			return r, true
		}
	}
	return ChangeRecord{}, false
}

// appendLines appends records to the history text and drops the oldest lines
// beyond HistoryLimit or historyMaxBytes.
func appendLines(hist string, records []ChangeRecord) (string, error) {
	var b strings.Builder
	b.WriteString(hist)
	if hist != "" && !strings.HasSuffix(hist, "\n") {
		b.WriteByte('\n')
	}
	for _, r := range records {
		data, err := json.Marshal(r)
		if err != nil {
			return "", err
		}
		b.Write(data)
		b.WriteByte('\n')
	}
	out := b.String()
	for n := strings.Count(out, "\n"); n > HistoryLimit || (len(out) > historyMaxBytes && n > 1); n-- {
		out = out[strings.IndexByte(out, '\n')+1:]
	}
	return out, nil
}

// modify applies change to a fresh copy of the data and writes it back under the
// resourceVersion it read, retrying from the read after a conflict. An error of
// change is returned as is.
func (c *configMapStore) modify(ctx context.Context, change func(map[string]string) (bool, error)) error {
	if err := c.checkOpen(); err != nil {
		return err
	}
	var changeErr error
	apply := func(data map[string]string) bool {
		changed, err := change(data)
		if err != nil {
			changeErr = err
		}
		return changed && err == nil
	}
	retriable := func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }
	err := retry.OnError(configMapRetry, retriable, func() error {
		cm, found, err := c.read(ctx)
		if err != nil {
			return err
		}
		if !found {
			data := map[string]string{}
			if !apply(data) {
				return changeErr
			}
			_, err := c.client.CoreV1().ConfigMaps(c.namespace).Create(ctx, c.newConfigMap(data),
				metav1.CreateOptions{FieldManager: vigil.FieldManager})
			return err
		}
		cm = cm.DeepCopy()
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		if !apply(cm.Data) {
			return changeErr
		}
		_, err = c.client.CoreV1().ConfigMaps(c.namespace).Update(ctx, cm, metav1.UpdateOptions{FieldManager: vigil.FieldManager})
		return err
	})
	switch {
	case err == nil:
		return nil
	case changeErr != nil && errors.Is(err, changeErr):
		return changeErr
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
		return settingValues(cm.Data), true
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
