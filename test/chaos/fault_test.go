package chaos

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/sandbox"
)

var testEnv = Env{Nodes: []string{"node-1", "node-2", "node-3", "node-4", "node-5"}, PodNodes: []string{"node-1", "node-3"},
	Thresholds: Thresholds{NodeMonitorGrace: 10 * time.Second, Connectivity: 3 * time.Second}}

func TestParseKinds_AutoFollowsTheLoop(t *testing.T) {
	without, err := ParseKinds("", false, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range without {
		if k.NeedsLoop() {
			t.Errorf("auto without the loop draws %s, which needs it", k)
		}
	}
	if !slices.Contains(without, ShortPartition) || !slices.Contains(without, DatapathRestart) || len(without) != 7 {
		t.Errorf("auto without the loop = %v, want the 7 kinds that need no manager action", without)
	}
	with, _ := ParseKinds("auto", true, 0)
	all, _ := ParseKinds("all", false, 0)
	if !slices.Equal(with, HostKinds) || !slices.Equal(all, HostKinds) {
		t.Errorf("auto with the loop = %v, all = %v; want every kind of the host server", with, all)
	}
	list, err := ParseKinds(" engine-kill, power-cut,engine-kill", false, 0)
	if err != nil || !slices.Equal(list, []Kind{EngineKill, PowerCut}) {
		t.Errorf("ParseKinds(list) = %v, %v; want [engine-kill power-cut]", list, err)
	}
}

func TestParseKinds_Bad(t *testing.T) {
	for _, s := range []string{"power", "engine-kill,,", "ALL"} {
		_, err := ParseKinds(s, true, 0)
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "power-cut") {
			t.Errorf("ParseKinds(%q) = %v, want ErrBadConfig listing the kinds", s, err)
		}
	}
}

func TestDraw_SameSeedSameFault(t *testing.T) {
	for i := range 50 {
		seed := CycleSeed(42, i)
		a, err1 := Draw(i+1, seed, HostKinds, testEnv)
		b, err2 := Draw(i+1, seed, HostKinds, testEnv)
		if err1 != nil || err2 != nil || a != b {
			t.Fatalf("seed %d drew %+v and %+v (%v, %v)", seed, a, b, err1, err2)
		}
	}
	if CycleSeed(42, 0) == CycleSeed(42, 1) || CycleSeed(42, 0) == CycleSeed(43, 0) {
		t.Error("cycle seeds collide")
	}
}

