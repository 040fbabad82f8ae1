package kubelet

// Event reasons, as the kubelet spells them where it has one.
const (
	// ReasonFailedMount: stage or publish of a Filesystem volume failed, or
	// the pod's volume cannot be resolved to something to mount.
	ReasonFailedMount = "FailedMount"
	// ReasonFailedMapVolume: stage or publish of a Block volume failed.
	ReasonFailedMapVolume = "FailedMapVolume"
	// ReasonFailedUnmount: unpublish or unstage failed (the kubelet logs these;
	// the pod is usually gone, so the event goes to the node).
	ReasonFailedUnmount = "FailedUnmount"
	// ReasonSuccessfulMount: the volume is published for the pod (the kubelet
	// logs this at verbose level; here it is a Normal event, useful in tests
	// and demos).
	ReasonSuccessfulMount = "SuccessfulMountVolume"
)
