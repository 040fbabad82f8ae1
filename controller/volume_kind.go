package controller

import (
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Volume kinds by the JSON name of their field in a pod's volume source.
const (
	kindClaim     = "persistentVolumeClaim"
	kindEphemeral = "ephemeral"
	kindEmptyDir  = "emptyDir"
	kindConfigMap = "configMap"
	kindSecret    = "secret"
	kindProjected = "projected"
	// kindUnknown names a volume with no source set (the API server defaults
	// one to emptyDir, so only a hand-built object has it); never node-local.
	kindUnknown = "unknown"
)

// volumeKind names the kind of a pod volume: the JSON name of the one field of
// its source that is set (nfs, csi, iscsi, hostPath, …). The common kinds are
// named without reflection; any other, including one added to Kubernetes after
// this code was written, by reflection, so none goes unnoticed.
func volumeKind(src *corev1.VolumeSource) string {
	switch {
	case src.PersistentVolumeClaim != nil:
		return kindClaim
	case src.Ephemeral != nil:
		return kindEphemeral
	case src.ConfigMap != nil:
		return kindConfigMap
	case src.Secret != nil:
		return kindSecret
	case src.Projected != nil:
		return kindProjected
	case src.EmptyDir != nil:
		return kindEmptyDir
	}
	v := reflect.ValueOf(src).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			return jsonName(v.Type().Field(i))
		}
	}
	return kindUnknown
}

// isNodeLocalKind reports the kinds whose data lives on the node itself or comes
// from the API server: a second copy of the pod elsewhere never shares them with
// a zombie. Every other kind that is not a claim (an inline nfs, cephfs, iscsi,
// rbd, glusterfs, fc or CSI volume, …) is shared storage no fence proves.
func isNodeLocalKind(kind string) bool {
	switch kind {
	case kindEmptyDir, "hostPath", kindConfigMap, kindSecret, kindProjected, "downwardAPI", "image":
		return true
	}
	return false
}

// isClaimKind reports the kinds resolved through a PersistentVolumeClaim.
func isClaimKind(kind string) bool { return kind == kindClaim || kind == kindEphemeral }

// sourceFields maps each volume source field's JSON name to its index.
var sourceFields = func() map[string]int {
	t := reflect.TypeFor[corev1.VolumeSource]()
	m := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		m[jsonName(t.Field(i))] = i
	}
	return m
}()

// sourceOfKind is an empty volume source of the named kind: what a slim pod
// keeps of an inline volume, so the decision still sees which kind it is.
func sourceOfKind(kind string) corev1.VolumeSource {
	var src corev1.VolumeSource
	if i, ok := sourceFields[kind]; ok {
		f := reflect.ValueOf(&src).Elem().Field(i)
		if f.Kind() == reflect.Pointer {
			f.Set(reflect.New(f.Type().Elem()))
		}
	}
	return src
}

func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}