// Every kind comes up, and every drawn fault respects its kind's rules.
func TestDraw_Rules(t *testing.T) {
	seen := map[Kind]bool{}
	uncoveredTargets := map[sandbox.PartitionTarget]bool{}
	for i := range 2000 {
		f, err := Draw(i, CycleSeed(7, i), HostKinds, testEnv)
		if err != nil {
			t.Fatal(err)
		}
		seen[f.Kind] = true
		// A heal right after the fence may or may not see the pods reaped
		// before it: the pods must write again either way.
		if f.Kind.NeedsLoop() != (f.Expect == Failover || f.Kind == PartitionHealsAfterFence) {
			t.Errorf("%s: expect %s", f, f.Expect)
		}
		switch f.Kind {
		case ShortPartition, Flapping:
			if th := testEnv.Thresholds.of(f.Target); f.Cut <= 0 || f.Cut >= th {
				t.Errorf("%s: cut %s, want under the %s threshold %s", f, f.Cut, f.Target, th)
			}
			if f.Kind == Flapping && (f.Flaps < 3 || f.Flaps > 6 || f.Up < time.Second || f.Up > 3*time.Second) {
				t.Errorf("%s: want 3 to 6 flaps, 1 to 3 s apart", f)
			}
			fallthrough
		case PowerCut, PartitionAPIServer, PartitionDatapath, PartitionAll, ManagerKillFence, ManagerKillReap:
			if !slices.Contains(testEnv.PodNodes, f.Node) {
				t.Errorf("%s: node %s runs no covered pod", f, f.Node)
			}
		case PartitionHealsAfterFence:
			if !slices.Contains(testEnv.PodNodes, f.Node) || f.Target != sandbox.PartitionAll || f.Expect != Either || f.Down != 0 {
				t.Errorf("%s: want a node of covered pods cut from everything (the isolation fence comes before the reap), expect either, no extra down time", f)
			}
		case FenceUncoveredPod:
			if !slices.Contains(testEnv.PodNodes, f.Node) || f.Expect != Failover || f.Down < 0 || f.Down > 10*time.Second ||
				(f.Target != "" && f.Target != sandbox.PartitionDatapath && f.Target != sandbox.PartitionAll) {
				t.Errorf("%s: want a node of covered pods powered off or cut from the datapath (or everything) for long, expect failover", f)
			}
			uncoveredTargets[f.Target] = true
		case EngineKill:
			if f.Down < 200*time.Millisecond || f.Down > time.Second || f.Expect != NoFailover {
				t.Errorf("%s: want 0.2 to 1 s down, no failover without the loop", f)
			}
		case ClusterAPIServerCut:
			if f.Node != "" || f.Target != sandbox.PartitionAPIServer || f.Expect != NoFailover ||
				f.Cut < testEnv.Thresholds.NodeMonitorGrace+5*time.Second || f.Cut > testEnv.Thresholds.NodeMonitorGrace+10*time.Second {
				t.Errorf("%s: want every node cut from the API server only for 5 to 10 s past the node-monitor grace, no failover", f)
			}
		case DatapathRestart, DatapathPowerCut, APIServerRestart:
			if f.Node != "" {
				t.Errorf("%s: names a node", f)
			}
		}
		if f.Kind == PartitionAPIServer && f.Target != sandbox.PartitionAPIServer {
			t.Errorf("%s: target %s", f, f.Target)
		}
	}
	for _, k := range HostKinds {
		if !seen[k] {
			t.Errorf("2000 draws never drew %s", k)
		}
	}
	if len(uncoveredTargets) != 3 {
		t.Errorf("%s drew the failures %v; want a power cut, a datapath cut and a full cut", FenceUncoveredPod, uncoveredTargets)
	}
	withLoop := testEnv
	withLoop.Loop = true
	for i := range 200 {
		if f, _ := Draw(i, CycleSeed(9, i), []Kind{EngineKill}, withLoop); f.Expect != Either {
			t.Fatalf("%s: with the loop an engine kill may fail over, want expect either", f)
		}
	}
}

func TestDraw_NothingToDraw(t *testing.T) {
	if _, err := Draw(1, 1, nil, testEnv); !errors.Is(err, ErrBadConfig) {
		t.Errorf("Draw(no kinds) = %v, want ErrBadConfig", err)
	}
	if _, err := Draw(1, 1, HostKinds, Env{}); !errors.Is(err, ErrBadConfig) {
		t.Errorf("Draw(no nodes) = %v, want ErrBadConfig", err)
	}
}

func TestConfigFromEnv_Good(t *testing.T) {
	env := map[string]string{EnvCycles: "12", EnvSeed: "99", EnvFaults: "engine-kill"}
	c, err := ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil || c.Cycles != 12 || c.Seed != 99 || c.Replay != nil || c.seedOf(3) != CycleSeed(99, 3) || c.ReportDir == "" {
		t.Errorf("ConfigFromEnv = %+v, %v", c, err)
	}
	env[EnvReplay] = "1234"
	c, err = ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil || c.Cycles != 1 || c.seedOf(0) != 1234 {
		t.Errorf("with CHAOS_REPLAY: %+v, %v; want one cycle of seed 1234", c, err)
	}
	c, err = ConfigFromEnv(func(string) string { return "" })
	if err != nil || c.Cycles != DefaultCycles {
		t.Errorf("defaults: %+v, %v", c, err)
	}
}

