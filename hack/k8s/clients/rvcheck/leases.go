package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"
)

// Timeouts of the leases scenario, in seconds of wall clock.
const (
	leaseRequestTimeout = 10 * time.Second // one GET or UPDATE (the kubelet's lease client uses its renew interval)
	informerSyncTimeout = 60 * time.Second // initial list of kube-node-lease; milliseconds on the test federation
	catchUpTimeout      = 10 * time.Second // for the informer to deliver each lease's last renewal
	progressInterval    = 5 * time.Second
)

type leasesOptions struct {
	commonFlags
	names    []string
	duration time.Duration
	interval time.Duration
}

func parseLeasesFlags(args []string) (leasesOptions, error) {
	var o leasesOptions
	var names string
	fs := flag.NewFlagSet("leases", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.register(fs)
	fs.StringVar(&names, "names", "", "comma-separated Lease names in kube-node-lease (required)")
	fs.DurationVar(&o.duration, "duration", 30*time.Second, "how long to keep renewing")
	fs.DurationVar(&o.interval, "interval", time.Second, "renew period of each lease")
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	if err := o.validate(); err != nil {
		return o, err
	}
	o.names = splitNames(names)
	switch {
	case len(o.names) == 0:
		return o, fmt.Errorf("%w: leases: --names is required", errUsage)
	case o.duration <= 0 || o.interval <= 0:
		return o, fmt.Errorf("%w: leases: --duration and --interval must be positive", errUsage)
	}
	return o, nil
}

// leaseReport is what the scenario saw of one named Lease.
type leaseReport struct {
	FirstRV               string   `json:"first_rv"`        // first resourceVersion seen from any source
	LastRV                string   `json:"last_rv"`         // last resourceVersion seen from any source
	LastRenewedRV         string   `json:"last_renewed_rv"` // resourceVersion the last successful UPDATE returned
	LastRenewTime         string   `json:"last_renew_time"` // spec.renewTime of that UPDATE, RFC 3339
	RenewalsAttempted     int      `json:"renewals_attempted"`
	RenewalsOK            int      `json:"renewals_ok"`
	InformerEvents        int      `json:"informer_events"`
	InformerLastRV        string   `json:"informer_last_rv"`
	InformerLastRenewTime string   `json:"informer_last_renew_time"` // spec.renewTime of the last object the informer delivered
	InformerRVsIncreasing bool     `json:"informer_rvs_increasing"`  // every add/update RV > the previous one (KEP-5504 order)
	InformerRVRegressions []string `json:"informer_rv_regressions"`  // "previous -> delivered" pairs that did not increase
	// InformerCaughtUp: the informer delivered the last renewal (same spec.renewTime). Judged by
	// content, not RV: an UPDATE answer and a watch event of one write may carry different RVs
	// (through partition-proxy, the object form and the vector form; docs/resource-versions.md).
	InformerCaughtUp bool `json:"informer_caught_up"`
}

type eventCounts struct {
	Add    int `json:"add"`
	Update int `json:"update"`
	Delete int `json:"delete"`
	Total  int `json:"total"`
}

type leasesReport struct {
	Scenario              string                  `json:"scenario"`
	ContentType           string                  `json:"content_type"`
	Namespace             string                  `json:"namespace"`
	Server                string                  `json:"server"`
	DurationSeconds       float64                 `json:"duration_seconds"`
	IntervalSeconds       float64                 `json:"interval_seconds"`
	StartedAt             string                  `json:"started_at"` // first renewal, RFC 3339
	InformerSyncSeconds   float64                 `json:"informer_sync_seconds"`
	RenewalsAttempted     int                     `json:"renewals_attempted"`
	RenewalsOK            int                     `json:"renewals_ok"`
	Errors                []apiError              `json:"errors"`
	ErrorsTotal           int                     `json:"errors_total"`
	InformerEvents        eventCounts             `json:"informer_events"`
	InformerRVsIncreasing bool                    `json:"informer_rvs_increasing"`
	InformerCaughtUp      bool                    `json:"informer_caught_up"`
	Leases                map[string]*leaseReport `json:"leases"`
	Fatal                 string                  `json:"fatal,omitempty"`
	rvSummary
}

func runLeasesCommand(args []string, stderr io.Writer) (any, error) {
	o, err := parseLeasesFlags(args)
	if err != nil {
		return nil, err
	}
	report, err := runLeases(o, stderr)
	if err != nil {
		report.Fatal = err.Error()
	}
	return report, err
}

// leaseTracker holds what the informer and the renewers observed. Safe for concurrent use.
type leaseTracker struct {
	mu     sync.Mutex
	events eventCounts
	leases map[string]*leaseReport
	rvs    *rvLog
	errs   *errorLog
}

func newLeaseTracker(names []string) *leaseTracker {
	t := &leaseTracker{leases: map[string]*leaseReport{}, rvs: newRVLog(), errs: &errorLog{}}
	for _, n := range names {
		t.leases[n] = &leaseReport{InformerRVsIncreasing: true, InformerRVRegressions: []string{}}
	}
	return t
}

// seenLocked records rv as the newest resourceVersion seen of lease lr.
func seenLocked(lr *leaseReport, rv string) {
	if rv == "" {
		return
	}
	if lr.FirstRV == "" {
		lr.FirstRV = rv
	}
	lr.LastRV = rv
}

// informerEvent records one event the informer delivered; kind is add, update or delete.
func (t *leaseTracker) informerEvent(kind string, lease *coordinationv1.Lease) {
	rv := lease.ResourceVersion
	t.rvs.add(rv)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.events.Total++
	switch kind {
	case "add":
		t.events.Add++
	case "update":
		t.events.Update++
	case "delete":
		t.events.Delete++
	}
	lr, named := t.leases[lease.Name]
	if !named {
		return
	}
	lr.InformerEvents++
	if kind == "delete" {
		return // a tombstone may carry the last known RV again
	}
	if lr.InformerLastRV != "" && compareRV(rv, lr.InformerLastRV) <= 0 {
		lr.InformerRVsIncreasing = false
		lr.InformerRVRegressions = append(lr.InformerRVRegressions, lr.InformerLastRV+" -> "+rv)
	}
	lr.InformerLastRV = rv
	lr.InformerLastRenewTime = formatRenewTime(lease)
	seenLocked(lr, rv)
}

// formatRenewTime returns spec.renewTime in RFC 3339 UTC with nanoseconds, or "" when unset.
func formatRenewTime(lease *coordinationv1.Lease) string {
	if lease.Spec.RenewTime == nil {
		return ""
	}
	return lease.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
}

func (t *leaseTracker) attempted(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.leases[name].RenewalsAttempted++
}

func (t *leaseTracker) read(name, rv string) {
	t.rvs.add(rv)
	t.mu.Lock()
	defer t.mu.Unlock()
	seenLocked(t.leases[name], rv)
}

func (t *leaseTracker) renewed(name string, lease *coordinationv1.Lease) {
	rv := lease.ResourceVersion
	t.rvs.add(rv)
	t.mu.Lock()
	defer t.mu.Unlock()
	lr := t.leases[name]
	lr.RenewalsOK++
	lr.LastRenewedRV = rv
	lr.LastRenewTime = formatRenewTime(lease)
	seenLocked(lr, rv)
}

func (t *leaseTracker) failed(name, op string, err error) {
	t.errs.add(newAPIError(name, op, err))
}

// caughtUp reports whether the informer delivered every lease's last renewal, and marks each.
func (t *leaseTracker) caughtUp() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	all := true
	for _, lr := range t.leases {
		lr.InformerCaughtUp = lr.LastRenewTime == "" || lr.InformerLastRenewTime == lr.LastRenewTime
		all = all && lr.InformerCaughtUp
	}
	return all
}

