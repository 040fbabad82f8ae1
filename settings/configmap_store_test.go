package settings_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/vigil-storage/vigil/settings"
	"github.com/vigil-storage/vigil/settings/settingstest"
)

// newAPIServerLikeClient returns client-go's fake clientset made to enforce
// optimistic concurrency on ConfigMaps the way the API server does: every stored
// object carries a resourceVersion, and an update naming a stale one is a
// Conflict. (The plain fake stores whatever it gets, which would hide lost updates.)
func newAPIServerLikeClient() *fake.Clientset {
	client := fake.NewClientset()
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	var (
		mu sync.Mutex
		rv int64
	)
	next := func() string { rv++; return strconv.FormatInt(rv, 10) }
	client.PrependReactor("create", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		cm := a.(k8stesting.CreateAction).GetObject().(*corev1.ConfigMap).DeepCopy()
		cm.ResourceVersion = next()
		if err := client.Tracker().Create(gvr, cm, cm.Namespace); err != nil {
			return true, nil, err
		}
		return true, cm, nil
	})
	client.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		cm := a.(k8stesting.UpdateAction).GetObject().(*corev1.ConfigMap).DeepCopy()
		cur, err := client.Tracker().Get(gvr, cm.Namespace, cm.Name)
		if err != nil {
			return true, nil, err
		}
		if cm.ResourceVersion != "" && cm.ResourceVersion != cur.(*corev1.ConfigMap).ResourceVersion {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), cm.Name,
				fmt.Errorf("resourceVersion %s is stale", cm.ResourceVersion))
		}
		cm.ResourceVersion = next()
		if err := client.Tracker().Update(gvr, cm, cm.Namespace); err != nil {
			return true, nil, err
		}
		return true, cm, nil
	})
	return client
}

func TestConfigMapStore_Conformance(t *testing.T) {
	settingstest.RunStoreConformance(t, settingstest.Backend{
		Persistent: true,
		New: func(t *testing.T) func(*testing.T) settings.Store {
			client := newAPIServerLikeClient()
			return func(t *testing.T) settings.Store {
				s, err := settings.NewConfigMapStore(context.Background(), client, "vigil-system", "vigil-settings")
				if err != nil {
					t.Fatalf("NewConfigMapStore: %v", err)
				}
				return s
			}
		},
	})
}

func TestConfigMapStore_Set_RetriesConflict(t *testing.T) {
	client := newAPIServerLikeClient()
	ctx := context.Background()
	s, err := settings.NewConfigMapStore(ctx, client, "ns", "cm")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Set(ctx, "dry-run", "true"); err != nil {
		t.Fatal(err)
	}
	// Someone else updates the ConfigMap between our read and our update, twice.
	var interfered atomic.Int32
	client.PrependReactor("update", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		if interfered.Add(1) <= 2 {
			cm, _ := client.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ns", "cm")
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "cm",
				fmt.Errorf("changed since %s", cm.(*corev1.ConfigMap).ResourceVersion))
		}
		return false, nil, nil
	})
	if err := s.Set(ctx, "crash-loop-restart-limit", "9"); err != nil {
		t.Fatalf("Set after conflicts: %v", err)
	}
	all, _ := s.List(ctx)
	if all["dry-run"] != "true" || all["crash-loop-restart-limit"] != "9" || interfered.Load() != 3 {
		t.Fatalf("after retried conflicts: %v (%d update attempts), want both keys and 3 attempts", all, interfered.Load())
	}
}

func TestConfigMapStore_Unreachable(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
	})
	_, err := settings.NewConfigMapStore(context.Background(), client, "ns", "cm")
	if !errors.Is(err, settings.ErrStoreUnavailable) {
		t.Fatalf("NewConfigMapStore against a dead server = %v, want ErrStoreUnavailable", err)
	}
}

func TestNewConfigMapStore_BadNames(t *testing.T) {
	for _, ref := range [][2]string{{"Bad_NS", "cm"}, {"ns", "UPPER"}, {"", "cm"}, {"ns", ""}} {
		if _, err := settings.NewConfigMapStore(context.Background(), fake.NewClientset(), ref[0], ref[1]); err == nil {
			t.Errorf("NewConfigMapStore(%q, %q) succeeded", ref[0], ref[1])
		}
	}
}

// TestConfigMapStore_HistoryKey: the history lives under HistoryKey of the same
// ConfigMap, a valid key that is not a setting: hidden from Get and List,
// refused to Set and Delete, one JSON record per line.
func TestConfigMapStore_HistoryKey(t *testing.T) {
	if errs := validation.IsConfigMapKey(settings.HistoryKey); len(errs) > 0 {
		t.Fatalf("HistoryKey %q is not a valid ConfigMap key: %v", settings.HistoryKey, errs)
	}
	client := newAPIServerLikeClient()
	ctx := context.Background()
	store, err := settings.NewConfigMapStore(ctx, client, "ns", "cm")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	s, _ := newSettings(t, store, "")
	if err := s.SetAs(ctx, "dry-run", "true", settings.Actor{Source: settings.ActorCLI, Identity: "alice"}); err != nil {
		t.Fatal(err)
	}
	cm, err := client.CoreV1().ConfigMaps("ns").Get(ctx, "cm", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(cm.Data[settings.HistoryKey], "\n"), "\n")
	var r settings.ChangeRecord
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &r) != nil || r.Setting != "dry-run" || r.Actor.Identity != "alice" {
		t.Fatalf("history key %q, want one JSON record of the change", cm.Data[settings.HistoryKey])
	}
	if _, ok, _ := store.Get(ctx, settings.HistoryKey); ok {
		t.Error("Get shows the history key")
	}
	if all, _ := store.List(ctx); len(all) != 1 {
		t.Errorf("List = %v, want dry-run only", all)
	}
	for _, err := range []error{store.Set(ctx, settings.HistoryKey, "x"), store.Delete(ctx, settings.HistoryKey)} {
		if err == nil || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("write of the history key = %v, want refused as reserved", err)
		}
	}
}

// TestConfigMapStore_HistoryBoundedInBytes: long values cannot grow the history
// past its share of the ConfigMap; the newest records stay.
func TestConfigMapStore_HistoryBoundedInBytes(t *testing.T) {
	client := newAPIServerLikeClient()
	ctx := context.Background()
	store, err := settings.NewConfigMapStore(ctx, client, "ns", "cm")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	long := strings.Repeat("a.csi.io,", 400) // 3.6 KB per value, two per record
	for i := range 20 {
		var batch []settings.ChangeRecord
		for j := range 20 {
			batch = append(batch, settings.ChangeRecord{Setting: "extra-protected-provisioners", Old: long, New: long + strconv.Itoa(i*20+j)})
		}
		err := store.Update(ctx, func(map[string]string, func(func(settings.ChangeRecord) bool) (settings.ChangeRecord, bool)) ([]settings.ChangeRecord, error) {
			return batch, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	cm, _ := client.CoreV1().ConfigMaps("ns").Get(ctx, "cm", metav1.GetOptions{})
	h, err := store.History(ctx, 0)
	if n := len(cm.Data[settings.HistoryKey]); n > 512<<10 || err != nil || len(h) == 0 || h[0].New != long+"399" {
		t.Fatalf("history key of %d bytes, %d records (newest %.20q…), %v; want at most 512 KiB ending with the newest", n, len(h), h[0].New, err)
	}
}
