// Package vigil holds every externally visible name of Vigil in one place: the CSI
// driver name, taint keys, annotations, label keys, the metric prefix, the field
// manager and the version. Packages refer to these constants instead of repeating
// string literals, so a contract (docs/architecture.md, Contracts) is changed in exactly one spot.
package vigil

// Version is the build version, set by `make build` through
// -ldflags "-X github.com/vigil-storage/vigil.Version=...".
var Version = "dev"

const (
	// DriverName is the CSI driver and provisioner name.
	DriverName = "driver.vigil.io"
	// FencedTaintKey marks a node whose volumes Vigil fenced; effect NoSchedule.
	FencedTaintKey = "vigil.io/fenced"
	// ReapAnnotation set to "false" on a pod opts it out of force deletion.
	ReapAnnotation = "vigil.io/reap"
	// NodeLabel is the label the sandbox puts on its simulated nodes.
	NodeLabel = "vigil.io/node"
	// RackLabel names the rack of a node of the scale sandbox (one kwok per rack).
	RackLabel = "vigil.io/rack"
	// OutOfServiceTaintKey is Kubernetes' out-of-service taint: the operator's word
	// that a node is down and its volumes may be detached.
	OutOfServiceTaintKey = "node.kubernetes.io/out-of-service"
	// FieldManager is the field manager Vigil uses for server-side writes.
	FieldManager = "vigil"
	// MetricsNamespace prefixes every Prometheus metric: vigil_*.
	MetricsNamespace = "vigil"
	// DefaultAPIAddress is where vigil-manager serves its API, UI and metrics.
	DefaultAPIAddress = "127.0.0.1:9500"
	// PublishContextEpochKey is the CSI publish-context key under which
	// ControllerPublishVolume hands the node the datapath epoch of its grant
	// (decimal uint64); every I/O of the node carries that epoch.
	PublishContextEpochKey = "vigil.io/epoch"
	// TopologyNodeKey is the CSI topology segment key naming the node a volume is
	// accessible from; its value is the Kubernetes node name.
	TopologyNodeKey = "topology.vigil.io/node"
)

// CSIProbePath is the HTTP path on which vigil-engine-node (on its
// --metrics-address) and `vigil-manager csi serve` (on its --health-address)
// answer a liveness probe with the CSI Probe of their own CSI socket: 200 when
// it answers ready, 503 with the reason otherwise. deploy/'s livenessProbes
// point at it, in place of the upstream livenessprobe sidecar.
const CSIProbePath = "/healthz/csi"

// DefaultDatapathAddress is where `vigil-datapath serve` listens by
// default (loopback; the gRPC volume server).
const DefaultDatapathAddress = "127.0.0.1:9600"

// DatapathServiceAccount is the datapath's ServiceAccount (in Namespace) in
// deploy/; its one API call is TokenReview.
const DatapathServiceAccount = "vigil-datapath"

// Kubernetes Event reasons the engine-node records on its own Node.
const (
	// EventReasonFenceCleanupFailed: something a reaped pod left on a fenced node
	// could not be cleaned up; the message names it; retried with backoff.
	EventReasonFenceCleanupFailed = "VigilFenceCleanupFailed"
	// EventReasonFenceCleared: the node was cleaned up and Vigil's fenced taint removed.
	EventReasonFenceCleared = "VigilFenceCleared"
	// EventReasonFenceAwaitDatapath: the node was cleaned up, but its taint
	// stays until the datapath acknowledges a heartbeat of the node.
	EventReasonFenceAwaitDatapath = "VigilFenceAwaitDatapath"
)

const (
	// Namespace is where Vigil's own objects live (the manager's Lease, the
	// settings ConfigMap) unless POD_NAMESPACE says otherwise.
	Namespace = "vigil-system"
	// ManagerLeaseName is the coordination.k8s.io Lease vigil-manager replicas
	// elect their leader with (RBAC names it).
	ManagerLeaseName = "vigil-manager"
	// ManagerComponent is the source component of the manager's Events.
	ManagerComponent = "vigil-manager"
)

// The datapath's Kubernetes identities: ServiceAccount tokens for this
// audience, checked with a TokenReview; the names are those of deploy/.
const (
	// DatapathTokenAudience is the audience of the projected ServiceAccount
	// tokens callers present to the datapath.
	DatapathTokenAudience = "vigil-datapath"
	// NodeNameTokenExtra is the TokenReview user extra in which the API
	// server names the node a ServiceAccount token is bound to (through its
	// pod, or a TokenRequest bound to the Node itself).
	NodeNameTokenExtra = "authentication.kubernetes.io/node-name"
	// ManagerServiceAccount, CSIControllerServiceAccount and
	// EngineServiceAccount are the ServiceAccounts (in Namespace) of the
	// manager and the CSI controller (the datapath's controller role) and of
	// the engines (the engine role, each as the node its token is bound to).
	ManagerServiceAccount       = "vigil-manager"
	CSIControllerServiceAccount = "vigil-csi-controller"
	EngineServiceAccount        = "vigil-engine-node"
)

// Kubernetes Event reasons vigil-manager run records on its leader-election
// Lease (namespace --leader-elect-lease-namespace, name --leader-elect-lease-name)
// about its settings; `kubectl get events -n vigil-system
// --field-selector involvedObject.kind=Lease` lists them.
const (
	// EventReasonSettingsBlocked (Warning): a refused settings value leaves a
	// value in force that is not the one given (a bad managed file at startup, a
	// file that names no setting); the manager does not act until it is fixed. The
	// message names the file or store, the value and what is allowed.
	EventReasonSettingsBlocked = "VigilSettingsBlocked"
	// EventReasonSettingsUnblocked (Normal): every blocking settings value was
	// fixed or removed; the manager may act again.
	EventReasonSettingsUnblocked = "VigilSettingsUnblocked"
)

// What `vigil-manager certs ensure` keeps in Namespace (deploy/ mounts them):
// the install's own CA, the serving certificates of the two Services that
// listen beyond loopback, and the one API token every manager replica reads.
const (
	// CertsServiceAccount is the ServiceAccount of the Job that runs
	// `vigil-manager certs ensure`; it may read and create Secrets in
	// Namespace only.
	CertsServiceAccount = "vigil-certs"
	// CASecret holds the CA certificate and its private key (tls.crt,
	// tls.key); no pod mounts it.
	CASecret = "vigil-ca"
	// CACertSecret holds only the CA certificate (ca.crt): what clients of
	// the datapath and of the manager's API mount to verify the servers.
	CACertSecret = "vigil-ca-cert"
	// DatapathTLSSecret and ManagerTLSSecret are the serving certificates
	// (kubernetes.io/tls: tls.crt, tls.key, and ca.crt) of the Services
	// DatapathService and ManagerService.
	DatapathTLSSecret = "vigil-datapath-tls"
	ManagerTLSSecret  = "vigil-manager-tls"
	// APITokenSecret holds the manager API's bearer token (key token).
	APITokenSecret = "vigil-api-token"
	// DatapathService and ManagerService are the Services of deploy/ whose
	// DNS names the serving certificates carry.
	DatapathService = "vigil-datapath"
	ManagerService  = "vigil-manager"
	// DatapathPeersService is the datapath StatefulSet's headless Service:
	// each server's stable name is POD.vigil-datapath-peers.NAMESPACE.svc,
	// which its certificate carries too (the Raft peers and the clients'
	// server lists name them).
	DatapathPeersService = "vigil-datapath-peers"
)
