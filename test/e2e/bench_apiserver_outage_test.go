//go:build bench

package e2e

import (
	"testing"
	"time"
)

// TestBench_APIServerOutage is TestAPIServerOutage_IOContinues with an outage
// as long as a real one: kube-apiserver stopped for 5 minutes, the datapath's
// TokenReview outage grace at its default (2 minutes). About 7 minutes; `make
// bench-apiserver-outage`, not part of make test.
func TestBench_APIServerOutage(t *testing.T) {
	runAPIServerOutage(t, apiOutage{name: "e2e-apistop-5m", subnet: "10.213.236.0/24", workDir: "vigil-e2e-apistop-5m",
		stop: 5 * time.Minute})
}