func TestConfigFromEnv_Bad(t *testing.T) {
	for _, env := range []map[string]string{
		{EnvCycles: "0"}, {EnvCycles: "ten"}, {EnvCycles: "10001"}, {EnvSeed: "-1"}, {EnvReplay: "x"}, {EnvFaults: "meteor"},
	} {
		_, err := ConfigFromEnv(func(k string) string { return env[k] })
		if !errors.Is(err, ErrBadConfig) {
			t.Errorf("ConfigFromEnv(%v) = %v, want ErrBadConfig", env, err)
			continue
		}
		for k, v := range env {
			if !strings.Contains(err.Error(), k) && k != EnvFaults || !strings.Contains(err.Error(), v) {
				t.Errorf("ConfigFromEnv(%v) = %q, want the variable and its value named", env, err)
			}
		}
	}
}

func at(s int64) time.Time { return time.Unix(s, 0) }

func TestHistory_SpansAndEpochs(t *testing.T) {
	h := newHistory()
	row := func(node string, st datapath.AttachmentState, epoch uint64, sec int64) datapath.Attachment {
		return datapath.Attachment{VolumeID: "v", Node: node, State: st, Epoch: epoch, Updated: at(sec)}
	}
	h.observe("v", []datapath.Attachment{row("n1", datapath.StateGranted, 1, 10)})
	h.observe("v", []datapath.Attachment{row("n1", datapath.StateGranted, 1, 10)}) // same state: nothing new
	h.observe("v", []datapath.Attachment{row("n1", datapath.StateFenced, 2, 20), row("n2", datapath.StateGranted, 3, 21)})
	h.observe("v", []datapath.Attachment{row("n1", datapath.StateGranted, 4, 40), row("n2", datapath.StateFenced, 5, 39)})
	spans := h.spans("v", "n1")
	if len(spans) != 1 || !spans[0].From.Equal(at(20)) || !spans[0].To.Equal(at(40)) || spans[0].Epoch != 2 {
		t.Errorf("spans of n1 = %+v, want one from 20 to 40 at epoch 2", spans)
	}
	if s := h.spans("v", "n2"); len(s) != 1 || !s[0].To.IsZero() {
		t.Errorf("spans of n2 = %+v, want one open span", s)
	}
	if h.fences("n1") != 1 || h.fences("n2") != 1 || h.fences("n3") != 0 {
		t.Errorf("fences = %d, %d, %d; want 1, 1, 0", h.fences("n1"), h.fences("n2"), h.fences("n3"))
	}
	if v := h.takeViolations(); len(v) != 0 {
		t.Errorf("violations %v for increasing epochs", v)
	}
	h.observe("v", []datapath.Attachment{row("n1", datapath.StateGranted, 3, 50), row("n2", datapath.StateFenced, 3, 50)})
	v := h.takeViolations()
	if len(v) != 3 || !strings.Contains(strings.Join(v, "\n"), "went back from 5 to 3") {
		t.Errorf("violations after epochs went back = %q, want n1's, n2's and the volume's", v)
	}
}

func TestMemory_Verdicts(t *testing.T) {
	m := newMemory()
	series := func(name string, pid int, vals ...int64) {
		s := &memSeries{Name: name, PID: pid}
		for i, v := range vals {
			s.Cycle, s.RSS = append(s.Cycle, i), append(s.RSS, v<<20)
		}
		m.series[name] = s
	}
	series("flat", 1, 50, 52, 51, 50, 53, 52, 51, 52, 50, 51, 52, 53)
	series("leak", 2, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160)
	series("short", 3, 50, 500)
	got := map[string]memVerdict{}
	for _, v := range m.verdicts() {
		got[v.Name] = v
	}
	if !got["flat"].Checked || !got["flat"].Flat || !got["leak"].Checked || got["leak"].Flat || got["short"].Checked || !got["short"].Flat {
		t.Errorf("verdicts = %+v; want flat flat, leak not flat, short not judged", got)
	}
}

