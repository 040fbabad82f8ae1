package manager

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/pki"
)

// Bad flags are refused before any API server is contacted (the kubeconfig
// named does not exist, so reaching it would be another error).
func TestCertsEnsure_BadInput(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"an argument":          {[]string{"extra"}, "takes no arguments"},
		"no namespace":         {[]string{"--namespace="}, "namespace is empty"},
		"domain with a dot":    {[]string{"--cluster-domain=cluster.local."}, "cluster domain"},
		"short certificate":    {[]string{"--cert-validity=1h"}, "certificate validity 1h0m0s"},
		"certificate too long": {[]string{"--cert-validity=876000h"}, "certificate validity"},
		"CA too long":          {[]string{"--ca-validity=300000h"}, "CA validity"},
	} {
		app := App()
		var out bytes.Buffer
		app.Writer, app.ErrWriter = &out, &out
		args := append([]string{"vigil-manager", "certs", "ensure", "--kubeconfig=/nonexistent/kubeconfig"}, tc.args...)
		err := app.Run(args)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "nonexistent") {
			t.Errorf("%s: %v, want an error saying %q before any kubeconfig is read", name, err, tc.want)
		}
	}
}

func TestPrintOutcomes(t *testing.T) {
	var b bytes.Buffer
	exp := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	printOutcomes(&b, "ns", []pki.Outcome{{Secret: "a", Created: true, Expires: exp}, {Secret: "t"}, {Secret: "c", Expires: exp, RenewSoon: true}})
	want := "secret ns/a created expires 2027-01-02T03:04:05Z\nsecret ns/t kept\n" +
		"secret ns/c kept expires 2027-01-02T03:04:05Z - renew it: kubectl -n ns delete secret c and run certs ensure again\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}
