// Package settings owns every Vigil setting: its single definition (name, type,
// default, choices or range, description, validation), typed accessors, the stores
// that persist values (a bbolt file, a Kubernetes ConfigMap, an in-memory twin) and
// the managed overlay directory that locks keys to a mounted ConfigMap. It knows
// nothing of controllers or the manager; they read settings through the accessors.
package settings
