package main

// create-pods: pods created at a fixed rate (bench/density.py's load, clusterloader2 style).
//
//	rvcheck create-pods --kubeconfig K --namespace NS1[,NS2...] --count M --rate R --run TAG
//	                    [--clients 16] [--prefix density-] [--log-out F] [--timeout D] [--content-type protobuf|json]
//
// Pod i (0-based) is due at start + i/rate, lives in namespace i mod len(namespaces) and is named
// <prefix><6-digit i>. It carries the label density.partition-proxy.io/run=<run> (what a
// `pod-watch` selects) and the annotations of `write` (bench.go): the wall clock of the first
// send in Unix nanoseconds and its number, so a watcher measures startup latency from the
// moment the client asked, as the pod startup SLO does. The pod is a pause container with
// small requests (10m CPU, 16 MiB), like clusterloader2's density pods, and no owner: no
// controller stands between the create and the scheduler.
//
// `clients` workers send the creates, each over its own connection; a pod whose worker is busy
// waits (the report says how far behind schedule sends fell; nothing is skipped). A create
// answered 429, 5xx or not answered is retried up to createAttempts times; 409 AlreadyExists on
// a retry counts as created (the first attempt went through). --log-out writes one CSV line per
// created pod, "seq,sent_ns,answered_ns".

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

const (
	createRequestTimeout = 10 * time.Second // one POST; milliseconds when the server keeps up
	createAttempts       = 3
	labelDensityRun      = "density.partition-proxy.io/run" // selects the pods of one run
	densityImage         = "registry.k8s.io/pause:3.10"
)

type createPodsOptions struct {
	commonFlags
	namespaces []string
	prefix     string
	count      int
	rate       float64
	clients    int
	run        string
	logOut     string
	timeout    time.Duration
	progress   time.Duration
}

func parseCreatePodsFlags(args []string) (createPodsOptions, error) {
	var o createPodsOptions
	var namespaces string
	fs := flag.NewFlagSet("create-pods", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.register(fs)
	fs.StringVar(&namespaces, "namespace", "", "comma-separated namespaces; pod i goes to namespace i mod count (required)")
	fs.StringVar(&o.prefix, "prefix", "density-", "pod names are <prefix><6-digit index>")
	fs.IntVar(&o.count, "count", 0, "pods to create (required)")
	fs.Float64Var(&o.rate, "rate", 20, "pods per second")
	fs.IntVar(&o.clients, "clients", 16, "concurrent workers, each with its own connection")
	fs.StringVar(&o.run, "run", "run", "value of the run label and annotation")
	fs.StringVar(&o.logOut, "log-out", "", "write seq,sent_ns,answered_ns of every created pod to this CSV file")
	fs.DurationVar(&o.timeout, "timeout", 0, "give up after this long (0: 3 x count/rate + 60 s)")
	fs.DurationVar(&o.progress, "progress", 5*time.Second, "print a progress line this often (0: never)")
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	if err := o.validate(); err != nil {
		return o, err
	}
	o.namespaces = splitNames(namespaces)
	switch {
	case len(o.namespaces) == 0:
		return o, fmt.Errorf("%w: create-pods: --namespace is required", errUsage)
	case o.count < 1 || o.rate <= 0 || o.clients < 1 || o.timeout < 0:
		return o, fmt.Errorf("%w: create-pods: --count, --rate and --clients must be positive", errUsage)
	}
	if o.timeout == 0 {
		o.timeout = time.Duration(3*float64(o.count)/o.rate*float64(time.Second)) + 60*time.Second
	}
	return o, nil
}

type createPodsReport struct {
	Scenario      string   `json:"scenario"`
	ContentType   string   `json:"content_type"`
	Server        string   `json:"server"`
	Run           string   `json:"run"`
	Namespaces    []string `json:"namespaces"`
	Clients       int      `json:"clients"`
	RequestedPerS float64  `json:"requested_per_s"`
	Planned       int      `json:"pods_planned"`
	Sent          int      `json:"pods_sent"`
	Created       int      `json:"pods_created"`
	Failed        int      `json:"pods_failed"` // no attempt succeeded
	Retries       int      `json:"retries"`
	// AchievedPerS: created / (last answer - first send), seconds.
	AchievedPerS float64        `json:"achieved_per_s"`
	SendSeconds  float64        `json:"send_seconds"`
	WallSeconds  float64        `json:"wall_seconds"`
	StartedAtNs  int64          `json:"started_at_ns"`
	EndedAtNs    int64          `json:"ended_at_ns"`
	BehindMs     latencySummary `json:"behind_schedule_ms"`
	CreateMs     latencySummary `json:"create_round_trip_ms"`
	CPUSeconds   float64        `json:"cpu_seconds"`
	Errors       []apiError     `json:"errors"`
	ErrorsTotal  int            `json:"errors_total"`
	TimedOut     bool           `json:"timed_out"`
	Fatal        string         `json:"fatal,omitempty"`
}

func runCreatePodsCommand(args []string, stderr io.Writer) (any, error) {
	o, err := parseCreatePodsFlags(args)
	if err != nil {
		return nil, err
	}
	report, err := runCreatePods(o, stderr)
	if err != nil {
		report.Fatal = err.Error()
	}
	return report, err
}

// densityPod is pod seq of the run, its send time stamped in an annotation.
func densityPod(o createPodsOptions, seq int, sent time.Time) *corev1.Pod {
	requests := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("10m"),
		corev1.ResourceMemory: resource.MustParse("16Mi"),
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s%06d", o.prefix, seq),
			Namespace: o.namespaces[seq%len(o.namespaces)],
			Labels:    map[string]string{labelDensityRun: o.run},
			Annotations: map[string]string{
				annotationSentNs: strconv.FormatInt(sent.UnixNano(), 10),
				annotationSeq:    strconv.Itoa(seq),
				annotationRun:    o.run,
			},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "pause", Image: densityImage,
				Resources: corev1.ResourceRequirements{Requests: requests, Limits: requests},
			}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
}

