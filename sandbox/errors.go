package sandbox

import "errors"

// Sentinel errors; match them with errors.Is.
var (
	// ErrInvalidConfig: a Config field has a value outside what is allowed.
	ErrInvalidConfig = errors.New("invalid sandbox config")
	// ErrBinariesMissing: the control-plane binaries are not built; run `make testbin`.
	ErrBinariesMissing = errors.New("sandbox binaries missing")
	// ErrAlreadyUp: a sandbox with this work directory is already running.
	ErrAlreadyUp = errors.New("sandbox already up")
	// ErrNotUp: no sandbox state in the work directory.
	ErrNotUp = errors.New("sandbox not up")
	// ErrUnknownNode: the node name is not one of the sandbox's nodes.
	ErrUnknownNode = errors.New("unknown sandbox node")
	// ErrPortInUse: the requested API server port is taken.
	ErrPortInUse = errors.New("port in use")
	// ErrSubnetInUse: an address of the sandbox's subnet is already on this host.
	ErrSubnetInUse = errors.New("sandbox subnet in use")
	// ErrInvalidPartitionTarget: a partition target other than apiserver, datapath, all or datapath-group.
	ErrInvalidPartitionTarget = errors.New("invalid partition target")
	// ErrToolMissing: a command the sandbox runs (nft, socat, ip) is not installed.
	ErrToolMissing = errors.New("sandbox tool missing")
	// ErrUnknownProcess: no process of that name on the node (or the host).
	ErrUnknownProcess = errors.New("unknown sandbox process")
	// ErrNodeOff: the node is powered off (Stop); Start it first.
	ErrNodeOff = errors.New("sandbox node powered off")
	// ErrAPIServerStopped: StopAPIServer stopped the API server and it has not
	// been started since.
	ErrAPIServerStopped = errors.New("API server stopped")
	// ErrAPIServerRunning: StartAPIServer without a StopAPIServer before it.
	ErrAPIServerRunning = errors.New("API server running")
	// ErrNotRoot: network namespaces need root (CAP_NET_ADMIN and CAP_SYS_ADMIN).
	ErrNotRoot = errors.New("sandbox needs root")
)
