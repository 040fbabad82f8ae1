// Package settings owns every Vigil setting: its single definition (name, type,
// default, choices or range, markdown description, validation), the typed
// accessors code reads, the stores that persist values and their change history,
// and the managed overlay directory that locks keys to a mounted ConfigMap. It
// knows nothing of controllers, the API or the CLI; they consume it.
//
// # Definitions
//
// Definitions returns the registry, in display order; Lookup finds one by name
// (an unknown name is an *UnknownSettingError suggesting the closest known one,
// ignoring case); ParseValue validates a value for a name (a refused value is a
// *ValueError naming the setting, the value and what is allowed, with a "did you
// mean" for a near choice). Error messages name the setting first and echo a
// long value shortened (Echo); the error values keep it whole. MarkdownTable
// renders the registry for the README.
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
// of a value in force, without polling.
//
// The store is read before any event of its watch is taken, and a write of this
// process is put in force at once only if the watch reported nothing about the
// setting meanwhile: neither can overwrite a newer value of another writer
// (TestNew_StartupReadNeverOverwritesNewerWatchedValue,
// TestSettings_Set_NewerWriteOfAnotherWriterWins).
//
// # Refused values and acting
//
// Problems lists every refused value still present (overlay files, store values,
// overlay files that name no setting). A refusal with no good value from its
// source since the process started is blocking: the value in force is then not
// the one given (a managed dry-run=ture at startup would otherwise silently be
// the store's false). ActBlocked returns a *BlockedError (ErrActBlocked) naming
// each blocking problem, nil otherwise; controllers do not act while it is
// non-nil, and ProblemsChanged wakes whoever waits for it to change
// (TestSettings_ActBlocked_*).
//
// # Writing and the change history
//
// SetAs, ResetAs and SetMany validate first, refuse a managed setting with a
// *ManagedError naming the overlay file, and record who made the change (an
// Actor) in the store's history in the same transaction as the change; SetMany
// applies all values or none and reports every bad one in a *ManyError. Set and
// Reset are SetAs and ResetAs by ActorUnknown. History reads the records, newest
// first; a store keeps HistoryLimit of them. With WithObservedHistory a
// long-running process also records overlay changes (ActorConfigMap) and store
// edits made outside Vigil (ActorStore), each once however many processes watch:
// see observed.go for the rule.
//
// # Stores
//
// A Store keeps raw strings and the history: NewMemoryStore (tests), OpenBolt (a
// bbolt file opened per operation under its file lock, so processes can share
// it; watched with fsnotify; the history in a bucket of its own) and
// NewConfigMapStore (one ConfigMap, one key per setting, writes retried on
// resourceVersion conflicts, watched with an informer; the history under
// HistoryKey of the same ConfigMap, so a change and its record are one update).
// Update is the one transaction all writes with records go through. OpenStore
// parses the "bolt:PATH" and "configmap:NAMESPACE/NAME" specs; DefaultStoreSpec
// is a per-user bolt file. Package settingstest holds the conformance suite all
// stores pass, history included.
//
// # Overlay
//
// The overlay directory holds one file per setting, named after it: what a
// ConfigMap mounted as a volume looks like, including the kubelet's atomic
// "..data" symlink swap. It is watched with fsnotify and re-read as a whole after
// every burst of events. An empty file is a value like any other: refused (and
// reported) for a setting that needs one.
package settings
