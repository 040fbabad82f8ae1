package manager

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/internal/cliflags"
)

// TestDatapathForceReplica_BadFlags: bad flags exit with code 2 and say what
// was wrong, before anything is asked of a server.
func TestDatapathForceReplica_BadFlags(t *testing.T) {
	base := []string{"force-replica", "--addr", "127.0.0.1:1", "--token-file", writeFile(t, "ctl", "x\n"), "--timeout", "1s"}
	good := map[string]string{"--volume": "vol-00000000000000f1", "--replica": "datapath-0", "--reason": "lost two disks"}
	cases := []struct {
		name       string
		flag, with string
		extra      []string
		want       string
	}{
		{"no reason", "--reason", "", nil, "--reason: datapath: invalid argument: a force needs a reason"},
		{"a blank reason", "--reason", "  ", nil, "--reason: datapath: invalid argument: a force needs a reason"},
		{"a long reason", "--reason", strings.Repeat("x", 257), nil, "--reason: datapath: invalid argument: the reason is 257 bytes; at most 256 are allowed"},
		{"a reason not UTF-8", "--reason", "bad \xff", nil, "--reason: datapath: invalid argument: the reason is not valid UTF-8"},
		{"an empty server", "--replica", "datapath-0,,datapath-1", nil, "an empty server id"},
		{"a server twice", "--replica", "datapath-0,datapath-0", nil, "server datapath-0 is named twice"},
		{"a bad volume id", "--volume", "../etc", nil, `--volume "../etc"`},
		{"an argument", "", "", []string{"vol-00000000000000f1"}, "force-replica takes no arguments"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{}, base...)
			for f, v := range good {
				if f == c.flag {
					v = c.with
				}
				args = append(args, f, v)
			}
			out, err := runDatapath(t, append(args, c.extra...)...)
			if cliflags.ExitCode(err) != 2 || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v (exit %d), want exit 2 and %q\n%s", err, cliflags.ExitCode(err), c.want, out)
			}
		})
	}
	if _, err := runDatapath(t, append(base, "--volume", "vol-00000000000000f1", "--replica", "datapath-0")...); cliflags.ExitCode(err) != 2 {
		t.Fatalf("without --reason: %v, want exit 2", err)
	}
}

// TestDatapathForceReplica_Help explains when to use it and the risk.
func TestDatapathForceReplica_Help(t *testing.T) {
	out, err := runDatapath(t, "force-replica", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"lost a majority of its replicas", "The risk:", "lost from the volume", "--yes", "cannot help when the group lost its majority"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q:\n%s", want, out)
		}
	}
}

