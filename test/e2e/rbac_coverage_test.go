package e2e

import (
	"flag"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/deploy/deploytest"
	"github.com/vigil-storage/vigil/sandbox"
)

// The proof that deploy/'s roles and the code agree: every sandbox
// that runs Vigil's components under their identities of deploy/ (the shared
// one, TestLoop's, TestStack's) records their requests in the API server's
// audit log; each is collected before its sandbox goes, and after the last
// test checkRBACCoverage maps every request to the roles. A request refused
// by RBAC, or allowed by something outside deploy/, or refused by admission
// though the roles allow it fails the suite; so does, when the whole suite
// ran, a permission of a role that no request used, unless rbacUnexercised
// says why no test can use it.

// rbacUnexercised are the permissions of deploy/ that the suite cannot
// exercise, by Permission.ID, each with the reason. An entry whose
// permission is used after all, or that names no permission, fails the
// suite, so the list stays true.
var rbacUnexercised = map[string]string{
	"vigil-system/vigil-csi-controller create leases.coordination.k8s.io": sidecarLeases,
	"vigil-system/vigil-csi-controller get leases.coordination.k8s.io":    sidecarLeases,
	"vigil-system/vigil-csi-controller update leases.coordination.k8s.io": sidecarLeases,
	"vigil-system/vigil-csi-controller update persistentvolumeclaims": "external-provisioner updates a claim only to drop the " +
		"scheduler's selected-node annotation after provisioning failed on that node (StorageClasses with volumeBindingMode " +
		"WaitForFirstConsumer); the sandbox's StorageClass binds at once, so no claim carries that annotation (a refused one, TestLoop/AccessModes, neither)",
	"vigil-system/vigil-manager get noderecoveries.vigil.io": "the recorder reads a NodeRecovery again only when its create " +
		"finds one of that name or its status update conflicts, that is when another writer changed it; in the suite the " +
		"leader is its only writer",
}

// rbacSometimes are the permissions of deploy/ whose use in a run depends on
// timing: used or not, neither is a problem; the report says which.
var rbacSometimes = map[string]string{
	"vigil-system/vigil-csi-controller patch events": eventRepeats,
	"vigil-system/vigil-engine-node patch events":    eventRepeats,
}

// eventRepeats: why an Event patch is used in some runs only.
const eventRepeats = "client-go's recorder patches an Event only when the same one repeats within its aggregation " +
	"window (its count goes up): a retried cleanup or sync repeats one when a first attempt fails, which depends on timing"

// sidecarLeases: why the CSI sidecars' leader election is not exercised.
const sidecarLeases = "the sandbox runs one external-provisioner and one external-attacher without leader election: with it " +
	"they exit for good when the API server is away longer than their renew deadline (TestAPIServer_Restart, the chaos " +
	"suite), and nothing restarts a host process; deploy/ runs them with it, as one replica each"

// audited is what collectAudit gathered.
var audited auditedRequests

type auditedRequests struct {
	sync.Mutex
	events  []sandbox.AuditEvent
	sources []string
	// startups are, per sandbox work directory, the spans from a start of its
	// API server to its readiness.
	startups map[string][][2]time.Time
}

// starting reports whether t is inside a startup span of the sandbox in
// workDir; the caller holds the lock.
func (a *auditedRequests) starting(workDir string, t time.Time) bool {
	for _, w := range a.startups[workDir] {
		if !t.Before(w[0]) && !t.After(w[1]) {
			return true
		}
	}
	return false
}

// collectAudit keeps the audit events of s's Vigil identities; label names
// the sandbox in reports. Call it before the sandbox goes down. A request
// refused while a test had started s's API server again and it was not ready
// yet (apiServerStarting) is left out: until its authorizer has read the
// roles, a new API server refuses what they allow, which says nothing about
// them; the report counts what was left out.
func collectAudit(s *sandbox.Sandbox, label string) error {
	evs, err := s.AuditEvents()
	if err != nil {
		return fmt.Errorf("audit log of the %s sandbox: %w", label, err)
	}
	audited.Lock()
	defer audited.Unlock()
	kept, starting := evs[:0:0], 0
	for _, e := range evs {
		if e.Code == http.StatusForbidden && audited.starting(s.WorkDir(), e.Time) {
			starting++
			continue
		}
		kept = append(kept, e)
	}
	audited.events = append(audited.events, kept...)
	source := fmt.Sprintf("%s (%d requests)", label, len(kept))
	if starting > 0 {
		source = fmt.Sprintf("%s (%d requests; %d more refused while its API server was starting, not judged)", label, len(kept), starting)
	}
	audited.sources = append(audited.sources, source)
	return nil
}

