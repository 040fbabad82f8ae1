package sandbox

import (
	"bufio"
	"strings"
	"testing"
)

func TestParseAuditLog_StagesAndFields(t *testing.T) {
	log := strings.Join([]string{
		`{"auditID":"a","stage":"ResponseStarted","verb":"watch","user":{"username":"system:serviceaccount:vigil-system:vigil-engine-node","extra":{"authentication.kubernetes.io/node-name":["node-1"]}},"objectRef":{"resource":"nodes"},"responseStatus":{"code":200},"stageTimestamp":"2026-01-02T03:04:05.000000Z"}`,
		`{"auditID":"a","stage":"ResponseComplete","verb":"watch","user":{"username":"system:serviceaccount:vigil-system:vigil-engine-node"},"objectRef":{"resource":"nodes"},"responseStatus":{"code":200}}`,
		`{"auditID":"b","stage":"ResponseComplete","verb":"patch","user":{"username":"u"},"objectRef":{"resource":"nodes","subresource":"status","name":"node-2"},"responseStatus":{"code":403},"annotations":{"authorization.k8s.io/decision":"forbid","authorization.k8s.io/reason":""}}`,
		`{"auditID":"c","stage":"RequestReceived","verb":"get","user":{"username":"u"}}`,
	}, "\n")
	evs, err := parseAuditLog("test", bufio.NewScanner(strings.NewReader(log)))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 {
		t.Fatalf("%d events, want 2 (one per request with an answer): %+v", len(evs), evs)
	}
	if e := evs[0]; e.Verb != "watch" || e.Resource != "nodes" || e.Code != 200 || e.Extra["authentication.kubernetes.io/node-name"][0] != "node-1" || e.Time.IsZero() {
		t.Errorf("first event %+v", e)
	}
	if e := evs[1]; e.Verb != "patch" || e.Subresource != "status" || e.Name != "node-2" || e.Code != 403 || e.Decision != "forbid" {
		t.Errorf("second event %+v", e)
	}
}

func TestParseAuditLog_BadLine(t *testing.T) {
	_, err := parseAuditLog("audit.log", bufio.NewScanner(strings.NewReader(`{"auditID":"a"}`+"\nnot json\n")))
	if err == nil || !strings.Contains(err.Error(), "audit.log line 2") {
		t.Errorf("error %v, want one naming audit.log line 2", err)
	}
}

func TestKwokctlConfig_AuditLog(t *testing.T) {
	st := &state{WorkDir: "/w", Nodes: []*nodeState{{HostIP: "10.0.0.1"}}}
	cfg := Config{}.withDefaults()
	if c := kwokctlConfig(cfg, st); strings.Contains(c, "audit") {
		t.Errorf("audit flags without AuditLog:\n%s", c)
	}
	st.AuditLog = "/w/audit.log"
	c := kwokctlConfig(cfg, st)
	for _, want := range []string{`audit-policy-file, value: "/w/audit-policy.yaml"`, `audit-log-path, value: "/w/audit.log"`, "audit-log-format, value: json"} {
		if !strings.Contains(c, want) {
			t.Errorf("kwokctl config lacks %q:\n%s", want, c)
		}
	}
}
