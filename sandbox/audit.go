package sandbox

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	vigil "github.com/vigil-storage/vigil"
)

// ErrAuditOff: the sandbox was brought up without Config.AuditLog.
var ErrAuditOff = errors.New("the sandbox's audit log is off (Config.AuditLog)")

// AuditEvent is one API request recorded by the API server (Config.AuditLog):
// who made it, what it asked, and the HTTP status of the answer (403 when RBAC or
// an admission policy refused it).
type AuditEvent struct {
	Time time.Time
	// User is the authenticated user, e.g. system:serviceaccount:vigil-system:vigil-manager.
	User string
	// Extra is the user's extra attributes; a ServiceAccount token bound to a
	// pod or a node carries authentication.kubernetes.io/node-name there.
	Extra map[string][]string
	// Verb is the API verb (get, list, watch, create, update, patch, delete, ...).
	Verb                                             string
	APIGroup, Resource, Subresource, Namespace, Name string
	// Code is the HTTP status of the response.
	Code int
	// Decision is the authorizer's verdict ("allow", "forbid"; "" when the
	// request ended before authorization), and Reason what it said, e.g.
	// `RBAC: allowed by ClusterRoleBinding "vigil-manager" of ClusterRole
	// "vigil-manager" to ServiceAccount "vigil-manager/vigil-system"`. A
	// request authorized and still refused (403) was refused by admission.
	Decision, Reason string
}

// Audit annotations of the authorizer's verdict.
const (
	auditDecision = "authorization.k8s.io/decision"
	auditReason   = "authorization.k8s.io/reason"
)

// auditPolicy records, at metadata level (no bodies), the requests of Vigil's
// ServiceAccounts, and every pod deletion whoever asks (so that a pod deleted
// by something other than Vigil can be traced to who did it), once per
// request: when a watch starts (its answer is known then) and when any other
// request completes.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  userGroups: ["system:serviceaccounts:` + vigil.Namespace + `"]
- level: Metadata
  verbs: ["delete", "deletecollection"]
  resources: [{group: "", resources: ["pods"]}]
- level: None
`

func auditPolicyPath(st *state) string { return filepath.Join(st.WorkDir, "audit-policy.yaml") }

func writeAuditPolicy(st *state) error {
	if st.AuditLog == "" {
		return nil
	}
	if err := os.WriteFile(auditPolicyPath(st), []byte(auditPolicy), 0o644); err != nil {
		return fmt.Errorf("write audit policy: %w", err)
	}
	return nil
}

// AuditEvents returns every request recorded so far, in order, each once.
// The API server writes an event before it answers (blocking mode), so a
// request that returned is in the log.
func (s *Sandbox) AuditEvents() ([]AuditEvent, error) {
	st, err := loadState(s.workDir)
	if err != nil {
		return nil, err
	}
	if st.AuditLog == "" {
		return nil, ErrAuditOff
	}
	f, err := os.Open(st.AuditLog)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // nothing recorded yet
	}
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	defer f.Close()
	return parseAuditLog(f.Name(), bufio.NewScanner(f))
}

// auditLine is the part of an audit.k8s.io/v1 Event that AuditEvent keeps.
type auditLine struct {
	AuditID string `json:"auditID"`
	Stage   string `json:"stage"`
	Verb    string `json:"verb"`
	User    struct {
		Username string              `json:"username"`
		Extra    map[string][]string `json:"extra"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	StageTimestamp time.Time         `json:"stageTimestamp"`
	Annotations    map[string]string `json:"annotations"`
}

func parseAuditLog(name string, sc *bufio.Scanner) ([]AuditEvent, error) {
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	seen := map[string]bool{}
	var out []AuditEvent
	for n := 1; sc.Scan(); n++ {
		var l auditLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("audit log %s line %d: %w", name, n, err)
		}
		if l.AuditID == "" || seen[l.AuditID] || (l.Stage != "ResponseStarted" && l.Stage != "ResponseComplete" && l.Stage != "Panic") {
			continue
		}
		seen[l.AuditID] = true
		e := AuditEvent{Time: l.StageTimestamp, User: l.User.Username, Extra: l.User.Extra, Verb: l.Verb,
			Decision: l.Annotations[auditDecision], Reason: l.Annotations[auditReason]}
		if l.ObjectRef != nil {
			e.APIGroup, e.Resource, e.Subresource = l.ObjectRef.APIGroup, l.ObjectRef.Resource, l.ObjectRef.Subresource
			e.Namespace, e.Name = l.ObjectRef.Namespace, l.ObjectRef.Name
		}
		if l.ResponseStatus != nil {
			e.Code = l.ResponseStatus.Code
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("audit log %s: %w", name, err)
	}
	return out, nil
}
