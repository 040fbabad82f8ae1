package manager

import (
	"errors"
	"strings"
	"testing"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

// runDatapath runs `vigil-datapath ARGS…` and returns its output.
func runDatapath(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out strings.Builder
	app := DatapathApp()
	app.Writer, app.ErrWriter = &out, &out
	err := app.Run(append([]string{DatapathBinary}, args...))
	return out.String(), err
}

// TestDatapathClearFailure: `datapath status` lists a failed volume,
// `datapath clear-failure` refuses bad input with a clear error and changes
// nothing, and clears the failed volume, which then takes I/O again.
func TestDatapathClearFailure(t *testing.T) {
	faults := datapathtest.NewFaults()
	srv := datapathtest.Start(t, datapath.Options{OpenFile: faults.Open})
	st := srv.Store
	failed, err := st.CreateVolume("pvc-failed", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	healthy, err := st.CreateVolume("pvc-healthy", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	e, err := st.Grant(failed.ID, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	faults.FailNextSync(st.DataFile(failed.ID))
	if err := st.Flush(failed.ID, "node-1", e); !errors.Is(err, datapath.ErrVolumeFailed) {
		t.Fatalf("flush on a failing disk: %v", err)
	}
	flags := []string{"--addr", srv.Addr, "--token-file", writeFile(t, "ctl", srv.Token+"\n"), "--timeout", "5s"}

	out, err := runDatapath(t, append([]string{"status"}, flags...)...)
	if err != nil || !strings.Contains(out, "FAILED VOLUME") || !strings.Contains(out, failed.ID+"  pvc-failed") || strings.Contains(out, healthy.ID+"  pvc-healthy  20") {
		t.Fatalf("datapath status: %v; want the failed volume listed, and only it:\n%s", err, out)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no volume", nil, "exactly one argument"},
		{"two volumes", []string{failed.ID, healthy.ID}, "exactly one argument"},
		{"unknown volume", []string{"vol-00000000000000ff"}, "has no such volume"},
		{"malformed volume id", []string{"../etc/passwd"}, "volume id"},
		{"volume not failed", []string{healthy.ID}, "is not failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runDatapath(t, append(append([]string{"clear-failure"}, flags...), tc.args...)...)
			t.Logf("%s: %v", tc.name, err)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v; want it to say %q", err, tc.want)
			}
			if fs, _ := st.FailedVolumes(); len(fs) != 1 || fs[0].VolumeID != failed.ID {
				t.Fatalf("after a refused clear-failure the failed volumes are %+v; want %s alone", fs, failed.ID)
			}
		})
	}

	out, err = runDatapath(t, append(append([]string{"clear-failure"}, flags...), failed.ID)...)
	if err != nil || !strings.Contains(out, "failure cleared") {
		t.Fatalf("clear-failure: %v\n%s", err, out)
	}
	if err := st.WriteAt(failed.ID, "node-1", e, 0, []byte("again")); err != nil {
		t.Fatalf("write after clear-failure: %v", err)
	}
	if fs, err := st.FailedVolumes(); err != nil || len(fs) != 0 {
		t.Fatalf("failed volumes after clear-failure: %+v, %v", fs, err)
	}
}

func TestDatapathClearFailure_Help(t *testing.T) {
	out, err := runDatapath(t, "clear-failure", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"clear-failure [command options] VOLUME", "fdatasync", "VigilVolumeFailed", "--token-file", "spec.csi.volumeHandle"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q:\n%s", want, out)
		}
	}
}
