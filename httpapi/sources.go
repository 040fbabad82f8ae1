package httpapi

import (
	"context"
	"errors"
	"time"

	"github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/settings"
)

// Actor is who made a settings change: package settings' type. The API records
// Source settings.ActorAPI (or settings.ActorUI for the pages) and, as Identity,
// the token's fingerprint and the caller's address (see ActorOf).
type Actor = settings.Actor

// ChangeRecord is one recorded settings change, as package settings keeps it.
type ChangeRecord = settings.ChangeRecord

// SettingsService is what the API needs of the live settings; *settings.Settings
// implements it. Writes validate first and change nothing when they refuse.
type SettingsService interface {
	List() []settings.Entry
	Get(name string) (settings.Entry, error)
	SetAs(ctx context.Context, name, value string, who Actor) error
	ResetAs(ctx context.Context, name string, who Actor) error
	// SetMany validates every value, then applies all of them or none.
	SetMany(ctx context.Context, values map[string]string, who Actor) error
	// History returns at most limit recorded changes, newest first.
	History(ctx context.Context, limit int) ([]ChangeRecord, error)
	Subscribe() (changes <-chan settings.Change, cancel func())
	// Problems lists the refused values still there; ActBlocked is non-nil
	// while one of them keeps the manager from acting; ProblemsChanged is
	// closed when either may answer differently.
	Problems() []settings.Problem
	ActBlocked() error
	ProblemsChanged() <-chan struct{}
}

var _ SettingsService = (*settings.Settings)(nil)

// NodesSource reports every node as the manager sees it.
type NodesSource interface {
	// Nodes returns the report; ErrUnavailable (wrapped) while it cannot be
	// made, e.g. before the Node cache synced.
	Nodes(ctx context.Context) (NodesReport, error)
}

// RecoveriesSource reads NodeRecovery records (an informer's cache in the manager).
type RecoveriesSource interface {
	// Recoveries returns every record; ErrUnavailable (wrapped) while they cannot
	// be read, e.g. before the cache synced or when the CRD is not installed.
	Recoveries(ctx context.Context) ([]v1alpha1.NodeRecovery, error)
	// Recovery returns one record or an error wrapping ErrNotFound.
	Recovery(ctx context.Context, name string) (*v1alpha1.NodeRecovery, error)
}

// Sentinel errors a source returns, which the API maps to 404 and 503.
var (
	ErrNotFound    = errors.New("not found")
	ErrUnavailable = errors.New("not available yet")
)

// NodesReport is GET /v1/nodes and the data of the "nodes" event: every node,
// and where its columns come from.
type NodesReport struct {
	Nodes []NodeView `json:"nodes"`
	// Verdicts says whose judgement each Verdict is: VerdictsController (the
	// leader's controllers) or VerdictsKubernetes (the Node's Ready condition:
	// this replica is a standby, which judges nothing).
	Verdicts string `json:"verdicts"`
	// Datapath says where the heartbeat, leaving, fenced and volume columns come
	// from: DatapathConnected, DatapathNone (the manager runs without
	// --datapath: those columns stay empty) or DatapathUnavailable (the last
	// poll failed; Notes says why).
	Datapath string `json:"datapath"`
	// Notes explain in words what is missing and why.
	Notes []string `json:"notes,omitempty"`
}

// Values of NodesReport.Verdicts and NodesReport.Datapath.
const (
	VerdictsController  = "controller"
	VerdictsKubernetes  = "kubernetes"
	DatapathConnected   = "connected"
	DatapathNone        = "none"
	DatapathUnavailable = "unavailable"
)

// Verdicts of NodeView.Verdict. The manager's own (NodesReport.Verdicts is
// VerdictsController): up, suspect (not Ready within the debounce, or silent
// at the datapath but not fenced), down, leaving (its engine announced a
// graceful stop). From a Node's Ready condition alone: ready, not-ready,
// unknown.
const (
	VerdictUp       = "up"
	VerdictSuspect  = "suspect"
	VerdictDown     = "down"
	VerdictLeaving  = "leaving"
	VerdictReady    = "ready"
	VerdictNotReady = "not-ready"
	VerdictUnknown  = "unknown"
)

// NodeView is one node: its verdict, its link to the storage and its grants.
type NodeView struct {
	Name string `json:"name"`
	// Verdict is one of the Verdict constants.
	Verdict string `json:"verdict"`
	// Reason explains the verdict in a few words: the controller's state
	// (e.g. "ready-unknown", "storage-isolated") or the Ready condition.
	Reason string `json:"reason,omitempty"`
	// Since is when the verdict began (down: when the node went down; suspect:
	// when it was first seen not Ready or silent; otherwise the Ready
	// condition's last transition); nil if unknown.
	Since *time.Time `json:"since,omitempty"`
	// HeartbeatAgeSeconds is the age of the node's last heartbeat (or I/O) at
	// the datapath when the response was made; nil without a datapath, or when
	// the node has not spoken since the datapath started. It is the one field
	// that moves on its own: the "nodes" event is not sent for it.
	HeartbeatAgeSeconds *float64 `json:"heartbeatAgeSeconds,omitempty"`
	// Leaving: the node's engine announced a graceful stop to the datapath.
	Leaving bool `json:"leaving"`
	// Fenced: Vigil fenced the node at the datapath in this failure (FencedAt),
	// or, on a standby, the datapath holds fenced rows of a node still tainted.
	Fenced bool `json:"fenced"`
	// FencedAt is when the controllers fenced and tainted it (the leader only).
	FencedAt *time.Time `json:"fencedAt,omitempty"`
	// Tainted: the Node carries vigil.io/fenced.
	Tainted bool `json:"tainted"`
	// Unschedulable: the Node is cordoned.
	Unschedulable bool `json:"unschedulable,omitempty"`
	// Volumes are the node's rows at the datapath with their epochs: its live
	// grants, and while it is down, fenced or tainted, the rows it was fenced
	// on. Released rows and fenced rows of a past failure are left out.
	Volumes []VolumeGrant `json:"volumes"`
	// DatapathServer is the datapath server running on the node, when one
	// does (the datapath's group of several servers); nil otherwise.
	DatapathServer *DatapathServer `json:"datapathServer,omitempty"`
}

// Roles of DatapathServer.Role.
const (
	ServerLeader      = "leader"
	ServerFollower    = "follower"
	ServerCandidate   = "candidate"
	ServerUnreachable = "unreachable"
)

// DatapathServer is one server of the datapath's group, as the manager
// reached it.
type DatapathServer struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	// Role is leader, follower, candidate, or unreachable when it did not
	// answer the manager: then the volumes it holds are unavailable.
	Role string `json:"role"`
	// LastContact is the server's last contact with the group's leader
	// (followers only); like HeartbeatAgeSeconds it moves on its own, and
	// the "nodes" event is not sent for it.
	LastContact *time.Time `json:"lastContact,omitempty"`
}

// VolumeGrant is one node's row for one volume on the datapath.
type VolumeGrant struct {
	Handle string `json:"handle"`
	PV     string `json:"pv,omitempty"`
	Epoch  uint64 `json:"epoch"`
	State  string `json:"state"` // granted, fenced, released
}
