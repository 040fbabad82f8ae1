package manager

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"

	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

// TestDatapathStatus_ServersOfTheGroup: `datapath status` at a follower of
// three servers (the first of --addr's list) lists every server as it reports itself (the leader, two
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
		list := srvs[1].Addr + "," + srvs[0].Addr + "," + srvs[2].Addr // the first is dialed
		if err := app.Run([]string{DatapathBinary, "status", "--addr", list, "--token-file", token, "--timeout", "5s"}); err != nil {
			t.Fatalf("datapath status: %v\n%s", err, out.String())
		}
		return out.String()
	}
	row := func(i int, role, contact, applied string) string {
		return `datapath-` + string(rune('0'+i)) + ` +- +` + regexp.QuoteMeta(srvs[i].Addr) + ` +` + role + ` +` + contact + ` +` + applied + `\n`
	}
	const when, index = `20[0-9-]+T[0-9:.]+Z`, `[1-9][0-9]*`
	// Under load the leadership may move while the test runs: any one leads.
	const anyRole, contact = `(?:leader|follower)`, `(?:-|` + when + `)`
	all := regexp.MustCompile(`(?m)^SERVER .*\n` + row(0, anyRole, contact, index) + row(1, anyRole, contact, index) + row(2, anyRole, contact, index) +
		`3 servers in the control group`)
	out := status()
	for deadline := time.Now().Add(5 * time.Second); !all.MatchString(out) && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		out = status() // each member records itself in the group once it started
	}
	if !all.MatchString(out) || regexp.MustCompile(` leader +- `).FindAllStringIndex(out, -1) == nil {
		t.Fatalf("status of three servers:\n%s", out)
	}
	srvs[2].Stop()
	stopped := regexp.MustCompile(`(?m)^failed volumes not known: .*` + regexp.QuoteMeta(srvs[2].Addr) + `(.|\n)*^` + row(2, "unreachable", "-", "-"))
	if out := status(); !stopped.MatchString(out) {
		t.Fatalf("status with datapath-2 stopped:\n%s", out)
	}
}

// TestDialDatapath_ListFindsTheLeader: a manager command given the servers
// as a list, a follower first, dials the follower and sends a change to the
// leader by itself (a create's commit; its data goes to the server with the
// most free space).
func TestDialDatapath_ListFindsTheLeader(t *testing.T) {
	srvs := datapathtest.StartGroup(t, 3)
	token := writeFile(t, "ctl", srvs[0].Token+"\n")
	var created datapath.Volume
	app := &cli.App{Name: "t", Flags: datapathClientFlags(), Action: func(c *cli.Context) error {
		dp, err := dialDatapath(c.Context, c, "", c.String("addr"), client.WithTimeout(2*time.Second))
		if err != nil {
			return err
		}
		defer dp.Close()
		created, err = dp.CreateVolume(c.Context, "pvc-list", 1<<20, datapath.AccessRWO)
		return err
	}}
	list := srvs[2].Addr + "," + srvs[1].Addr + "," + srvs[0].Addr
	if err := app.Run([]string{"t", "--addr", list, "--token-file", token}); err != nil {
		t.Fatalf("create through a list whose first server is a follower: %v", err)
	}
	if _, _, ok := srvs[0].Group.AppliedVolume(created.ID); !ok {
		t.Fatalf("the leader does not know the volume %s it committed", created.ID)
	}
	// Its data is on the server with the most free space, the first listed
	// among equals.
	if _, err := srvs[2].Store.GetVolume(created.ID); err != nil {
		t.Fatalf("the volume is not on the first server listed: %v", err)
	}
}