// totals returns attempted and ok renewals and informer events so far.
func (t *leaseTracker) totals() (attempted, ok, events int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, lr := range t.leases {
		attempted += lr.RenewalsAttempted
		ok += lr.RenewalsOK
	}
	return attempted, ok, t.events.Total
}

// fill copies the tracker's figures into r.
func (t *leaseTracker) fill(r *leasesReport) {
	r.RenewalsAttempted, r.RenewalsOK, _ = t.totals()
	r.Errors, r.ErrorsTotal = t.errs.snapshot()
	r.rvSummary = t.rvs.summary()
	t.mu.Lock()
	defer t.mu.Unlock()
	r.InformerEvents = t.events
	r.Leases = t.leases
	r.InformerRVsIncreasing, r.InformerCaughtUp = true, true
	for _, lr := range t.leases {
		r.InformerRVsIncreasing = r.InformerRVsIncreasing && lr.InformerRVsIncreasing
		r.InformerCaughtUp = r.InformerCaughtUp && lr.InformerCaughtUp
	}
}

// runLeases runs the scenario. The returned report is filled as far as the scenario got, also
// when err (the scenario could not run: no client, the informer never synced) is not nil.
func runLeases(o leasesOptions, stderr io.Writer) (*leasesReport, error) {
	report := &leasesReport{
		Scenario: "leases", ContentType: o.contentType, Namespace: corev1.NamespaceNodeLease,
		DurationSeconds: o.duration.Seconds(), IntervalSeconds: o.interval.Seconds(),
		Errors: []apiError{}, Leases: map[string]*leaseReport{},
	}
	tracker := newLeaseTracker(o.names)
	defer tracker.fill(report)

	cs, err := newClientset(o.kubeconfig, o.contentType)
	if err != nil {
		return report, err
	}
	report.Server = cs.CoreV1().RESTClient().Get().URL().Host

	informerCtx, stopInformer := context.WithCancel(context.Background())
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(corev1.NamespaceNodeLease))
	defer factory.Shutdown()
	defer stopInformer()
	leases := factory.Coordination().V1().Leases()
	if err := watchLeases(leases.Informer(), tracker); err != nil {
		return report, err
	}
	progress(stderr, "starting a Lease informer on %s/%s (%s)", report.Server, corev1.NamespaceNodeLease, o.contentType)
	syncStart := time.Now()
	factory.StartWithContext(informerCtx)
	syncCtx, cancelSync := context.WithTimeout(informerCtx, informerSyncTimeout)
	synced := cache.WaitForCacheSync(syncCtx.Done(), leases.Informer().HasSynced)
	cancelSync()
	report.InformerSyncSeconds = time.Since(syncStart).Seconds()
	if !synced {
		return report, fmt.Errorf("lease informer did not sync within %s", informerSyncTimeout)
	}
	progress(stderr, "informer synced in %.2f s; renewing %d leases every %s for %s", report.InformerSyncSeconds, len(o.names), o.interval, o.duration)

	report.StartedAt = time.Now().UTC().Format(time.RFC3339Nano)
	renewAll(o, cs.CoordinationV1().Leases(corev1.NamespaceNodeLease), leases.Lister().Leases(corev1.NamespaceNodeLease), tracker, stderr)
	waitForCatchUp(tracker)
	attempted, ok, events := tracker.totals()
	progress(stderr, "done: %d/%d renewals ok, %d informer events", ok, attempted, events)
	return report, nil
}

