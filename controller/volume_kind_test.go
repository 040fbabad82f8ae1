package controller

import (
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestVolumeKind_EveryKindOfTheAPI sets each field of a volume source in turn:
// each is named by its JSON name, survives the slim cache's round trip, and only
// the seven node-local kinds and the two claim kinds are not "inline".
func TestVolumeKind_EveryKindOfTheAPI(t *testing.T) {
	typ := reflect.TypeFor[corev1.VolumeSource]()
	var local []string
	for i := range typ.NumField() {
		var src corev1.VolumeSource
		f := reflect.ValueOf(&src).Elem().Field(i)
		f.Set(reflect.New(f.Type().Elem()))
		want := jsonName(typ.Field(i))
		if got := volumeKind(&src); got != want {
			t.Errorf("field %s: kind %q, want %q", typ.Field(i).Name, got, want)
		}
		back := sourceOfKind(want)
		if got := volumeKind(&back); got != want {
			t.Errorf("kind %q rebuilt as %q", want, got)
		}
		if isNodeLocalKind(want) {
			local = append(local, want)
		}
	}
	slices.Sort(local)
	if want := []string{"configMap", "downwardAPI", "emptyDir", "hostPath", "image", "projected", "secret"}; !slices.Equal(local, want) {
		t.Errorf("node-local kinds %q, want %q", local, want)
	}
	if k := volumeKind(&corev1.VolumeSource{}); k != kindUnknown || isNodeLocalKind(k) || isClaimKind(k) {
		t.Errorf("a volume with no source is %q: it must never count as node-local", k)
	}
}

// TestTransformForCache_PodKeepsOneInlineVolumeByKindOnly: of a pod's inline
// volumes the cache keeps the first that is not node-local, by name and kind
// (not its server, path or secrets), and nothing of the node-local ones.
func TestTransformForCache_PodKeepsOneInlineVolumeByKindOnly(t *testing.T) {
	p := realisticPodForTransform()
	p.Spec.Volumes = append(p.Spec.Volumes,
		corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: "share", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nas", Path: "/exports"}}},
		corev1.Volume{Name: "inline", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "x"}}})
	slim, _ := TransformForCache(p.DeepCopy())
	vols := slim.(*corev1.Pod).Spec.Volumes
	want := []corev1.Volume{pvcVolume("data", "data-p"), {Name: "share", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{}}}}
	if !reflect.DeepEqual(vols, want) {
		t.Errorf("slim volumes %v, want %v", kinds(vols), kinds(want))
	}
	c := toCachedPod(p)
	if c.Inline == nil || *c.Inline != (inlineVolume{Name: "share", Kind: "nfs"}) || len(c.Volumes) != 1 {
		t.Errorf("cached pod keeps %+v and %+v", c.Inline, c.Volumes)
	}
	if got := c.pod().Spec.Volumes; !reflect.DeepEqual(got, want) {
		t.Errorf("rebuilt volumes %v, want %v", kinds(got), kinds(want))
	}
	if cp := c.DeepCopyObject().(*cachedPod); cp.Inline == c.Inline || *cp.Inline != *c.Inline {
		t.Error("DeepCopyObject shares or loses the inline volume")
	}
	if plain := toCachedPod(realisticPodForTransform()); plain.Inline != nil {
		t.Errorf("a pod with only a claim and a configMap keeps %+v", plain.Inline)
	}
}

func kinds(vols []corev1.Volume) []string {
	var out []string
	for i := range vols {
		out = append(out, vols[i].Name+"="+volumeKind(&vols[i].VolumeSource))
	}
	return out
}