// createStats is what the workers measured. Safe for concurrent use.
type createStats struct {
	mu        sync.Mutex
	behindMs  []float64
	createMs  []float64
	sent      int
	created   int
	failed    int
	retries   int
	firstSend time.Time
	lastSend  time.Time
	lastDone  time.Time
	errs      errorLog
	okSeqs    []int
	okSentNs  []int64
	okDoneNs  []int64
}

func (s *createStats) record(seq int, due, sent, done time.Time, retries int, err error, subject string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent++
	s.retries += retries
	if s.firstSend.IsZero() || sent.Before(s.firstSend) {
		s.firstSend = sent
	}
	if sent.After(s.lastSend) {
		s.lastSend = sent
	}
	s.behindMs = append(s.behindMs, float64(sent.Sub(due))/1e6)
	if err != nil {
		s.failed++
		s.errs.add(newAPIError(subject, "create", err))
		return
	}
	s.created++
	s.okSeqs = append(s.okSeqs, seq)
	s.okSentNs = append(s.okSentNs, sent.UnixNano())
	s.okDoneNs = append(s.okDoneNs, done.UnixNano())
	s.createMs = append(s.createMs, float64(done.Sub(sent))/1e6)
	if done.After(s.lastDone) {
		s.lastDone = done
	}
}

func (s *createStats) counts() (sent, created, failed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent, s.created, s.failed
}

// retryable: worth sending the same create again (overload, server errors, no answer).
func retryable(err error) bool {
	return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) || errors.Is(err, context.DeadlineExceeded) ||
		!isAPIStatus(err)
}

func isAPIStatus(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status)
}

// createOne sends one create, retrying; returns the retries made and the final error.
func createOne(ctx context.Context, cs *kubernetes.Clientset, pod *corev1.Pod) (int, error) {
	var err error
	for attempt := 0; attempt < createAttempts; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, createRequestTimeout)
		_, err = cs.CoreV1().Pods(pod.Namespace).Create(rctx, pod, metav1.CreateOptions{})
		cancel()
		if err == nil || (attempt > 0 && apierrors.IsAlreadyExists(err)) {
			return attempt, nil
		}
		if !retryable(err) || ctx.Err() != nil {
			return attempt, err
		}
		time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
	}
	return createAttempts - 1, err
}

