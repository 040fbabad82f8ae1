package sandbox

import (
	"context"
	"fmt"
	"io/fs"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/vigil-storage/vigil/deploy"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDs creates (or updates) Vigil's CustomResourceDefinitions from
// deploy/crds in the cluster of cfg and waits until each is Established, so
// that `vigil-manager run` can write NodeRecovery objects at once.
func InstallCRDs(ctx context.Context, cfg *rest.Config) error {
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("install CRDs: %w", err)
	}
	files, err := fs.Glob(deploy.CRDs, "crds/*.yaml")
	if err != nil || len(files) == 0 {
		return fmt.Errorf("install CRDs: no manifests embedded (%v)", err)
	}
	crds := dc.Resource(crdResource)
	for _, f := range files {
		b, err := deploy.CRDs.ReadFile(f)
		if err != nil {
			return err
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(b, &obj.Object); err != nil {
			return fmt.Errorf("install CRDs: %s: %w", f, err)
		}
		_, err = crds.Create(ctx, obj, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			cur, gerr := crds.Get(ctx, obj.GetName(), metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			obj.SetResourceVersion(cur.GetResourceVersion())
			_, err = crds.Update(ctx, obj, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("install CRD %s: %w", obj.GetName(), err)
		}
		if err := waitEstablished(ctx, crds, obj.GetName()); err != nil {
			return err
		}
	}
	return nil
}

func waitEstablished(ctx context.Context, crds dynamic.NamespaceableResourceInterface, name string) error {
	return Poll(ctx, 30*time.Second, "CRD "+name+" Established", func(ctx context.Context) (bool, string, error) {
		cur, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		conds, _, _ := unstructured.NestedSlice(cur.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("conditions %v", conds), nil
	}, nil)
}
