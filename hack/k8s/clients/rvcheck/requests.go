package main

// requests: one kind of request as fast as C workers of one client-go process can send it, for
// a fixed time: the per-request cost of a server (bench/routed_requests.py runs it against the
// proxy and against the partition that owns the objects, in alternating rounds).
//
//	rvcheck requests --kubeconfig K --op get|renew-lease|patch-status|list --namespace NS
//	                 --names a,b,c [--concurrency 16] [--connections 1] [--duration 5s]
//	                 [--warmup 1s] [--content-type protobuf|json] [--qps 0]
//
// --connections N clientsets, each with a transport of its own (one HTTP/2 connection each, as
// N kubelets); worker w uses clientset w mod N. With the default 1, every request goes over one
// HTTP/2 connection as a single kubelet's do (client-go's transport; up to the server's stream
// limit).
// Worker w works on --names[w mod len(names)]:
//   - get: GET the pod (namespace NS);
//   - renew-lease: what a kubelet's node lease controller does every 10 s: GET its Lease once,
//     then UPDATE it with spec.renewTime = now and the resourceVersion of the last answer; a
//     409 Conflict re-reads it (counted);
//   - patch-status: a strategic-merge PATCH of the pod's status subresource (status.message),
//     as the kubelet's status manager does;
//   - list: LIST the pods of namespace NS (resourceVersion unset: a consistent read).
//
// --qps Q > 0 paces the workers together at Q requests per second with client-go's token bucket
// (k8s.io/client-go/util/flowcontrol, burst 1; a late worker's wait is reserved, not dropped, so
// the rate is reached whenever the server keeps up): two servers are then compared at one
// achieved rate, not each at the rate its latency allows. A renewal that must first re-read its
// Lease (its first, and after a conflict) sends both requests on one token. 0: no limit.
//
// Requests finished in the first --warmup are not counted (TLS handshake, first LIST of a
// connection). The report gives the requests per second, the latency summary and the errors by
// kind.

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/flowcontrol"
)

// Values of --op.
const (
	opGet         = "get"
	opRenewLease  = "renew-lease"
	opPatchStatus = "patch-status"
	opList        = "list"
)

// requestsMaxErrors caps the distinct errors listed in the report.
const requestsMaxErrors = 20

// requestsOptions are the flags of requests.
type requestsOptions struct {
	commonFlags
	op          string
	namespace   string
	names       []string
	concurrency int
	connections int
	duration    time.Duration
	warmup      time.Duration
	qps         float64
}

// requestsReport is the JSON report of requests.
type requestsReport struct {
	Scenario    string         `json:"scenario"`
	Op          string         `json:"op"`
	Server      string         `json:"server"`
	ContentType string         `json:"content_type"`
	Concurrency int            `json:"concurrency"`
	QPS         float64        `json:"qps"` // --qps: the rate asked for; 0: none
	Connections int            `json:"connections"`
	Seconds     float64        `json:"seconds"` // counted: from the end of the warm-up
	Requests    int            `json:"requests"`
	Total       int            `json:"requests_with_warmup"` // answered, warm-up included (for the server's CPU per request)
	PerSecond   float64        `json:"requests_per_second"`
	Latency     latencySummary `json:"latency_ms"`
	Failed      int            `json:"failed"`
	Conflicts   int            `json:"conflicts"` // renew-lease: 409s, each followed by a re-read
	Errors      map[string]int `json:"errors"`    // the first requestsMaxErrors distinct ones
	CPUSeconds  float64        `json:"cpu_seconds"`
	Fatal       string         `json:"fatal,omitempty"`
}

// runRequestsCommand is the requests subcommand.
func runRequestsCommand(args []string, stderr io.Writer) (any, error) {
	var o requestsOptions
	var names string
	fs := o.flagSet("requests")
	fs.StringVar(&o.op, "op", opGet, "get, renew-lease, patch-status or list")
	fs.StringVar(&o.namespace, "namespace", "", "namespace of the pods or Leases (required)")
	fs.StringVar(&names, "names", "", "comma-separated object names, one per worker in turn (required but for list)")
	fs.IntVar(&o.concurrency, "concurrency", 16, "workers, each with one request in flight")
	fs.IntVar(&o.connections, "connections", 1, "clientsets with a connection of their own; worker w uses w mod connections")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "counted time, after the warm-up")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "time before counting")
	fs.Float64Var(&o.qps, "qps", 0, "requests per second of all workers together (client-go's token bucket); 0: no limit")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	o.names = splitNames(names)
	switch {
	case o.op != opGet && o.op != opRenewLease && o.op != opPatchStatus && o.op != opList:
		return nil, fmt.Errorf("%w: requests: --op must be get, renew-lease, patch-status or list, not %q", errUsage, o.op)
	case o.namespace == "" || (len(o.names) == 0 && o.op != opList):
		return nil, fmt.Errorf("%w: requests: --namespace and --names are required", errUsage)
	case o.concurrency < 1 || o.connections < 1 || o.duration <= 0 || o.warmup < 0 || o.qps < 0:
		return nil, fmt.Errorf("%w: requests: --concurrency, --connections and --duration must be positive, --warmup and --qps not negative", errUsage)
	}
	if len(o.names) == 0 {
		o.names = []string{""}
	}
	return runRequests(o, stderr)
}

