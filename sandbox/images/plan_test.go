package images

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestPlan_SidecarMissing_Skipped: building every image skips a sidecar that
// make testbin has not built or that is not pinned, and says why; asked by
// name, the same sidecar is an error (TestBuild_BadInput).
func TestPlan_SidecarMissing_Skipped(t *testing.T) {
	testbin := t.TempDir()
	if err := os.WriteFile(filepath.Join(testbin, CSIProvisioner), []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	bins := t.TempDir()
	for _, b := range vigilBinaries {
		if err := os.WriteFile(filepath.Join(bins, b), []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_, self, _, _ := runtime.Caller(0)
	o := Options{Out: t.TempDir(), VigilBinDir: bins, TestbinDir: testbin, SourceDir: filepath.Join(filepath.Dir(self), "..", ".."),
		Pins: map[string]string{"EXTERNAL_PROVISIONER_VERSION": "v6.3.0", "EXTERNAL_ATTACHER_VERSION": "v4.13.0"}}
	build, skipped, err := plan(&o)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range build {
		names = append(names, s.name)
	}
	if got := strings.Join(names, " "); got != "vigil pause writer tools csi-provisioner" {
		t.Errorf("built %q, want vigil pause writer tools csi-provisioner", got)
	}
	why := map[string]string{}
	for _, r := range skipped {
		why[r.Name] = r.Skipped
	}
	for name, want := range map[string]string{
		CSIAttacher:   "csi-attacher is not in " + testbin + " (run make testbin)",
		CSIRegistrar:  "pins no NODE_DRIVER_REGISTRAR_VERSION, so make testbin does not build csi-node-driver-registrar yet",
		LivenessProbe: "pins no LIVENESSPROBE_VERSION",
	} {
		if !strings.Contains(why[name], want) {
			t.Errorf("%s skipped for %q, want %q", name, why[name], want)
		}
	}
	if len(skipped) != 3 {
		t.Errorf("skipped %v, want 3", why)
	}
}
