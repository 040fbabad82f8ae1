package manager

import (
	"regexp"
	"strings"
	"testing"

	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

// TestDatapathStatus_ServersOfTheGroup: `datapath status` at a follower of
// three servers lists every server as it reports itself (the leader, two
// followers with their last contact and applied index), and a stopped one
// as unreachable.
func TestDatapathStatus_ServersOfTheGroup(t *testing.T) {
	srvs := datapathtest.StartGroup(t, 3)
	token := writeFile(t, "ctl", srvs[0].Token+"\n")
	status := func() string {
		t.Helper()
		var out strings.Builder
		app := DatapathApp()
		app.Writer = &out
		if err := app.Run([]string{DatapathBinary, "status", "--addr", srvs[1].Addr, "--token-file", token, "--timeout", "5s"}); err != nil {
			t.Fatalf("datapath status: %v\n%s", err, out.String())
		}
		return out.String()
	}
	row := func(i int, role, contact, applied string) string {
		return `datapath-` + string(rune('0'+i)) + ` +- +` + regexp.QuoteMeta(srvs[i].Addr) + ` +` + role + ` +` + contact + ` +` + applied + `\n`
	}
	const when, index = `20[0-9-]+T[0-9:.]+Z`, `[1-9][0-9]*`
	all := regexp.MustCompile(`(?m)^SERVER .*\n` + row(0, "leader", "-", index) + row(1, "follower", when, index) + row(2, "follower", when, index) +
		`3 servers in the control group`)
	if out := status(); !all.MatchString(out) {
		t.Fatalf("status of three servers:\n%s", out)
	}
	srvs[2].Stop()
	stopped := regexp.MustCompile(`(?m)^` + row(2, "unreachable", "-", "-"))
	if out := status(); !stopped.MatchString(out) {
		t.Fatalf("status with datapath-2 stopped:\n%s", out)
	}
}
