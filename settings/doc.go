// Package settings owns every Vigil setting: its single definition (name, type,
// default, choices or range, markdown description, validation), the typed
// accessors code reads, the stores that persist values and the managed overlay
// directory that locks keys to a mounted ConfigMap. It knows nothing of
// controllers, the API or the CLI; they consume it.
//
// # Definitions
//
// Definitions returns the registry, in display order; Lookup finds one by name
// (an unknown name is an *UnknownSettingError suggesting the closest known one);
// ParseValue validates a value for a name (a refused value is a *ValueError naming
// the setting, the value and what is allowed). MarkdownTable renders the registry
// for the README.
//
// # Live settings
//
// New builds a *Settings from a Store and an optional overlay directory. The value
// in force for each setting is the overlay's, else the store's, else the default.
// Values are parsed once when they change; the accessors
// (NodeDownPodDeletionPolicy, FastFencedTrigger, …) are lock-free loads that never
// return an invalid value: a bad value from any source is refused, logged and
// counted (vigil_settings_overlay_rejected_total, vigil_settings_store_rejected_total
// on the registerer given by WithRegisterer, prometheus.DefaultRegisterer
// otherwise), and the last good value stays in force. Subscribe reports every change
// of a value in force, without polling. Set and Reset validate first and refuse a
// managed setting with a *ManagedError naming the overlay file.
//
// # Stores
//
// A Store keeps raw strings: NewMemoryStore (tests), OpenBolt (a bbolt file opened
// per operation under its file lock, so processes can share it; watched with
// fsnotify) and NewConfigMapStore (one ConfigMap, one key per setting, writes
// retried on resourceVersion conflicts, watched with an informer). OpenStore
// parses the "bolt:PATH" and "configmap:NAMESPACE/NAME" specs; DefaultStoreSpec is
// a per-user bolt file. Package settingstest holds the conformance suite all
// stores pass.
//
// # Overlay
//
// The overlay directory holds one file per setting, named after it: what a
// ConfigMap mounted as a volume looks like, including the kubelet's atomic
// "..data" symlink swap. It is watched with fsnotify and re-read as a whole after
// every burst of events.
package settings
