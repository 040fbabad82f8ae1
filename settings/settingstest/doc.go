// Package settingstest holds the conformance suite every settings.Store must pass
// (the memory twin, the bolt file, the ConfigMap against client-go's fake clientset
// and, in the end-to-end suite, against a real API server). It only uses the Store
// interface (and Settings over it, for the change history: SetAs, ResetAs,
// SetMany all or nothing, History), so a new backend is proven by one call to
// RunStoreConformance.
package settingstest
