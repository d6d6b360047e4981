package main

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// answers is a RoundTripper that gives its answers in order: a status code, or 0 for a
// request that got no answer (the connection broke).
type answers struct{ codes []int }

func (a *answers) RoundTrip(req *http.Request) (*http.Response, error) {
	code := a.codes[0]
	a.codes = a.codes[1:]
	if code == 0 {
		return nil, errors.New("connection reset by peer")
	}
	return &http.Response{StatusCode: code, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
}

// renewals sends one Lease PUT per code through a kubelet's leaseMeter and returns its fleet.
func renewals(t *testing.T, codes ...int) *fleetRun {
	t.Helper()
	f := &fleetRun{}
	meter := &leaseMeter{next: &answers{codes: codes}, k: &fleetKubelet{node: "n1", fleet: f}}
	for range codes {
		req, err := http.NewRequest(http.MethodPut, "https://proxy/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp, err := meter.RoundTrip(req); err == nil {
			resp.Body.Close()
		}
	}
	return f
}

func TestA409AfterAnUnansweredRenewalIsItsEchoNotASecondFailure(t *testing.T) {
	f := renewals(t, 200, 0, 409, 200)
	if got := f.errs.snapshot(); f.errs.total() != 1 || got["update leases: 409"] != 0 {
		t.Fatalf("errors: %v, want only the unanswered renewal", got)
	}
	if got := f.echoes.snapshot(); got["update leases: 409 after an unanswered renewal"] != 1 {
		t.Fatalf("echoes: %v", got)
	}
}

func TestA409AfterA5xxOrPastA429IsAnEchoOnce(t *testing.T) {
	// a 504 may come after the partition applied it; the 429 between was never sent on
	f := renewals(t, 504, 429, 409, 409)
	if got := f.echoes.snapshot(); got["update leases: 409 after an unanswered renewal"] != 1 {
		t.Fatalf("echoes: %v", got)
	}
	if got := f.errs.snapshot(); got["update leases: 504"] != 1 || got["update leases: 429"] != 1 || got["update leases: 409"] != 1 {
		t.Fatalf("errors: %v, want the 504, the 429 and the second 409", got)
	}
}

func TestA409AfterAnAnsweredRenewalIsAFailure(t *testing.T) {
	// nothing was lost before it: a 409 then means someone else wrote the Lease, or a request
	// was applied twice on the way
	f := renewals(t, 200, 409, 0, 200, 409)
	if got := f.errs.snapshot(); got["update leases: 409"] != 2 {
		t.Fatalf("errors: %v, want both 409s", got)
	}
	if got := f.echoes.snapshot(); len(got) != 0 {
		t.Fatalf("echoes: %v, want none", got)
	}
}

func TestAForbiddenClassKeepsWhoMayNotDoWhatAndAnOtherClassItsText(t *testing.T) {
	err := apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "rp1-fleet-0042",
		errors.New(`User "partition-proxy" cannot impersonate resource "users" in API group "" at the cluster scope`))
	got := errorClass(err)
	want := `403 Forbidden: leases.coordination.kNs.io "rpN-fleet-N" is forbidden: User "partition-proxy" cannot impersonate`
	if !strings.HasPrefix(got, want) || len(got) > len("403 Forbidden: ")+forbiddenTextMax {
		t.Fatalf("errorClass(403) = %q, want it to start with %q and keep at most %d bytes of the message", got, want, forbiddenTextMax)
	}
	if got := errorClass(apierrors.NewConflict(schema.GroupResource{Resource: "leases"}, "x", errors.New("y"))); got != "409 Conflict" {
		t.Fatalf("errorClass(409) = %q, want the code and reason only", got)
	}
	long := errors.New("tls: failed to verify certificate: x509: certificate signed by unknown authority (possibly because of 12345 " +
		strings.Repeat("x", 100) + ")")
	if got := errorClass(long); got != "other: "+classText(long.Error(), otherTextMax) || len(got) != len("other: ")+otherTextMax ||
		strings.ContainsAny(got, "0123456789") {
		t.Fatalf("errorClass(other) = %q, want its text, numbers as N, cut to %d bytes", got, otherTextMax)
	}
}