// requestsTally is what the workers saw. Safe for concurrent use.
type requestsTally struct {
	mu        sync.Mutex
	countFrom time.Time
	total     int // answered without error, warm-up included
	ms        []float64
	failed    int
	conflicts int
	errors    map[string]int
}

// done records one request that started at t0 and ended now with err.
func (t *requestsTally) done(t0 time.Time, err error) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if err == nil {
		t.total++
	}
	if now.Before(t.countFrom) {
		return
	}
	if err != nil {
		if apierrors.IsConflict(err) {
			t.conflicts++
		}
		t.failed++
		msg := err.Error()
		if _, ok := t.errors[msg]; ok || len(t.errors) < requestsMaxErrors {
			t.errors[msg]++
		}
		return
	}
	t.ms = append(t.ms, float64(now.Sub(t0).Microseconds())/1e3)
}

// requestsWorker sends op for one object until ctx ends.
type requestsWorker struct {
	cs    *kubernetes.Clientset
	o     requestsOptions
	name  string
	lease *coordinationv1.Lease // renew-lease: the last answer
	seq   int
}

// once sends one request.
func (w *requestsWorker) once(ctx context.Context) error {
	ns := w.o.namespace
	switch w.o.op {
	case opGet:
		_, err := w.cs.CoreV1().Pods(ns).Get(ctx, w.name, metav1.GetOptions{})
		return err
	case opList:
		_, err := w.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err
	case opPatchStatus:
		w.seq++
		body := fmt.Sprintf(`{"status":{"message":"rvcheck requests %d"}}`, w.seq)
		_, err := w.cs.CoreV1().Pods(ns).Patch(ctx, w.name, types.StrategicMergePatchType, []byte(body), metav1.PatchOptions{}, "status")
		return err
	default: // opRenewLease
		leases := w.cs.CoordinationV1().Leases(ns)
		if w.lease == nil {
			lease, err := leases.Get(ctx, w.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			w.lease = lease
		}
		now := metav1.NewMicroTime(time.Now())
		w.lease.Spec.RenewTime = &now
		lease, err := leases.Update(ctx, w.lease, metav1.UpdateOptions{})
		if err != nil {
			w.lease = nil // re-read before the next renewal (a conflict: someone else wrote it)
			return err
		}
		w.lease = lease
		return nil
	}
}

// runRequests runs the scenario of o.
func runRequests(o requestsOptions, stderr io.Writer) (report requestsReport, err error) {
	defer func() {
		if err != nil {
			report.Fatal = err.Error()
		}
	}()
	report = requestsReport{Scenario: "requests", Op: o.op, ContentType: o.contentType, Concurrency: o.concurrency, QPS: o.qps, Errors: map[string]int{}}
	// No client-side rate limit per clientset (benchConfig): without --qps the workers send as
	// fast as answers come back; with it, one token bucket paces them all.
	var limiter flowcontrol.RateLimiter
	if o.qps > 0 {
		limiter = flowcontrol.NewTokenBucketRateLimiter(float32(o.qps), 1)
		defer limiter.Stop()
	}
	clientsets := make([]*kubernetes.Clientset, o.connections)
	for i := range clientsets {
		cfg, err := benchConfig(o.kubeconfig, o.contentType, "rvcheck-requests", o.connections > 1)
		if err != nil {
			return report, err
		}
		report.Server = cfg.Host
		if clientsets[i], err = kubernetes.NewForConfig(cfg); err != nil {
			return report, fmt.Errorf("build clientset for %s: %w", cfg.Host, err)
		}
	}
	report.Connections = o.connections
	tally := &requestsTally{errors: report.Errors}
	start := time.Now()
	tally.countFrom = start.Add(o.warmup)
	ctx, cancel := context.WithDeadline(context.Background(), tally.countFrom.Add(o.duration))
	defer cancel()
	progress(stderr, "requests: %s x %d on %s for %s (+%s warm-up), qps %g", o.op, o.concurrency, report.Server, o.duration, o.warmup, o.qps)
	var wg sync.WaitGroup
	for i := range o.concurrency {
		w := &requestsWorker{cs: clientsets[i%len(clientsets)], o: o, name: o.names[i%len(o.names)]}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if limiter != nil && limiter.Wait(ctx) != nil {
					return // the deadline came first
				}
				t0 := time.Now()
				err := w.once(ctx)
				if ctx.Err() != nil {
					return // cut by the deadline: not counted
				}
				tally.done(t0, err)
			}
		}()
	}
	wg.Wait()
	report.Seconds = round3(time.Since(tally.countFrom).Seconds())
	tally.mu.Lock()
	report.Requests, report.Total, report.Failed, report.Conflicts = len(tally.ms), tally.total, tally.failed, tally.conflicts
	report.Latency = summarize(tally.ms)
	tally.mu.Unlock()
	report.PerSecond = round3(float64(report.Requests) / max(report.Seconds, 1e-9))
	report.CPUSeconds = round3(ownCPUSeconds())
	progress(stderr, "requests: %s x %d: %d in %.1f s (%.0f/s), p50 %.3f ms p99 %.3f ms, %d failed",
		o.op, o.concurrency, report.Requests, report.Seconds, report.PerSecond, report.Latency.P50Ms, report.Latency.P99Ms, report.Failed)
	return report, nil
}
