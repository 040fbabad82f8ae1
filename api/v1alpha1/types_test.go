package v1alpha1

import (
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/vigil-storage/vigil/deploy"
)

// full returns a NodeRecovery with every field set, so that a field added to the
// types without its deep copy (or its CRD schema) fails the tests below.
func full() *NodeRecovery {
	t := metav1.NewMicroTime(time.Date(2026, 11, 23, 1, 2, 3, 456789000, time.UTC))
	secs := 4.2
	return &NodeRecovery{
		TypeMeta:   metav1.TypeMeta{Kind: Kind, APIVersion: SchemeGroupVersion.String()},
		ObjectMeta: metav1.ObjectMeta{Name: "node-1-1", Labels: map[string]string{"a": "b"}},
		Spec:       NodeRecoverySpec{NodeName: "node-1", NodeUID: "uid-1"},
		Status: NodeRecoveryStatus{
			Phase: PhaseRecovered, DetectedAt: &t, Reason: "ready-unknown", Message: "m",
			FencedAt: &t, TaintedAt: &t,
			Volumes:     []FencedVolume{{Handle: "vol-1", PVName: "pv-1", Epoch: 3, FencedAt: t}},
			Pods:        []ReapedPod{{Namespace: "ns", Name: "p", UID: "u", Owner: "StatefulSet", Trigger: "fast", ReapedAt: t}},
			Attachments: []FreedAttachment{{Name: "csi-1", PVName: "pv-1", Action: "deleted", FreedAt: t}},
			Replacements: []Replacement{{Namespace: "ns", Name: "p", UID: "u2", Replaces: "u", NodeName: "node-2",
				ScheduledAt: &t, RunningAt: &t}},
			RecoveredAt: &t, RecoverySeconds: &secs, TimeToRecover: "4.20s",
			Return:   &NodeReturn{ReadyAt: &t, UntaintedAt: &t},
			PodCount: 1,
		},
	}
}

func TestNodeRecovery_DeepCopy_CopiesEveryField(t *testing.T) {
	in := full()
	assertNoZeroField(t, reflect.ValueOf(in.Status), "status")
	out := in.DeepCopy()
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("deep copy differs:\n%+v\n%+v", in, out)
	}
	// Mutating the copy must not touch the original.
	out.Status.DetectedAt.Time = time.Time{}
	*out.Status.RecoverySeconds = 0
	out.Status.Volumes[0].Epoch = 99
	out.Status.Pods[0].Name = "x"
	out.Status.Attachments[0].Name = "x"
	out.Status.Replacements[0].RunningAt.Time = time.Time{}
	out.Status.Return.UntaintedAt.Time = time.Time{}
	out.Labels["a"] = "x"
	if !reflect.DeepEqual(in, full()) {
		t.Fatalf("mutating the copy changed the original: %+v", in.Status)
	}
	l := &NodeRecoveryList{Items: []NodeRecovery{*full()}}
	lc := l.DeepCopy()
	lc.Items[0].Status.Pods[0].Name = "y"
	if l.Items[0].Status.Pods[0].Name != "p" {
		t.Fatal("list deep copy shares items")
	}
}

func assertNoZeroField(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			t.Errorf("fixture leaves %s nil; set it so the deep copy is tested", path)
			return
		}
		assertNoZeroField(t, v.Elem(), path)
	case reflect.Slice:
		if v.Len() == 0 {
			t.Errorf("fixture leaves %s empty", path)
			return
		}
		assertNoZeroField(t, v.Index(0), path+"[0]")
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(metav1.MicroTime{}) {
			return
		}
		for i := 0; i < v.NumField(); i++ {
			assertNoZeroField(t, v.Field(i), path+"."+v.Type().Field(i).Name)
		}
	default:
		if v.IsZero() {
			t.Errorf("fixture leaves %s zero", path)
		}
	}
}

// TestCRD_MatchesTypes checks that the CRD's schema has a property for every
// JSON field of the Go types and no property the types lack.
func TestCRD_MatchesTypes(t *testing.T) {
	b, err := deploy.CRDs.ReadFile("crds/vigil.io_noderecoveries.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd map[string]any
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	spec := crd["spec"].(map[string]any)
	if spec["group"] != GroupName || spec["scope"] != "Cluster" {
		t.Errorf("group %v scope %v, want %s Cluster", spec["group"], spec["scope"], GroupName)
	}
	names := spec["names"].(map[string]any)
	if names["kind"] != Kind || names["plural"] != Resource || names["listKind"] != ListKind || names["singular"] != Singular {
		t.Errorf("names %v do not match the Go constants", names)
	}
	v := spec["versions"].([]any)[0].(map[string]any)
	if v["name"] != Version {
		t.Errorf("version %v, want %s", v["name"], Version)
	}
	root := v["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)["properties"].(map[string]any)
	compareSchema(t, "spec", root["spec"].(map[string]any), reflect.TypeOf(NodeRecoverySpec{}))
	compareSchema(t, "status", root["status"].(map[string]any), reflect.TypeOf(NodeRecoveryStatus{}))
	var phases []string
	for _, p := range root["status"].(map[string]any)["properties"].(map[string]any)["phase"].(map[string]any)["enum"].([]any) {
		phases = append(phases, p.(string))
	}
	want := []string{string(PhaseDetected), string(PhaseFenced), string(PhaseReaping), string(PhaseRecovered), string(PhaseNodeReturned), string(PhaseAbandoned)}
	if !slices.Equal(phases, want) {
		t.Errorf("phase enum %v, want %v", phases, want)
	}
}

func compareSchema(t *testing.T, path string, schema map[string]any, typ reflect.Type) {
	t.Helper()
	props, _ := schema["properties"].(map[string]any)
	var inSchema, inGo []string
	for k := range props {
		inSchema = append(inSchema, k)
	}
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		inGo = append(inGo, name)
		sub, ok := props[name].(map[string]any)
		if !ok {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
			if ft.Kind() == reflect.Slice {
				sub, _ = sub["items"].(map[string]any)
			}
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft != reflect.TypeOf(metav1.MicroTime{}) && sub != nil {
			compareSchema(t, path+"."+name, sub, ft)
		}
	}
	sort.Strings(inSchema)
	sort.Strings(inGo)
	if !slices.Equal(inSchema, inGo) {
		t.Errorf("%s: CRD properties %v, Go JSON fields %v", path, inSchema, inGo)
	}
}