// watchLeases registers the tracker's handlers on the informer, including list/watch errors.
func watchLeases(informer cache.SharedIndexInformer, tracker *leaseTracker) error {
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if lease, ok := obj.(*coordinationv1.Lease); ok {
				tracker.informerEvent("add", lease)
			}
		},
		UpdateFunc: func(_, obj any) {
			if lease, ok := obj.(*coordinationv1.Lease); ok {
				tracker.informerEvent("update", lease)
			}
		},
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if lease, ok := obj.(*coordinationv1.Lease); ok {
				tracker.informerEvent("delete", lease)
			}
		},
	}
	if _, err := informer.AddEventHandler(handler); err != nil {
		return fmt.Errorf("add lease event handler: %w", err)
	}
	err := informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		tracker.failed("", "informer list/watch", err)
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	if err != nil {
		return fmt.Errorf("set lease watch error handler: %w", err)
	}
	return nil
}

// renewAll runs one renewer per lease for o.duration, starts staggered over one interval, and
// returns when every renewer has finished its last renewal.
func renewAll(o leasesOptions, client coordinationclient.LeaseInterface, lister coordinationlisters.LeaseNamespaceLister, tracker *leaseTracker, stderr io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), o.duration)
	defer cancel()
	var wg sync.WaitGroup
	for i, name := range o.names {
		r := &renewer{name: name, client: client, lister: lister, tracker: tracker}
		offset := o.interval * time.Duration(i) / time.Duration(len(o.names))
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.run(ctx, offset, o.interval)
		}()
	}
	ticker := time.NewTicker(progressInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-ticker.C:
			attempted, ok, events := tracker.totals()
			_, errs := tracker.errs.snapshot()
			progress(stderr, "%d/%d renewals ok, %d errors, %d informer events", ok, attempted, errs, events)
		}
	}
}