// TestDatapathForceReplica_DryRunThenYes: on a group of three with a volume
// on all three (the third out of sync), the command refuses while the
// volume has quorum; once the second server stops, it prints the plan and
// changes nothing, then with --yes forces and prints the new member epoch.
func TestDatapathForceReplica_DryRunThenYes(t *testing.T) {
	srvs := datapathtest.StartGroup(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var leader *datapathtest.Server
	for deadline := time.Now().Add(10 * time.Second); leader == nil; time.Sleep(20 * time.Millisecond) {
		for _, s := range srvs {
			if s.Group.IsLeader() {
				leader = s
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
	}
	g := leader.Group
	ids := []string{g.Self()}
	var second *datapathtest.Server
	addrs := []string{leader.Addr}
	for _, s := range srvs {
		if s != leader {
			ids = append(ids, s.Group.Self())
			addrs = append(addrs, s.Addr)
			if second == nil {
				second = s
			}
		}
	}
	const vol = "vol-00000000000000f1"
	if _, err := g.CreateReplicatedVolume(ctx, vol, "pvc-force", 1<<20, datapath.AccessRWO, ids); err != nil {
		t.Fatal(err)
	}
	if _, err := g.MarkReplicaOutOfSync(ctx, vol, ids[2], 1, "", 0); err != nil {
		t.Fatal(err)
	}
	args := []string{"force-replica", "--addr", strings.Join(addrs, ","),
		"--token-file", writeFile(t, "ctl", leader.Token+"\n"), "--timeout", "5s", "--volume", vol, "--replica", ids[0], "--reason", "lost the disk of " + ids[1]}
	if out, err := runDatapath(t, args...); err == nil || !strings.Contains(err.Error(), "has quorum (2 of 3 in sync") {
		t.Fatalf("force with quorum: %v\n%s", err, out)
	}
	second.Stop()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if s := g.GroupStatus(); strings.Contains(strings.Join(roles(s), " "), ids[1]+"=unreachable") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the leader does not see the stopped server unreachable")
		}
	}
	out, err := runDatapath(t, args...)
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	for _, want := range []string{"holder " + ids[0] + ", member epoch 2", ids[1] + "  in-sync  unreachable  no: leaves the replica set",
		ids[2] + "  faulted  answers", "data that may be lost: no acknowledged write", "would serve from " + ids[0] + " only", "nothing changed"} {
		if !strings.Contains(out, want) {
			t.Fatalf("dry run printed:\n%s\nwant %q", out, want)
		}
	}
	if v, _, _ := g.AppliedVolume(vol); v.MemberEpoch != 2 || len(v.Replicas) != 3 {
		t.Fatalf("after a dry run: %+v; want it unchanged", v)
	}
	out, err = runDatapath(t, append(args, "--yes")...)
	if err != nil || !strings.Contains(out, "forced: volume "+vol+" serves from "+ids[0]+" only (holder "+ids[0]+"), new member epoch 3") {
		t.Fatalf("--yes: %v\n%s", err, out)
	}
	if v, _, _ := g.AppliedVolume(vol); v.MemberEpoch != 3 || len(v.Replicas) != 1 {
		t.Fatalf("after --yes: %+v; want %s alone at member epoch 3", v, ids[0])
	}
	status := []string{"status", "--addr", strings.Join(addrs, ","), "--token-file", args[4], "--timeout", "5s"}
	out, err = runDatapath(t, append(status, "-o", "json")...)
	var view struct {
		Volumes []struct {
			ID     string
			Forced *datapath.ForceRecord
		}
	}
	if err != nil || json.Unmarshal([]byte(out), &view) != nil || len(view.Volumes) != 1 || view.Volumes[0].Forced == nil {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	f := view.Volumes[0].Forced
	if !strings.HasPrefix(f.By, "the controller (") || f.Reason != "lost the disk of "+ids[1] || strings.Join(f.Forced, ",") != ids[0] ||
		strings.Join(f.ReplicasBefore, ",") != strings.Join(ids, ",") || strings.Join(f.InSyncBefore, ",") != strings.Join(ids[:2], ",") ||
		f.MemberEpoch != 3 || time.Since(f.At) > time.Minute {
		t.Fatalf(".volumes[].forced: %+v", f)
	}
	out, err = runDatapath(t, status...)
	if err != nil || !strings.Contains(out, "volume "+vol+" was forced to serve from "+ids[0]+" at member epoch 3") {
		t.Fatalf("status: %v\n%s", err, out)
	}
}

func roles(servers []datapath.ServerStatus) []string {
	var out []string
	for _, s := range servers {
		out = append(out, s.ID+"="+s.Role)
	}
	return out
}

// TestForceLoss: a forced out-of-sync replica loses the writes
// acknowledged since it fell out; a forced in-sync one loses none.
func TestForceLoss(t *testing.T) {
	before := datapath.ReplicaSet{Replicas: []string{"a", "b", "c"}, InSync: []string{"a", "b"}}
	in := forceLoss(datapath.ForcePlan{Before: before, After: datapath.ReplicaSet{Replicas: []string{"a"}}})
	out := forceLoss(datapath.ForcePlan{Before: before, After: datapath.ReplicaSet{Replicas: []string{"c"}}})
	if !strings.HasPrefix(in, "no acknowledged write") || !strings.Contains(in, "the servers of b, c remove their copies") {
		t.Errorf("forcing an in-sync replica: %s", in)
	}
	if !strings.HasPrefix(out, "every write acknowledged since c fell out of sync: those reached only a, b") {
		t.Errorf("forcing an out-of-sync replica: %s", out)
	}
}

// TestPrintForcePlan_HolderLeftOut: a plan that leaves the holder out says
// to power its server off first (it may still serve reads of the old copy
// until it applies the force); one that keeps it says nothing of it.
func TestPrintForcePlan_HolderLeftOut(t *testing.T) {
	before := datapath.ReplicaSet{Holder: "a", Replicas: []string{"a", "b", "c"}, InSync: []string{"a", "b"}}
	for _, c := range []struct {
		forced string
		warned bool
	}{{"b", true}, {"a", false}} {
		var out strings.Builder
		p := datapath.ForcePlan{VolumeID: "vol-1", Before: before, Unreachable: []string{"a", "c"},
			After: datapath.ReplicaSet{Holder: c.forced, Replicas: []string{c.forced}, InSync: []string{c.forced}}}
		if err := printForcePlan(&out, p); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(out.String(), "the holder a is left out"); got != c.warned {
			t.Errorf("forcing %s: the holder warning printed %v, want %v:\n%s", c.forced, got, c.warned, out.String())
		}
	}
}