func TestReport_SummaryAndTables(t *testing.T) {
	r := &Report{Seed: 5, Enabled: []Kind{ShortPartition, EngineKill}, NotRun: notRun([]Kind{ShortPartition, EngineKill}, false, 0)}
	r.Cycles = []CycleResult{
		{Fault: Fault{Cycle: 1, Seed: 11, Kind: ShortPartition}, Recovery: 2 * time.Second},
		{Fault: Fault{Cycle: 2, Seed: 12, Kind: ShortPartition}, Recovery: 4 * time.Second},
		{Fault: Fault{Cycle: 3, Seed: 13, Kind: ShortPartition}, Recovery: 3 * time.Second},
		{Fault: Fault{Cycle: 4, Seed: 14, Kind: EngineKill}, Violations: []string{"claim x lost 2 records"}},
	}
	r.Summarize()
	if len(r.Kinds) != 2 || r.Kinds[0].Cycles != 3 || r.Kinds[0].RecoveryMedian != 3*time.Second || r.Kinds[0].RecoveryMax != 4*time.Second ||
		r.Kinds[1].Violations != 1 {
		t.Fatalf("Kinds = %+v", r.Kinds)
	}
	md := r.Markdown()
	for _, want := range []string{"| short-partition | 3 | 0 | 3.0 s | 4.0 s | - | - | 0 |", "| power-cut | not run: needs the manager's closed loop",
		"cycle 4 (seed 14, engine-kill): claim x lost 2 records", "| flapping | not run: not in CHAOS_FAULTS"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	md1, js, err := r.Write(t.TempDir())
	if err != nil || !strings.HasSuffix(md1, "chaos-report.md") || !strings.HasSuffix(js, "chaos-report.json") {
		t.Errorf("Write = %s, %s, %v", md1, js, err)
	}
}

func TestMountID(t *testing.T) {
	if mountID("/proc") == "" {
		t.Error("/proc: no mount ID; want the proc mount's")
	}
	if id := mountID(t.TempDir()); id != "" {
		t.Errorf("a plain directory has mount ID %q; want none", id)
	}
}

// The kinds added after chaos-short's pinned list (Makefile's
// CHAOS_SHORT_FAULTS) leave its draws as they were: its seed still draws the
// five faults the README reports.
func TestDraw_ChaosShortUnchanged(t *testing.T) {
	pinned := []Kind{PowerCut, ShortPartition, PartitionAPIServer, PartitionDatapath, PartitionAll, Flapping,
		ManagerKillFence, ManagerKillReap, EngineKill, DatapathRestart, APIServerRestart}
	want := []Kind{ManagerKillFence, APIServerRestart, ShortPartition, ManagerKillFence, ManagerKillReap}
	for i, k := range want {
		f, err := Draw(i+1, CycleSeed(18350223562360120584, i), pinned, testEnv)
		if err != nil || f.Kind != k {
			t.Errorf("chaos-short cycle %d drew %+v, %v; want %s", i+1, f, err, k)
		}
	}
}

func TestParseKinds_NewKindsNeedTheLoop(t *testing.T) {
	for _, k := range []Kind{PartitionHealsAfterFence, FenceUncoveredPod} {
		if !k.NeedsLoop() {
			t.Errorf("%s can only recover with the manager's closed loop", k)
		}
		got, err := ParseKinds(string(k), true, 0)
		if err != nil || !slices.Equal(got, []Kind{k}) {
			t.Errorf("ParseKinds(%q) = %v, %v", k, got, err)
		}
	}
	without, _ := ParseKinds("auto", false, 0)
	if slices.Contains(without, PartitionHealsAfterFence) || slices.Contains(without, FenceUncoveredPod) {
		t.Errorf("auto without the loop = %v; draws a kind that needs it", without)
	}
}

func TestFault_String_UncoveredPowerCut(t *testing.T) {
	f := Fault{Cycle: 2, Seed: 9, Kind: FenceUncoveredPod, Node: "node-2", Down: time.Second, Expect: Failover}
	if got, want := f.String(), "cycle 2 seed 9: fence-uncovered-pod on node-2 by a power cut, down 1s, expect failover"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
