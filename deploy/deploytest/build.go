package deploytest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// ErrNotKustomization is returned by Build for a directory without a
// kustomization.yaml.
var ErrNotKustomization = errors.New("not a kustomization directory")

// Dir is the repository's deploy/ directory, found from this source file, so
// that tests in any package reach it.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// Build runs `kustomize build dir` (what `kubectl apply -k dir` applies, with
// kubectl's default load restrictions) and returns the objects in order.
func Build(dir string) ([]*unstructured.Unstructured, error) {
	if _, err := os.Stat(filepath.Join(dir, "kustomization.yaml")); err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w (want a directory holding kustomization.yaml)", dir, ErrNotKustomization)
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range res.Resources() {
		// Through JSON, so numbers are int64 or float64 as everywhere in
		// client-go's unstructured objects.
		b, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", dir, r.CurId(), err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", dir, r.CurId(), err)
		}
		objs = append(objs, u)
	}
	return objs, nil
}
