package main

// pod-watch: the pod startup watcher of bench/density.py (clusterloader2's pod startup latency:
// the moment a watch sees a pod Running).
//
//	rvcheck pod-watch --kubeconfig K1[,K2...] --run TAG [--expect M] [--duration 10m] [--idle 60s]
//	                  [--ready-file F] [--events-out F] [--progress 5s] [--name N] [--content-type protobuf|json]
//
// One pod informer per kubeconfig (client-go SharedInformer: LIST, then WATCH with bookmarks;
// relists and re-watches on errors as a controller does), every namespace, selecting the label
// density.partition-proxy.io/run=<run>. Several kubeconfigs are merged client side (e.g. the
// tenant partitions straight, next to the proxy's union). Per pod it keeps the first time (wall
// clock, Unix ns, taken in the event handler) any stream saw it at all, saw it bound
// (spec.nodeName set), saw it Running (status.phase) and saw it Failed, with the send time the
// creator stamped in its annotation. It ends when --expect pods are Running or Failed, after
// --idle without a pod reaching Running (once one did), at --duration, or on SIGTERM/SIGINT
// (the report is still written). --events-out writes one CSV line per pod:
// "seq,pod,sent_ns,added_ns,bound_ns,running_ns,failed_ns,node" (0 for never).

import (
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

const podWatchSyncTimeout = 60 * time.Second // the informers' first LIST

type podWatchOptions struct {
	commonFlags
	kubeconfigs []string
	run         string
	expect      int
	duration    time.Duration
	idle        time.Duration
	readyFile   string
	eventsOut   string
	progress    time.Duration
	name        string
}

func parsePodWatchFlags(args []string) (podWatchOptions, error) {
	var o podWatchOptions
	fs := flag.NewFlagSet("pod-watch", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.register(fs)
	fs.StringVar(&o.run, "run", "", "watch the pods labelled density.partition-proxy.io/run=<run> (required)")
	fs.IntVar(&o.expect, "expect", 0, "stop once this many pods are Running or Failed (0: no count limit)")
	fs.DurationVar(&o.duration, "duration", 10*time.Minute, "stop after this long (from the moment every informer has synced)")
	fs.DurationVar(&o.idle, "idle", 60*time.Second, "stop after this long without a pod reaching Running, once one did (0: never)")
	fs.StringVar(&o.readyFile, "ready-file", "", "write this file once every informer has synced")
	fs.StringVar(&o.eventsOut, "events-out", "", "write one CSV line per pod to this file")
	fs.DurationVar(&o.progress, "progress", 5*time.Second, "print a progress line this often (0: never)")
	fs.StringVar(&o.name, "name", "pod-watch", "name in progress lines")
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	if err := o.validate(); err != nil {
		return o, err
	}
	o.kubeconfigs = splitNames(o.kubeconfig)
	switch {
	case len(o.kubeconfigs) == 0:
		return o, fmt.Errorf("%w: pod-watch: --kubeconfig is required", errUsage)
	case o.run == "":
		return o, fmt.Errorf("%w: pod-watch: --run is required", errUsage)
	case o.duration <= 0 || o.expect < 0 || o.idle < 0:
		return o, fmt.Errorf("%w: pod-watch: --duration must be positive, --expect and --idle not negative", errUsage)
	}
	return o, nil
}

// podTimes is what the watcher saw of one pod; times are Unix ns, 0 for never.
type podTimes struct {
	seq       int
	key       string
	sentNs    int64
	addedNs   int64
	boundNs   int64
	runningNs int64
	failedNs  int64
	node      string
}

type podWatchStream struct {
	Server       string   `json:"server"`
	ContentTypes []string `json:"response_content_types"`
	SyncSeconds  float64  `json:"sync_seconds"`
	Events       int      `json:"events"` // add + update + delete handler calls
	WatchErrors  []string `json:"watch_errors"`
	WatchErrorsN int      `json:"watch_errors_total"`
}

type podWatchReport struct {
	Scenario    string           `json:"scenario"`
	Name        string           `json:"name"`
	ContentType string           `json:"content_type"`
	Run         string           `json:"run"`
	Streams     []podWatchStream `json:"streams"`
	Expected    int              `json:"expected"`
	Seen        int              `json:"seen"`
	Bound       int              `json:"bound"`
	Running     int              `json:"running"`
	Failed      int              `json:"failed"`
	Deleted     int              `json:"deleted"`
	// CreateToRunning: running_ns - sent_ns of the pods seen Running (ms).
	CreateToRunning latencySummary `json:"create_to_running_ms"`
	StopReason      string         `json:"stop_reason"` // expected | idle | duration | signal
	WatchedSecs     float64        `json:"watched_seconds"`
	CPUSeconds      float64        `json:"cpu_seconds"`
	Fatal           string         `json:"fatal,omitempty"`
}

func runPodWatchCommand(args []string, stderr io.Writer) (any, error) {
	o, err := parsePodWatchFlags(args)
	if err != nil {
		return nil, err
	}
	report, err := runPodWatch(o, stderr)
	if err != nil {
		report.Fatal = err.Error()
	}
	return report, err
}

// podWatchStats is what every stream saw. Safe for concurrent use.
type podWatchStats struct {
	mu        sync.Mutex
	pods      map[string]*podTimes
	streams   []podWatchStream
	running   int
	failed    int
	bound     int
	deleted   int
	lastReach time.Time // the last time a pod reached Running or Failed
	changed   chan struct{}
}

func (s *podWatchStats) observe(stream int, obj any, now time.Time) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	ns := now.UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streams[stream].Events++
	key := pod.Namespace + "/" + pod.Name
	p := s.pods[key]
	if p == nil {
		p = &podTimes{key: key, addedNs: ns, seq: -1}
		if seq, err := strconv.Atoi(pod.Annotations[annotationSeq]); err == nil {
			p.seq = seq
		}
		if sent, err := strconv.ParseInt(pod.Annotations[annotationSentNs], 10, 64); err == nil {
			p.sentNs = sent
		}
		s.pods[key] = p
	}
	if pod.Spec.NodeName != "" && p.boundNs == 0 {
		p.boundNs, p.node = ns, pod.Spec.NodeName
		s.bound++
	}
	reached := false
	switch pod.Status.Phase {
	case corev1.PodRunning:
		if p.runningNs == 0 {
			p.runningNs = ns
			s.running++
			reached = p.failedNs == 0
		}
	case corev1.PodFailed:
		if p.failedNs == 0 {
			p.failedNs = ns
			s.failed++
			reached = p.runningNs == 0
		}
	}
	if reached {
		s.lastReach = now
		select {
		case s.changed <- struct{}{}:
		default:
		}
	}
}

func (s *podWatchStats) onDelete(stream int, obj any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streams[stream].Events++
	s.deleted++
}

func (s *podWatchStats) done() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, p := range s.pods {
		if p.runningNs != 0 || p.failedNs != 0 {
			n++
		}
	}
	return n
}