// waitForCatchUp gives the informer up to catchUpTimeout to deliver every lease's last renewal.
func waitForCatchUp(tracker *leaseTracker) {
	deadline := time.Now().Add(catchUpTimeout)
	for !tracker.caughtUp() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
}

// renewer renews one Lease the way the kubelet's node lease controller does
// (k8s.io/component-helpers/apimachinery/lease): UPDATE with spec.renewTime = now, starting from
// the object the last UPDATE returned; without one (first renewal, or after a failure) from the
// informer's lister, else a GET.
type renewer struct {
	name    string
	client  coordinationclient.LeaseInterface
	lister  coordinationlisters.LeaseNamespaceLister
	tracker *leaseTracker
	latest  *coordinationv1.Lease // what the last successful UPDATE returned
}

// run renews after offset and then every interval until ctx ends.
func (r *renewer) run(ctx context.Context, offset, interval time.Duration) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(offset):
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		r.renewOnce()
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// renewOnce makes one renewal; its requests are bounded by leaseRequestTimeout, not by the
// scenario's duration, so the last renewal is not cut short.
func (r *renewer) renewOnce() {
	ctx, cancel := context.WithTimeout(context.Background(), leaseRequestTimeout)
	defer cancel()
	r.tracker.attempted(r.name)
	base, err := r.base(ctx)
	if err != nil {
		r.tracker.failed(r.name, "get", err)
		return
	}
	lease := base.DeepCopy()
	now := metav1.NewMicroTime(time.Now())
	lease.Spec.RenewTime = &now
	updated, err := r.client.Update(ctx, lease, metav1.UpdateOptions{})
	if err != nil {
		r.latest = nil // as the kubelet does: fall back to a fresh read next time
		r.tracker.failed(r.name, fmt.Sprintf("update (from rv %s)", lease.ResourceVersion), err)
		return
	}
	r.latest = updated
	r.tracker.renewed(r.name, updated)
}

// base returns the object to renew from.
func (r *renewer) base(ctx context.Context) (*coordinationv1.Lease, error) {
	if r.latest != nil {
		return r.latest, nil
	}
	lease, err := r.lister.Get(r.name)
	if err == nil {
		r.tracker.read(r.name, lease.ResourceVersion)
		return lease, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("lease %s from the informer: %w", r.name, err)
	}
	lease, err = r.client.Get(ctx, r.name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("lease %s not in the informer, GET: %w", r.name, err)
	}
	r.tracker.read(r.name, lease.ResourceVersion)
	return lease, nil
}
