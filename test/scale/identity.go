package scale

import (
	"fmt"
	"sort"
	"time"

	vigil "github.com/vigil-storage/vigil"
)

// managerUser is the audit log's name of the manager's identity, deploy/'s
// ServiceAccount vigil-system/vigil-manager (the stack applies deploy/'s
// roles; sandbox.ComponentKubeconfig gives the manager a token of it), so
// that its requests are counted apart from every other client's.
var managerUser = "system:serviceaccount:" + vigil.Namespace + ":" + vigil.ManagerServiceAccount

// managerRequests counts, by verb and resource (and the HTTP status when it
// is not a success), the requests the manager made in [from, to], from the API
// server's audit log.
func (w *world) managerRequests(from, to time.Time) (map[string]float64, error) {
	evs, err := w.sb.AuditEvents()
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, e := range evs {
		if e.User != managerUser || e.Time.Before(from) || e.Time.After(to) {
			continue
		}
		res := e.Resource
		if e.Subresource != "" {
			res += "/" + e.Subresource
		}
		key := e.Verb + " " + res
		if e.Code >= 300 {
			key += fmt.Sprintf(" (%d)", e.Code) // a refused or failed call, e.g. a pod already gone
		}
		out[key]++
	}
	return out, nil
}

// sortedKeys is m's keys in order, for a stable report.
func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