// apiServerStarting records that a test started s's API server at from and it
// answered ready at ready (collectAudit).
func apiServerStarting(s *sandbox.Sandbox, from, ready time.Time) {
	audited.Lock()
	defer audited.Unlock()
	if audited.startups == nil {
		audited.startups = map[string][][2]time.Time{}
	}
	audited.startups[s.WorkDir()] = append(audited.startups[s.WorkDir()], [2]time.Time{from, ready})
}

// auditCalls turns audit events into deploytest's calls, skipping users that
// are not ServiceAccounts of vigil-system.
func auditCalls(evs []sandbox.AuditEvent) []deploytest.Call {
	var out []deploytest.Call
	for _, e := range evs {
		sa, ok := strings.CutPrefix(e.User, "system:serviceaccount:"+vigil.Namespace+":")
		if !ok {
			continue
		}
		res := e.Resource
		if e.Subresource != "" {
			res += "/" + e.Subresource
		}
		out = append(out, deploytest.Call{ServiceAccount: vigil.Namespace + "/" + sa,
			Request:    deploytest.Request{Verb: e.Verb, Group: e.APIGroup, Resource: res, Namespace: e.Namespace, Name: e.Name},
			Authorized: e.Decision == "allow", Reason: e.Reason, Code: e.Code})
	}
	return out
}

// wholeSuite reports whether this run is the whole suite (no -run, no -skip),
// the only run in which every permission must have been used.
func wholeSuite() bool {
	for _, name := range []string{"test.run", "test.skip"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			return false
		}
	}
	return true
}

// checkRBACCoverage judges what collectAudit gathered against deploy/ and
// returns the problems and a report of what was checked.
func checkRBACCoverage(whole bool) (problems []string, report string) {
	objs, err := deploytest.Build(deploytest.Dir())
	if err != nil {
		return []string{err.Error()}, ""
	}
	grants, err := deploytest.Grants(objs)
	if err != nil {
		return []string{err.Error()}, ""
	}
	audited.Lock()
	calls := auditCalls(audited.events)
	sources := strings.Join(audited.sources, ", ")
	audited.Unlock()
	problems = deploytest.Problems(grants, calls)
	perms := deploytest.Permissions(grants)
	unused := deploytest.Unused(grants, calls)
	byID := map[string]bool{}
	for _, p := range perms {
		byID[p.ID()] = true
	}
	for id := range rbacUnexercised {
		if !byID[id] {
			problems = append(problems, fmt.Sprintf("rbacUnexercised lists %q, which is no permission of deploy/", id))
		}
	}
	for id := range rbacSometimes {
		if !byID[id] {
			problems = append(problems, fmt.Sprintf("rbacSometimes lists %q, which is no permission of deploy/", id))
		}
	}
	unusedIDs := map[string]bool{}
	var excused []string
	for _, p := range unused {
		unusedIDs[p.ID()] = true
		if why, ok := rbacUnexercised[p.ID()]; ok {
			excused = append(excused, p.String()+": "+why)
			continue
		}
		if why, ok := rbacSometimes[p.ID()]; ok {
			excused = append(excused, p.String()+" (not in this run): "+why)
			continue
		}
		if whole {
			problems = append(problems, fmt.Sprintf("%s: no request of the suite used it: remove it from deploy/, "+
				"exercise it in a test, or list it in rbacUnexercised with the reason", p))
		}
	}
	if whole {
		for id := range rbacUnexercised {
			if byID[id] && !unusedIDs[id] {
				problems = append(problems, fmt.Sprintf("rbacUnexercised lists %q, which the suite used: remove it from the list", id))
			}
		}
	}
	sort.Strings(problems)
	var b strings.Builder
	fmt.Fprintf(&b, "RBAC coverage: %d requests of Vigil's identities from the sandboxes %s; %d of %d permissions of deploy/ used",
		len(calls), sources, len(perms)-len(unused), len(perms))
	if !whole {
		b.WriteString(" (a partial run: unused permissions are not errors)")
	}
	for _, e := range excused {
		fmt.Fprintf(&b, "\n  not exercised: %s", e)
	}
	if !whole && len(unused) > len(excused) {
		fmt.Fprintf(&b, "\n  %d more not used in this partial run", len(unused)-len(excused))
	}
	return problems, b.String()
}