func (s *podWatchStats) watchError(stream int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &s.streams[stream]
	st.WatchErrorsN++
	if len(st.WatchErrors) < maxStreamEndErrors {
		st.WatchErrors = append(st.WatchErrors, time.Now().Format("15:04:05.000")+" "+err.Error())
	}
}

func runPodWatch(o podWatchOptions, stderr io.Writer) (podWatchReport, error) {
	report := podWatchReport{Scenario: "pod-watch", Name: o.name, ContentType: o.contentType, Run: o.run, Expected: o.expect}
	stats := &podWatchStats{pods: map[string]*podTimes{}, streams: make([]podWatchStream, len(o.kubeconfigs)), changed: make(chan struct{}, 1)}
	for i := range stats.streams {
		stats.streams[i] = podWatchStream{WatchErrors: []string{}, ContentTypes: []string{}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	recorders := make([]*contentTypeRecorder, len(o.kubeconfigs))
	selector := labelDensityRun + "=" + o.run
	for i, kc := range o.kubeconfigs {
		cfg, err := benchConfig(kc, o.contentType, "rvcheck-pod-watch", true)
		if err != nil {
			return report, err
		}
		stats.streams[i].Server = cfg.Host
		rec := &contentTypeRecorder{}
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			rec.next = rt
			return rec
		})
		recorders[i] = rec
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return report, fmt.Errorf("build clientset for %s: %w", cfg.Host, err)
		}
		factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.LabelSelector = selector
		}))
		inf := factory.Core().V1().Pods().Informer()
		stream := i
		if err := inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) { stats.watchError(stream, err) }); err != nil {
			return report, fmt.Errorf("watch error handler: %w", err)
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { stats.observe(stream, obj, time.Now()) },
			UpdateFunc: func(_, obj any) { stats.observe(stream, obj, time.Now()) },
			DeleteFunc: func(obj any) { stats.onDelete(stream, obj) },
		}); err != nil {
			return report, fmt.Errorf("add event handler: %w", err)
		}
		t0 := time.Now()
		factory.Start(ctx.Done())
		sctx, scancel := context.WithTimeout(ctx, podWatchSyncTimeout)
		synced := cache.WaitForCacheSync(sctx.Done(), inf.HasSynced)
		scancel()
		if !synced {
			return finishPodWatch(&report, stats, recorders), fmt.Errorf("pod informer on %s did not sync within %v", cfg.Host, podWatchSyncTimeout)
		}
		stats.streams[i].SyncSeconds = round3(time.Since(t0).Seconds())
	}
	if err := writeReadyFile(o.readyFile); err != nil {
		return finishPodWatch(&report, stats, recorders), err
	}
	progress(stderr, "%s: %d informer(s) synced (%s), run %q, expecting %d", o.name, len(o.kubeconfigs), o.contentType, o.run, o.expect)
	start := time.Now()
	deadline := time.NewTimer(o.duration)
	defer deadline.Stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastProgress := time.Now()
