package settings_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vigil-storage/vigil/settings"
)

func ExampleNew() {
	store := settings.NewMemoryStore()
	defer store.Close()
	s, err := settings.New(store, "") // no overlay directory
	if err != nil {
		panic(err)
	}
	defer s.Close()

	fmt.Println(s.NodeDownPodDeletionPolicy(), s.NodeDownGracePeriod())
	if err := s.Set(context.Background(), settings.NameNodeDownGracePeriod, "1500ms"); err != nil {
		panic(err)
	}
	fmt.Println(s.NodeDownGracePeriod())
	// Output:
	// do-nothing 2s
	// 1.5s
}

func ExampleSettings_Set_invalid() {
	s, _ := settings.New(settings.NewMemoryStore(), "")
	defer s.Close()
	err := s.Set(context.Background(), "node-down-pod-deletion-policy", "delete-everything")
	fmt.Println(errors.Is(err, settings.ErrInvalidValue))
	fmt.Println(err)
	// Output:
	// true
	// setting node-down-pod-deletion-policy: invalid value "delete-everything": not a choice; allowed: one of do-nothing, delete-statefulset-pod, delete-deployment-pod, delete-both-statefulset-and-deployment-pod
}

func ExampleSettings_Subscribe() {
	store := settings.NewMemoryStore()
	s, _ := settings.New(store, "")
	defer s.Close()
	changes, cancel := s.Subscribe()
	defer cancel()

	// Another writer of the store (another replica, kubectl on the ConfigMap).
	_ = store.Set(context.Background(), "volume-attachment-recovery-policy", "immediate")
	c := <-changes
	fmt.Println(c.Name, c.Value, c.Source)
	// Output:
	// volume-attachment-recovery-policy immediate store
}

func ExampleNew_overlay() {
	dir, _ := os.MkdirTemp("", "overlay")
	defer os.RemoveAll(dir)
	_ = os.WriteFile(filepath.Join(dir, "dry-run"), []byte("true\n"), 0o644)

	s, _ := settings.New(settings.NewMemoryStore(), dir)
	defer s.Close()
	e, _ := s.Get("dry-run")
	fmt.Println(s.DryRun(), e.Source, e.ManagedPath == filepath.Join(dir, "dry-run"))
	err := s.Set(context.Background(), "dry-run", "false")
	fmt.Println(errors.Is(err, settings.ErrManaged))
	// Output:
	// true managed true
	// true
}

func ExampleLookup() {
	_, err := settings.Lookup("node-down-pod-delete-policy")
	fmt.Println(err)
	// Output:
	// unknown setting "node-down-pod-delete-policy" (did you mean node-down-pod-deletion-policy?)
}

func ExampleParseValue() {
	v, _ := settings.ParseValue("extra-protected-provisioners", "ebs.csi.aws.com, pd.csi.storage.gke.io")
	fmt.Printf("%q\n", v)
	_, err := settings.ParseValue("crash-loop-restart-limit", "0")
	fmt.Println(err)
	// Output:
	// ["ebs.csi.aws.com" "pd.csi.storage.gke.io"]
	// setting crash-loop-restart-limit: invalid value "0": out of range; allowed: an integer from 1 to 1000
}

func ExampleOpenStore() {
	dir, _ := os.MkdirTemp("", "vigil")
	defer os.RemoveAll(dir)
	store, err := settings.OpenStore(context.Background(), "bolt:"+filepath.Join(dir, "settings.db"), "")
	if err != nil {
		panic(err)
	}
	_ = store.Set(context.Background(), "dry-run", "true")
	_ = store.Close()

	// Another process, later.
	again, _ := settings.OpenBolt(filepath.Join(dir, "settings.db"))
	defer again.Close()
	v, ok, _ := again.Get(context.Background(), "dry-run")
	fmt.Println(v, ok)
	// Output:
	// true true
}

func ExampleMarkdownTable() {
	fmt.Println(len(settings.MarkdownTable()) > 0)
	// Output: true
}

func ExampleSettings_SetMany() {
	store := settings.NewMemoryStore()
	s, _ := settings.New(store, "")
	defer s.Close()
	ctx := context.Background()
	who := settings.Actor{Source: settings.ActorAPI, Identity: "ops@example.com"}

	// All or nothing: one bad value and nothing changes.
	err := s.SetMany(ctx, map[string]string{"dry-run": "true", "crash-loop-restart-limit": "0"}, who)
	var ve *settings.ValueError
	fmt.Println(errors.As(err, &ve), ve.Setting, ve.Value, s.DryRun())

	_ = s.SetMany(ctx, map[string]string{"dry-run": "true", "crash-loop-restart-limit": "8"}, who)
	history, _ := s.History(ctx, 0)
	for _, r := range history {
		fmt.Println(r.Setting, r.Old, r.OldSource, "->", r.New, r.NewSource, "by", r.Actor.Source, r.Actor.Identity)
	}
	// Output:
	// true crash-loop-restart-limit 0 false
	// dry-run false default -> true store by api ops@example.com
	// crash-loop-restart-limit 5 default -> 8 store by api ops@example.com
}

func ExampleSettings_ActBlocked() {
	dir, _ := os.MkdirTemp("", "overlay")
	defer os.RemoveAll(dir)
	_ = os.WriteFile(filepath.Join(dir, "dry-run"), []byte("ture"), 0o644) // a typo, at startup

	s, _ := settings.New(settings.NewMemoryStore(), dir)
	defer s.Close()
	err := s.ActBlocked()
	fmt.Println(s.DryRun(), errors.Is(err, settings.ErrActBlocked))
	// Output:
	// false true
}
