package images_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vigil-storage/vigil/deploy/deploytest"
	"github.com/vigil-storage/vigil/sandbox/images"
)

// TestDeploy_EveryImageBuilt: every container of deploy/ runs an image of the
// catalogue, under the name deploy/ gives it; a sidecar's image is tagged with
// the version deploy/ names; every command a vigil container runs is in the
// vigil image, and the vigil image holds no binary that no pod runs.
func TestDeploy_EveryImageBuilt(t *testing.T) {
	objs, err := deploytest.Build(filepath.Join(deploytest.Dir(), "base"))
	if err != nil {
		t.Fatal(err)
	}
	ws, err := deploytest.Workloads(objs)
	if err != nil {
		t.Fatal(err)
	}
	res := buildAll(t)
	c, _ := readImage(t, res[images.Vigil])
	run := map[string]bool{}
	for _, w := range ws {
		for _, ctr := range append(w.Spec.InitContainers, w.Spec.Containers...) {
			repo, tag, _ := strings.Cut(ctr.Image, ":")
			name := repo[strings.LastIndex(repo, "/")+1:]
			if !slices.Contains(images.Names(), name) {
				t.Errorf("%s %s: container %s runs %s, which is not one of the images built here (%v)", w.Kind, w.Name, ctr.Name, ctr.Image, images.Names())
				continue
			}
			if name != images.Vigil {
				if ref, _ := images.Ref(name, "dev", pins); !strings.HasSuffix(ref, ":"+tag) {
					t.Errorf("%s %s: container %s runs %s; the image built here is %s (sandbox/tools/pins.env)", w.Kind, w.Name, ctr.Name, ctr.Image, ref)
				}
				continue
			}
			if len(ctr.Command) == 0 {
				t.Errorf("%s %s: container %s of the vigil image gives no command", w.Kind, w.Name, ctr.Name)
				continue
			}
			run[ctr.Command[0]] = true
			if r, ok := c.Resolve(ctr.Command[0]); !ok || !c.Files[r].ELF {
				t.Errorf("%s %s: container %s runs %s, which the vigil image does not hold", w.Kind, w.Name, ctr.Name, ctr.Command[0])
			}
		}
	}
	for p, f := range c.Files {
		if strings.HasPrefix(p, images.BinDir+"/") && f.ELF && !run[p] {
			t.Errorf("the vigil image holds %s, which no container of deploy/ runs", p)
		}
	}
}