wait:
	for {
		select {
		case <-deadline.C:
			report.StopReason = "duration"
			break wait
		case <-sigs:
			report.StopReason = "signal"
			break wait
		case <-stats.changed:
			if o.expect > 0 && stats.done() >= o.expect {
				report.StopReason = "expected"
				break wait
			}
		case now := <-tick.C:
			stats.mu.Lock()
			last, seen, bound, running, failed := stats.lastReach, len(stats.pods), stats.bound, stats.running, stats.failed
			stats.mu.Unlock()
			if o.progress > 0 && now.Sub(lastProgress) >= o.progress {
				lastProgress = now
				progress(stderr, "%s: %d seen, %d bound, %d running, %d failed of %d", o.name, seen, bound, running, failed, o.expect)
			}
			if o.idle > 0 && !last.IsZero() && now.Sub(last) > o.idle {
				report.StopReason = "idle"
				break wait
			}
		}
	}
	report.WatchedSecs = round3(time.Since(start).Seconds())
	cancel()
	out := finishPodWatch(&report, stats, recorders)
	var csvErr error
	if o.eventsOut != "" {
		csvErr = writePodTimesCSV(o.eventsOut, stats)
	}
	progress(stderr, "%s: %d seen, %d bound, %d running, %d failed of %d (%s); create->running p50 %.0f ms p99 %.0f ms",
		o.name, out.Seen, out.Bound, out.Running, out.Failed, o.expect, out.StopReason, out.CreateToRunning.P50Ms, out.CreateToRunning.P99Ms)
	return out, csvErr
}

func finishPodWatch(report *podWatchReport, stats *podWatchStats, recorders []*contentTypeRecorder) podWatchReport {
	stats.mu.Lock()
	defer stats.mu.Unlock()
	for i, rec := range recorders {
		if rec != nil {
			stats.streams[i].ContentTypes = rec.contentTypes()
		}
	}
	report.Streams = append([]podWatchStream{}, stats.streams...)
	report.Seen, report.Bound, report.Running, report.Failed, report.Deleted = len(stats.pods), stats.bound, stats.running, stats.failed, stats.deleted
	var ms []float64
	for _, p := range stats.pods {
		if p.runningNs != 0 && p.sentNs != 0 {
			ms = append(ms, float64(p.runningNs-p.sentNs)/1e6)
		}
	}
	report.CreateToRunning = summarize(ms)
	report.CPUSeconds = round3(ownCPUSeconds())
	return *report
}

func writePodTimesCSV(path string, stats *podWatchStats) error {
	stats.mu.Lock()
	pods := make([]*podTimes, 0, len(stats.pods))
	for _, p := range stats.pods {
		pods = append(pods, p)
	}
	stats.mu.Unlock()
	sort.Slice(pods, func(i, j int) bool { return pods[i].seq < pods[j].seq })
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	w := csv.NewWriter(f)
	i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
	for _, p := range pods {
		_ = w.Write([]string{strconv.Itoa(p.seq), p.key, i64(p.sentNs), i64(p.addedNs), i64(p.boundNs), i64(p.runningNs), i64(p.failedNs), p.node})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
