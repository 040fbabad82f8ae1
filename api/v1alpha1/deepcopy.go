package v1alpha1

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The deep copies are written by hand (no code generator in the build); the
// round-trip test in types_test.go fails if a field is added and forgotten here.

// DeepCopyInto copies r into out.
func (r *NodeRecovery) DeepCopyInto(out *NodeRecovery) {
	*out = *r
	out.TypeMeta = r.TypeMeta
	r.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec = r.Spec
	r.Status.DeepCopyInto(&out.Status)
}

// DeepCopy returns a deep copy.
func (r *NodeRecovery) DeepCopy() *NodeRecovery {
	if r == nil {
		return nil
	}
	out := new(NodeRecovery)
	r.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (r *NodeRecovery) DeepCopyObject() runtime.Object { return r.DeepCopy() }

// DeepCopyInto copies s into out.
func (s *NodeRecoveryStatus) DeepCopyInto(out *NodeRecoveryStatus) {
	*out = *s
	out.DetectedAt = copyTime(s.DetectedAt)
	out.FencedAt = copyTime(s.FencedAt)
	out.TaintedAt = copyTime(s.TaintedAt)
	out.RecoveredAt = copyTime(s.RecoveredAt)
	if s.RecoverySeconds != nil {
		v := *s.RecoverySeconds
		out.RecoverySeconds = &v
	}
	out.Volumes = slices.Clone(s.Volumes)
	out.Pods = slices.Clone(s.Pods)
	out.Attachments = slices.Clone(s.Attachments)
	if s.Replacements != nil {
		out.Replacements = make([]Replacement, len(s.Replacements))
		for i := range s.Replacements {
			r := s.Replacements[i]
			r.ScheduledAt = copyTime(r.ScheduledAt)
			r.RunningAt = copyTime(r.RunningAt)
			out.Replacements[i] = r
		}
	}
	if s.Return != nil {
		ret := *s.Return
		ret.ReadyAt = copyTime(ret.ReadyAt)
		ret.UntaintedAt = copyTime(ret.UntaintedAt)
		out.Return = &ret
	}
}

func copyTime(t *metav1.MicroTime) *metav1.MicroTime {
	if t == nil {
		return nil
	}
	c := *t
	return &c
}

// DeepCopyInto copies l into out.
func (l *NodeRecoveryList) DeepCopyInto(out *NodeRecoveryList) {
	*out = *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]NodeRecovery, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopy returns a deep copy.
func (l *NodeRecoveryList) DeepCopy() *NodeRecoveryList {
	if l == nil {
		return nil
	}
	out := new(NodeRecoveryList)
	l.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *NodeRecoveryList) DeepCopyObject() runtime.Object { return l.DeepCopy() }

// DeepCopy returns a deep copy.
func (s *NodeRecoveryStatus) DeepCopy() *NodeRecoveryStatus {
	if s == nil {
		return nil
	}
	out := new(NodeRecoveryStatus)
	s.DeepCopyInto(out)
	return out
}
