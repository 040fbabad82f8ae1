package kubelet

import (
	"maps"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// stepKind is one CSI node operation.
type stepKind string

const (
	stepStage     stepKind = "stage"
	stepPublish   stepKind = "publish"
	stepUnpublish stepKind = "unpublish"
	stepUnstage   stepKind = "unstage"
)

// step is one operation of a plan; Pod and Target are set for (un)publish.
type step struct {
	Kind   stepKind
	Pod    podRef
	Target string
}

// key names the operation for its retry backoff.
func (s step) key(handle string) string {
	if s.Kind == stepPublish || s.Kind == stepUnpublish {
		return string(s.Kind) + "/" + handle + "/" + string(s.Pod.UID)
	}
	return string(s.Kind) + "/" + handle
}

// plan is the operations on one volume, in order; the executor stops at the
// first failure. Desired is nil for a volume no pod wants any more.
type plan struct {
	Handle      string
	PVName      string
	Block       bool
	StagingPath string
	Stage       bool // the driver stages: publish names the staging path
	Desired     *desiredVolume
	Steps       []step
}

// decideInput is everything a decision depends on; decide reads nothing else.
type decideInput struct {
	Root, Driver string
	Desired      map[string]*desiredVolume
	Actual       map[string]*actualVolume
	// Reported holds the unique names node.status.volumesInUse lists: a volume
	// is mounted only once it is reported, so the attach-detach controller
	// never detaches a volume being mounted (as in the kubelet).
	Reported map[string]bool
	// InFlight holds handles with operations running: they are left alone.
	InFlight map[string]bool
	// Stage: the driver has STAGE_UNSTAGE_VOLUME.
	Stage bool
	// RetryAt holds, by step key, when a failed operation may run again.
	RetryAt map[string]time.Time
	Now     time.Time
}

func (in decideInput) blocked(s step, handle string) bool {
	at, ok := in.RetryAt[s.key(handle)]
	return ok && in.Now.Before(at)
}

// decide returns the plans that bring the actual state toward the desired one,
// by volume handle in order: unpublish for pods gone or terminal; stage (again
// if the publish context changed, e.g. a new epoch) and publish for pods that
// want the volume once it is attached and reported in use; unstage once no pod
// holds it.
func decide(in decideInput) []plan {
	handles := slices.Sorted(maps.Keys(in.Desired))
	for h := range in.Actual {
		if _, ok := in.Desired[h]; !ok {
			handles = append(handles, h)
		}
	}
	slices.Sort(handles)
	var plans []plan
	for _, h := range handles {
		if in.InFlight[h] {
			continue
		}
		if p, ok := decideVolume(in, h, in.Desired[h], in.Actual[h]); ok {
			plans = append(plans, p)
		}
	}
	return plans
}

func decideVolume(in decideInput, h string, d *desiredVolume, a *actualVolume) (plan, bool) {
	p := plan{Handle: h, Desired: d, Stage: in.Stage}
	switch {
	case a != nil:
		p.PVName, p.Block, p.StagingPath = a.PVName, a.Block, a.StagingPath
	case d != nil:
		p.PVName, p.Block = d.Spec.PVName, d.Spec.Block
		p.StagingPath = StagingPath(in.Root, in.Driver, h, d.Spec.PVName, d.Spec.Block)
	}
	remaining := 0 // publishes left after this plan
	if a != nil {
		for _, uid := range slices.Sorted(maps.Keys(a.Pubs)) {
			if d != nil && hasPod(d, uid) {
				remaining++
				continue
			}
			s := step{Kind: stepUnpublish, Pod: a.Pubs[uid].Pod, Target: a.Pubs[uid].TargetPath}
			if in.blocked(s, h) {
				remaining++
				continue
			}
			p.Steps = append(p.Steps, s)
		}
	}
	if d != nil {
		p.Steps = append(p.Steps, mountSteps(in, &p, d, a)...)
	}
	if (d == nil || len(d.Pods) == 0) && remaining == 0 && a != nil && a.Stage != "" {
		if s := (step{Kind: stepUnstage}); !in.blocked(s, h) {
			p.Steps = append(p.Steps, s)
		}
	}
	return p, len(p.Steps) > 0
}

func hasPod(d *desiredVolume, uid types.UID) bool {
	_, ok := d.Pods[uid]
	return ok
}

// mountSteps stages (when needed) and publishes for every pod that wants d.
func mountSteps(in decideInput, p *plan, d *desiredVolume, a *actualVolume) []step {
	if !d.Attached || !in.Reported[UniqueVolumeName(in.Driver, p.Handle)] {
		return nil
	}
	var pubs []step
	for _, uid := range slices.Sorted(maps.Keys(d.Pods)) {
		u := d.Pods[uid]
		if !u.New {
			continue
		}
		if a != nil && a.Pubs[uid] != nil && a.Pubs[uid].Phase == phaseDone {
			continue
		}
		s := step{Kind: stepPublish, Pod: u.Pod, Target: TargetPath(in.Root, uid, p.PVName, p.Block)}
		if a != nil && a.Pubs[uid] != nil {
			s.Target = a.Pubs[uid].TargetPath
		}
		if !in.blocked(s, p.Handle) {
			pubs = append(pubs, s)
		}
	}
	var steps []step
	if in.Stage && wantsNew(d) {
		staged := a != nil && a.Stage == phaseDone
		if !staged || !maps.Equal(a.StagedContext, d.PublishContext) {
			s := step{Kind: stepStage}
			if in.blocked(s, p.Handle) {
				return nil // nothing is published before the stage succeeds
			}
			steps = append(steps, s)
		}
	}
	return append(steps, pubs...)
}

func wantsNew(d *desiredVolume) bool {
	for _, u := range d.Pods {
		if u.New {
			return true
		}
	}
	return false
}

// volumesInUse lists, sorted, the unique names of the volumes wanted by a pod
// here or not yet taken down: what node.status.volumesInUse must say.
func volumesInUse(driver string, desired map[string]*desiredVolume, actual map[string]*actualVolume) []string {
	var out []string
	for h := range desired {
		out = append(out, UniqueVolumeName(driver, h))
	}
	for h, a := range actual {
		if _, ok := desired[h]; !ok && !a.empty() {
			out = append(out, UniqueVolumeName(driver, h))
		}
	}
	slices.Sort(out)
	return out
}
