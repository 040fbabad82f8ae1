package kubelet

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
)

// TestDecide is the specification of decide: what a node does with one volume
// (vol-1, PV pv-1) given what pods want and what is done.
func TestDecide(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ctx3 := map[string]string{"vigil.io/epoch": "3"}
	pod := func(name string, isNew bool) podUse {
		return podUse{Pod: podRef{UID: types.UID("uid-" + name), Namespace: "ns", Name: name}, New: isNew}
	}
	want := func(attached bool, pods ...podUse) map[string]*desiredVolume {
		d := &desiredVolume{Spec: volumeSpec{Handle: "vol-1", PVName: "pv-1"}, Attached: attached, PublishContext: ctx3, Pods: map[types.UID]podUse{}}
		for _, p := range pods {
			d.Pods[p.Pod.UID] = p
		}
		return map[string]*desiredVolume{"vol-1": d}
	}
	have := func(stage phase, stagedCtx map[string]string, pubs ...string) map[string]*actualVolume {
		a := &actualVolume{Handle: "vol-1", PVName: "pv-1", StagingPath: "/r/staging", Stage: stage, StagedContext: stagedCtx, Pubs: map[types.UID]*actualPub{}}
		for _, p := range pubs {
			a.Pubs[types.UID("uid-"+p)] = &actualPub{Pod: podRef{UID: types.UID("uid-" + p), Name: p}, TargetPath: "/r/" + p, Phase: phaseDone}
		}
		return map[string]*actualVolume{"vol-1": a}
	}
	reported := map[string]bool{UniqueVolumeName("d", "vol-1"): true}
	retry := func(key string) map[string]time.Time { return map[string]time.Time{key: now.Add(time.Second)} }
	for _, tc := range []struct {
		name string
		in   decideInput
		want []string // kind:pod
	}{
		{"attached and reported: stage then publish",
			decideInput{Desired: want(true, pod("a", true)), Reported: reported, Stage: true}, []string{"stage:", "publish:a"}},
		{"not reported in use yet: nothing",
			decideInput{Desired: want(true, pod("a", true)), Stage: true}, nil},
		{"not attached: nothing",
			decideInput{Desired: want(false, pod("a", true)), Reported: reported, Stage: true}, nil},
		{"done: nothing",
			decideInput{Desired: want(true, pod("a", true)), Actual: have(phaseDone, ctx3, "a"), Reported: reported, Stage: true}, nil},
		{"staged with another epoch: stage again",
			decideInput{Desired: want(true, pod("a", true)), Actual: have(phaseDone, map[string]string{"vigil.io/epoch": "2"}, "a"), Reported: reported, Stage: true}, []string{"stage:"}},
		{"uncertain stage: stage again",
			decideInput{Desired: want(true, pod("a", true)), Actual: have(phaseUncertain, nil), Reported: reported, Stage: true}, []string{"stage:", "publish:a"}},
		{"second pod: publish only",
			decideInput{Desired: want(true, pod("a", true), pod("b", true)), Actual: have(phaseDone, ctx3, "a"), Reported: reported, Stage: true}, []string{"publish:b"}},
		{"pod gone: unpublish then unstage",
			decideInput{Actual: have(phaseDone, ctx3, "a"), Stage: true}, []string{"unpublish:a", "unstage:"}},
		{"one of two pods gone: unpublish it only",
			decideInput{Desired: want(true, pod("b", true)), Actual: have(phaseDone, ctx3, "a", "b"), Reported: reported, Stage: true}, []string{"unpublish:a"}},
		{"terminating pod holds its mount and gets no new one",
			decideInput{Desired: want(true, pod("a", false), pod("b", false)), Actual: have(phaseDone, ctx3, "a"), Reported: reported, Stage: true}, nil},
		{"in flight: left alone",
			decideInput{Desired: want(true, pod("a", true)), Reported: reported, Stage: true, InFlight: map[string]bool{"vol-1": true}}, nil},
		{"stage backing off: no publish either",
			decideInput{Desired: want(true, pod("a", true)), Reported: reported, Stage: true, RetryAt: retry("stage/vol-1")}, nil},
		{"backoff over: stage",
			decideInput{Desired: want(true, pod("a", true)), Reported: reported, Stage: true, RetryAt: map[string]time.Time{"stage/vol-1": now}}, []string{"stage:", "publish:a"}},
		{"one publish backing off: the other goes on",
			decideInput{Desired: want(true, pod("a", true), pod("b", true)), Actual: have(phaseDone, ctx3), Reported: reported, Stage: true, RetryAt: retry("publish/vol-1/uid-a")}, []string{"publish:b"}},
		{"unpublish backing off: no unstage",
			decideInput{Actual: have(phaseDone, ctx3, "a"), Stage: true, RetryAt: retry("unpublish/vol-1/uid-a")}, nil},
		{"unstage backing off: nothing",
			decideInput{Actual: have(phaseDone, ctx3), Stage: true, RetryAt: retry("unstage/vol-1")}, nil},
		{"driver without staging: publish only",
			decideInput{Desired: want(true, pod("a", true)), Reported: reported}, []string{"publish:a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Root, tc.in.Driver, tc.in.Now = "/r", "d", now
			var got []string
			for _, p := range decide(tc.in) {
				for _, s := range p.Steps {
					got = append(got, string(s.Kind)+":"+s.Pod.Name)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
		})
	}
}

func TestVolumesInUse(t *testing.T) {
	desired := map[string]*desiredVolume{"b": {}, "a": {}}
	actual := map[string]*actualVolume{"a": {Stage: phaseDone}, "c": {Stage: phaseUncertain}, "gone": {}}
	got := volumesInUse("d", desired, actual)
	if diff := cmp.Diff([]string{"kubernetes.io/csi/d^a", "kubernetes.io/csi/d^b", "kubernetes.io/csi/d^c"}, got); diff != "" {
		t.Errorf("volumesInUse (-want +got):\n%s", diff)
	}
}