func runCreatePods(o createPodsOptions, stderr io.Writer) (createPodsReport, error) {
	report := createPodsReport{
		Scenario: "create-pods", ContentType: o.contentType, Run: o.run, Namespaces: o.namespaces, Clients: o.clients,
		RequestedPerS: o.rate, Planned: o.count, Errors: []apiError{},
	}
	stats := &createStats{}
	clients := make([]*kubernetes.Clientset, o.clients)
	for w := range clients {
		cfg, err := benchConfig(o.kubeconfig, o.contentType, "rvcheck-create-pods", true)
		if err != nil {
			return report, err
		}
		report.Server = cfg.Host
		if clients[w], err = kubernetes.NewForConfig(cfg); err != nil {
			return report, fmt.Errorf("build clientset for %s: %w", cfg.Host, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()

	jobs := make(chan writeJob, o.clients)
	var wg sync.WaitGroup
	for w := 0; w < o.clients; w++ {
		wg.Add(1)
		go func(cs *kubernetes.Clientset) {
			defer wg.Done()
			for job := range jobs {
				sent := time.Now()
				pod := densityPod(o, job.seq, sent)
				retries, err := createOne(ctx, cs, pod)
				stats.record(job.seq, job.due, sent, time.Now(), retries, err, pod.Namespace+"/"+pod.Name)
			}
		}(clients[w])
	}
	done := make(chan struct{})
	if o.progress > 0 {
		go func() {
			t := time.NewTicker(o.progress)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					sent, created, failed := stats.counts()
					progress(stderr, "create-pods %s: %d/%d sent, %d created, %d failed", o.run, sent, o.count, created, failed)
				}
			}
		}()
	}

	progress(stderr, "create-pods %s: %d pods at %.1f/s into %v on %s, %d clients", o.run, o.count, o.rate, o.namespaces, report.Server, o.clients)
	start := time.Now()
	interval := time.Duration(float64(time.Second) / o.rate)
dispatch:
	for seq := 0; seq < o.count; seq++ {
		due := start.Add(time.Duration(seq) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		select {
		case jobs <- writeJob{seq: seq, due: due}:
		case <-ctx.Done():
			report.TimedOut = true
			break dispatch
		}
	}
	close(jobs)
	wg.Wait()
	close(done)

	stats.mu.Lock()
	defer stats.mu.Unlock()
	report.Sent, report.Created, report.Failed, report.Retries = stats.sent, stats.created, stats.failed, stats.retries
	report.WallSeconds = round3(time.Since(start).Seconds())
	if !stats.firstSend.IsZero() {
		report.StartedAtNs = stats.firstSend.UnixNano()
		report.SendSeconds = round3(stats.lastSend.Sub(stats.firstSend).Seconds())
	}
	if !stats.lastDone.IsZero() {
		report.EndedAtNs = stats.lastDone.UnixNano()
		if window := stats.lastDone.Sub(stats.firstSend).Seconds(); window > 0 {
			report.AchievedPerS = round3(float64(stats.created) / window)
		}
	}
	report.BehindMs = summarize(stats.behindMs)
	report.CreateMs = summarize(stats.createMs)
	report.Errors, report.ErrorsTotal = stats.errs.snapshot()
	report.CPUSeconds = round3(ownCPUSeconds())
	if o.logOut != "" {
		if err := writeEventsCSV(o.logOut, stats.okSeqs, stats.okSentNs, stats.okDoneNs); err != nil {
			return report, err
		}
	}
	progress(stderr, "create-pods %s: %d/%d created at %.1f/s, %d failed, %d retries, behind schedule p99 %.1f ms, create p99 %.1f ms",
		o.run, report.Created, o.count, report.AchievedPerS, report.Failed, report.Retries, report.BehindMs.P99Ms, report.CreateMs.P99Ms)
	return report, nil
}
