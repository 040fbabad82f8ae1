package tokenreview

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ServiceAccount names a Kubernetes ServiceAccount.
type ServiceAccount struct{ Namespace, Name string }

// ParseServiceAccount parses "NAMESPACE:NAME" or "NAMESPACE/NAME"; a bad
// form or an invalid name is an error naming it and what is allowed.
func ParseServiceAccount(s string) (ServiceAccount, error) {
	sep := strings.IndexAny(s, ":/")
	if sep < 0 || strings.Count(s, ":")+strings.Count(s, "/") != 1 {
		return ServiceAccount{}, fmt.Errorf("ServiceAccount %q: want NAMESPACE:NAME (or NAMESPACE/NAME), e.g. vigil-system:vigil-manager", s)
	}
	sa := ServiceAccount{Namespace: s[:sep], Name: s[sep+1:]}
	if errs := validation.IsDNS1123Label(sa.Namespace); len(errs) > 0 {
		return ServiceAccount{}, fmt.Errorf("ServiceAccount %q: namespace %q: %s", s, sa.Namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(sa.Name); len(errs) > 0 {
		return ServiceAccount{}, fmt.Errorf("ServiceAccount %q: name %q: %s", s, sa.Name, strings.Join(errs, "; "))
	}
	return sa, nil
}

// ParseServiceAccounts parses each of list (flag values, each of which may
// hold several separated by commas).
func ParseServiceAccounts(list []string) ([]ServiceAccount, error) {
	var out []ServiceAccount
	for _, item := range list {
		for _, s := range strings.Split(item, ",") {
			sa, err := ParseServiceAccount(strings.TrimSpace(s))
			if err != nil {
				return nil, err
			}
			out = append(out, sa)
		}
	}
	return out, nil
}

// Username is the name the API server gives the ServiceAccount's tokens:
// system:serviceaccount:NAMESPACE:NAME.
func (sa ServiceAccount) Username() string {
	return "system:serviceaccount:" + sa.Namespace + ":" + sa.Name
}

func (sa ServiceAccount) String() string { return sa.Namespace + ":" + sa.Name }
