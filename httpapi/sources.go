package httpapi

import (
	"context"
	"errors"
	"time"

	"github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/settings"
)

// Actor is who made a settings change: Source is "ui", "api", "cli",
// "configmap" or "store"; Identity is the caller where known.
type Actor struct{ Source, Identity string }

// ChangeRecord is one recorded settings change, as the store keeps it.
type ChangeRecord struct {
	Time                 time.Time
	Setting              string
	Old, New             string
	OldSource, NewSource settings.Source
	Actor                Actor
}

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
}

// NodesSource reports every node as the manager sees it.
type NodesSource interface {
	Nodes(ctx context.Context) ([]NodeView, error)
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

// NodeView is one node: its verdict, its link to the storage and its grants.
type NodeView struct {
	Name string `json:"name"`
	// Verdict is the manager's judgement: "up", "down", "leaving", or what the
	// source knows ("ready", "not-ready", "unknown").
	Verdict string `json:"verdict"`
	// Reason explains the verdict in a few words (e.g. "Ready=Unknown").
	Reason string `json:"reason,omitempty"`
	// Since is when the verdict last changed; nil if unknown.
	Since *time.Time `json:"since,omitempty"`
	// HeartbeatAgeSeconds is the age of the node's last datapath heartbeat; nil
	// when the datapath has not reported on it.
	HeartbeatAgeSeconds *float64 `json:"heartbeatAgeSeconds,omitempty"`
	// Leaving: the node's engine announced a graceful stop.
	Leaving bool `json:"leaving"`
	// Fenced: the datapath revoked the node on its volumes.
	Fenced bool `json:"fenced"`
	// Tainted: the Node carries vigil.io/fenced.
	Tainted bool `json:"tainted"`
	// Unschedulable: the Node is cordoned.
	Unschedulable bool `json:"unschedulable,omitempty"`
	// Volumes are the node's rows on the datapath, with their epochs.
	Volumes []VolumeGrant `json:"volumes"`
	// Source names where this view comes from: "kubernetes" (Node objects only)
	// or "controller" (verdicts and the datapath).
	Source string `json:"source"`
}

// VolumeGrant is one node's row for one volume on the datapath.
type VolumeGrant struct {
	Handle string `json:"handle"`
	PV     string `json:"pv,omitempty"`
	Epoch  uint64 `json:"epoch"`
	State  string `json:"state"` // granted, fenced, released
}
