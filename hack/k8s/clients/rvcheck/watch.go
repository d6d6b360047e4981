package main

// watch: one watch per kubeconfig on the same path, merged client side, counting the events a
// `write` run stamped and their delivery lag (bench/union_watch.py's watcher).
//
//	rvcheck watch --kubeconfig K1[,K2...] --path /api/v1/configmaps --run TAG
//	              [--expect N] [--duration 40s] [--idle 5s] [--ready-file F] [--events-out F] [--content-type protobuf|json]
//
// Each stream first LISTs the path (its resourceVersion is where the watch starts, unless
// --resource-version is given), then watches it with allowWatchBookmarks=true through client-go's
// REST client, which decodes each event as a typed object (so core/v1 paths only) in the
// negotiated encoding: --content-type protobuf accepts protobuf then JSON, as kubelets do; the
// report gives the Content-Type every watch answered with. --ready-file is written once every
// stream's watch has answered 200. An event counts when its object carries the run annotation
// equal to --run; its lag is the receive time minus the write's sent-ns annotation (same
// machine, same wall clock). The watch ends at --expect distinct counted events, after --idle
// without a counted event (once one arrived), at --duration, or when every stream has ended.
// --events-out writes one CSV line per counted event, "seq,sent_ns,receive_ns", for joining
// with another watcher's or the writer's log. SIGTERM or SIGINT stop the watch as --duration
// does (stop reason "signal"): the report and the CSV are still written.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

const (
	watchOpenTimeout = 30 * time.Second // LIST + the watch's answer, per stream
	watchTick        = 50 * time.Millisecond
	// maxStreamEndErrors caps the per-stream error texts kept.
	maxStreamEndErrors = 5
)

type watchOptions struct {
	commonFlags
	kubeconfigs     []string
	path            string
	resourceVersion string
	run             string
	expect          int
	duration        time.Duration
	idle            time.Duration
	readyFile       string
	eventsOut       string
}

func parseWatchFlags(args []string) (watchOptions, error) {
	var o watchOptions
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.register(fs)
	fs.StringVar(&o.path, "path", "/api/v1/configmaps", "absolute path of the collection to watch (core/v1 kinds)")
	fs.StringVar(&o.resourceVersion, "resource-version", "", "start every stream here (default: each stream's LIST resourceVersion)")
	fs.StringVar(&o.run, "run", "run", "count only events whose run annotation equals this")
	fs.IntVar(&o.expect, "expect", 0, "stop after this many distinct counted events (0: no count limit)")
	fs.DurationVar(&o.duration, "duration", 60*time.Second, "stop after this long (from the moment every watch is open)")
	fs.DurationVar(&o.idle, "idle", 5*time.Second, "stop after this long without a counted event, once one arrived (0: never)")
	fs.StringVar(&o.readyFile, "ready-file", "", "write this file once every watch is open")
	fs.StringVar(&o.eventsOut, "events-out", "", "write seq,sent_ns,receive_ns of every counted event to this CSV file")
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	if err := o.validate(); err != nil {
		return o, err
	}
	o.kubeconfigs = splitNames(o.kubeconfig)
	switch {
	case len(o.kubeconfigs) == 0:
		return o, fmt.Errorf("%w: watch: --kubeconfig is required", errUsage)
	case !strings.HasPrefix(o.path, "/"):
		return o, fmt.Errorf("%w: watch: --path must be absolute", errUsage)
	case o.duration <= 0 || o.expect < 0 || o.idle < 0:
		return o, fmt.Errorf("%w: watch: --duration must be positive, --expect and --idle not negative", errUsage)
	}
	return o, nil
}

// watchEventCounts counts events by type.
type watchEventCounts struct {
	Added    int `json:"added"`
	Modified int `json:"modified"`
	Deleted  int `json:"deleted"`
	Bookmark int `json:"bookmark"`
	Error    int `json:"error"`
}

// count counts one event of type t.
func (c *watchEventCounts) count(t watch.EventType) {
	switch t {
	case watch.Added:
		c.Added++
	case watch.Modified:
		c.Modified++
	case watch.Deleted:
		c.Deleted++
	case watch.Bookmark:
		c.Bookmark++
	case watch.Error:
		c.Error++
	}
}

// streamReport is what one stream (one kubeconfig) saw.
type streamReport struct {
	Server       string           `json:"server"`
	ListRV       string           `json:"list_rv"`
	StartRV      string           `json:"start_rv"`
	ContentTypes []string         `json:"response_content_types"` // of the watch answers
	OpenSeconds  float64          `json:"open_seconds"`
	Events       watchEventCounts `json:"events"`
	Counted      int              `json:"counted"`
	FirstRV      string           `json:"first_rv"` // first and last RV of any event, bookmarks included
	LastRV       string           `json:"last_rv"`
	// RVsIncreasing: every event's RV > the previous one, a bookmark's >= (KEP-5504 order of
	// one watch stream).
	RVsIncreasing bool     `json:"rvs_increasing"`
	RVRegressions int      `json:"rv_regressions"`
	InvalidRVs    int      `json:"invalid_rvs"` // not a uint128 in decimal (KEP-5504)
	EndedEarly    bool     `json:"ended_early"` // the stream closed before the watch was stopped
	Errors        []string `json:"errors"`
}

// lagSecond is the lag of the counted events received in one second of the watch.
type lagSecond struct {
	Second int     `json:"second"` // since the first counted event
	Count  int     `json:"count"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
}

type watchReport struct {
	Scenario    string         `json:"scenario"`
	ContentType string         `json:"content_type"`
	Path        string         `json:"path"`
	Run         string         `json:"run"`
	Streams     []streamReport `json:"streams"`
	Expected    int            `json:"expected"`
	Counted     int            `json:"counted"` // distinct writes (seq) received
	Duplicates  int            `json:"duplicates"`
	OtherEvents int            `json:"other_events"` // not of this run (e.g. bookmarks excluded)
	// EventsPerS: counted / (last counted receive - first counted receive), seconds.
	EventsPerS  float64        `json:"events_per_s"`
	FirstRecvNs int64          `json:"first_receive_ns"`
	LastRecvNs  int64          `json:"last_receive_ns"`
	Lag         latencySummary `json:"lag_ms"`
	LagBySecond []lagSecond    `json:"lag_by_second"`
	StopReason  string         `json:"stop_reason"` // expected | idle | duration | streams-ended | signal
	WatchedSecs float64        `json:"watched_seconds"`
	CPUSeconds  float64        `json:"cpu_seconds"`
	Fatal       string         `json:"fatal,omitempty"`
}

func runWatchCommand(args []string, stderr io.Writer) (any, error) {
	o, err := parseWatchFlags(args)
	if err != nil {
		return nil, err
	}
	report, err := runWatch(o, stderr)
	if err != nil {
		report.Fatal = err.Error()
	}
	return report, err
}

// contentTypeRecorder records the Content-Type of every watch answer. Safe for concurrent use.
type contentTypeRecorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	seen []string
}

func (r *contentTypeRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err == nil && req.URL.Query().Get("watch") != "" {
		r.mu.Lock()
		r.seen = append(r.seen, resp.Header.Get("Content-Type"))
		r.mu.Unlock()
	}
	return resp, err
}

func (r *contentTypeRecorder) contentTypes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string{}, r.seen...)
}

// watchStats is what every stream received. Safe for concurrent use.
type watchStats struct {
	mu          sync.Mutex
	run         string
	streams     []streamReport
	seen        map[int]struct{}
	duplicates  int
	other       int
	seqs        []int   // per counted event
	sentNs      []int64 // per counted event
	recvNs      []int64 // per counted event
	lagMs       []float64
	firstRecv   time.Time
	lastCounted time.Time
}

// record takes one event of stream i received at now; returns the distinct counted total.
func (s *watchStats) record(i int, ev watch.Event, now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &s.streams[i]
	st.Events.count(ev.Type)
	if ev.Type == watch.Error {
		if len(st.Errors) < maxStreamEndErrors {
			st.Errors = append(st.Errors, "ERROR event: "+apierrors.FromObject(ev.Object).Error())
		}
		return len(s.seen)
	}
	obj, err := meta.Accessor(ev.Object)
	if err != nil {
		s.other++
		return len(s.seen)
	}
	s.checkRV(st, obj.GetResourceVersion(), ev.Type == watch.Bookmark)
	ann := obj.GetAnnotations()
	if ev.Type == watch.Bookmark || ann[annotationRun] != s.run {
		s.other++
		return len(s.seen)
	}
	seq, err1 := strconv.Atoi(ann[annotationSeq])
	sentNs, err2 := strconv.ParseInt(ann[annotationSentNs], 10, 64)
	if err1 != nil || err2 != nil {
		s.other++
		return len(s.seen)
	}
	if _, dup := s.seen[seq]; dup {
		s.duplicates++
		return len(s.seen)
	}
	s.seen[seq] = struct{}{}
	st.Counted++
	if s.firstRecv.IsZero() {
		s.firstRecv = now
	}
	s.lastCounted = now
	s.seqs = append(s.seqs, seq)
	s.sentNs = append(s.sentNs, sentNs)
	s.recvNs = append(s.recvNs, now.UnixNano())
	s.lagMs = append(s.lagMs, float64(now.UnixNano()-sentNs)/1e6)
	return len(s.seen)
}

// checkRV records rv as the newest of stream st.
func (s *watchStats) checkRV(st *streamReport, rv string, bookmark bool) {
	if rv == "" {
		return
	}
	if !validRV(rv) {
		st.InvalidRVs++
	}
	if st.LastRV != "" && validRV(st.LastRV) && validRV(rv) {
		c := compareRV(rv, st.LastRV)
		if c < 0 || (c == 0 && !bookmark) {
			st.RVsIncreasing = false
			st.RVRegressions++
		}
	}
	if st.FirstRV == "" {
		st.FirstRV = rv
	}
	st.LastRV = rv
}

func (s *watchStats) idleSince() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastCounted, !s.lastCounted.IsZero()
}

// openStream LISTs the path and opens its watch; returns the event channel's watch.
func openStream(ctx context.Context, o watchOptions, kubeconfig string, st *streamReport) (watch.Interface, *contentTypeRecorder, error) {
	cfg, err := benchConfig(kubeconfig, o.contentType, "rvcheck-watch", true)
	if err != nil {
		return nil, nil, err
	}
	st.Server = cfg.Host
	rec := &contentTypeRecorder{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		rec.next = rt
		return rec
	})
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("build clientset for %s: %w", cfg.Host, err)
	}
	rc := cs.CoreV1().RESTClient()
	t0 := time.Now()
	octx, cancel := context.WithTimeout(ctx, watchOpenTimeout)
	defer cancel()
	listed, err := rc.Get().AbsPath(o.path).Do(octx).Get()
	if err != nil {
		return nil, nil, fmt.Errorf("list %s on %s: %w", o.path, cfg.Host, err)
	}
	list, err := meta.ListAccessor(listed)
	if err != nil {
		return nil, nil, fmt.Errorf("list %s on %s: %w", o.path, cfg.Host, err)
	}
	st.ListRV = list.GetResourceVersion()
	st.StartRV = o.resourceVersion
	if st.StartRV == "" {
		st.StartRV = st.ListRV
	}
	// The server ends the watch a little after --duration as well (bounded on both sides);
	// the open timeout covers only the answer: the stream outlives octx (Watch keeps ctx).
	timeout := int((o.duration + 2*watchOpenTimeout).Seconds())
	req := rc.Get().AbsPath(o.path).
		Param("watch", "true").
		Param("allowWatchBookmarks", "true").
		Param("resourceVersion", st.StartRV).
		Param("timeoutSeconds", strconv.Itoa(timeout))
	w, err := req.Watch(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("watch %s on %s: %w", o.path, cfg.Host, err)
	}
	st.OpenSeconds = round3(time.Since(t0).Seconds())
	return w, rec, nil
}

func runWatch(o watchOptions, stderr io.Writer) (watchReport, error) {
	report := watchReport{Scenario: "watch", ContentType: o.contentType, Path: o.path, Run: o.run, Expected: o.expect, LagBySecond: []lagSecond{}}
	stats := &watchStats{run: o.run, seen: map[int]struct{}{}, streams: make([]streamReport, len(o.kubeconfigs))}
	for i := range stats.streams {
		stats.streams[i] = streamReport{RVsIncreasing: true, Errors: []string{}, ContentTypes: []string{}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	watches := make([]watch.Interface, len(o.kubeconfigs))
	recorders := make([]*contentTypeRecorder, len(o.kubeconfigs))
	finish := func() watchReport {
		for _, w := range watches {
			if w != nil {
				w.Stop()
			}
		}
		stats.mu.Lock()
		defer stats.mu.Unlock()
		for i, rec := range recorders {
			if rec != nil {
				stats.streams[i].ContentTypes = rec.contentTypes()
			}
		}
		report.Streams = stats.streams
		report.CPUSeconds = round3(ownCPUSeconds())
		return report
	}
	for i, kc := range o.kubeconfigs {
		w, rec, err := openStream(ctx, o, kc, &stats.streams[i])
		watches[i], recorders[i] = w, rec
		if err != nil {
			return finish(), err
		}
	}
	if err := writeReadyFile(o.readyFile); err != nil {
		return finish(), err
	}
	progress(stderr, "watch: %d stream(s) of %s open (%s), run %q, expecting %d", len(watches), o.path, o.contentType, o.run, o.expect)
	start := time.Now()

	reached := make(chan struct{})
	var reachedOnce sync.Once
	var wg sync.WaitGroup
	stopped := make(chan struct{}) // closed when the watch is being stopped on purpose
	for i, w := range watches {
		wg.Add(1)
		go func(i int, w watch.Interface) {
			defer wg.Done()
			for ev := range w.ResultChan() {
				if n := stats.record(i, ev, time.Now()); o.expect > 0 && n >= o.expect {
					reachedOnce.Do(func() { close(reached) })
				}
			}
			select {
			case <-stopped:
			default:
				stats.mu.Lock()
				stats.streams[i].EndedEarly = true
				stats.mu.Unlock()
			}
		}(i, w)
	}
	allEnded := make(chan struct{})
	go func() { wg.Wait(); close(allEnded) }()

	deadline := time.NewTimer(o.duration)
	defer deadline.Stop()
	tick := time.NewTicker(watchTick)
	defer tick.Stop()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
wait:
	for {
		select {
		case <-sigs:
			report.StopReason = "signal"
			break wait
		case <-reached:
			report.StopReason = "expected"
			break wait
		case <-deadline.C:
			report.StopReason = "duration"
			break wait
		case <-allEnded:
			report.StopReason = "streams-ended"
			break wait
		case <-tick.C:
			if last, ok := stats.idleSince(); ok && o.idle > 0 && time.Since(last) > o.idle {
				report.StopReason = "idle"
				break wait
			}
		}
	}
	report.WatchedSecs = round3(time.Since(start).Seconds())
	close(stopped)
	for _, w := range watches {
		w.Stop()
	}
	cancel()
	wg.Wait()

	stats.mu.Lock()
	report.Counted = len(stats.seen)
	report.Duplicates, report.OtherEvents = stats.duplicates, stats.other
	if n := len(stats.recvNs); n > 0 {
		report.FirstRecvNs, report.LastRecvNs = stats.recvNs[0], stats.recvNs[n-1]
		if span := float64(report.LastRecvNs-report.FirstRecvNs) / 1e9; span > 0 {
			report.EventsPerS = round3(float64(n) / span)
		}
		report.LagBySecond = lagBySecond(stats.recvNs, stats.lagMs)
	}
	report.Lag = summarize(append([]float64{}, stats.lagMs...))
	var csvErr error
	if o.eventsOut != "" {
		csvErr = writeEventsCSV(o.eventsOut, stats.seqs, stats.sentNs, stats.recvNs)
	}
	stats.mu.Unlock()
	out := finish()
	progress(stderr, "watch: %d/%d counted (%s) at %.1f/s, lag p50 %.1f ms p99 %.1f ms max %.1f ms",
		out.Counted, o.expect, out.StopReason, out.EventsPerS, out.Lag.P50Ms, out.Lag.P99Ms, out.Lag.MaxMs)
	errs := []error{csvErr}
	for _, st := range out.Streams {
		if st.EndedEarly {
			errs = append(errs, fmt.Errorf("the watch on %s ended early: %s", st.Server, strings.Join(st.Errors, "; ")))
		}
	}
	return out, errors.Join(errs...)
}

// lagBySecond groups lags by the second (since the first receive) their event was received in.
// recvNs is nearly ordered (streams append under one lock), so the first receive is its minimum.
func lagBySecond(recvNs []int64, lagMs []float64) []lagSecond {
	first := recvNs[0]
	for _, ns := range recvNs {
		first = min(first, ns)
	}
	buckets := map[int][]float64{}
	last := 0
	for i, ns := range recvNs {
		sec := int((ns - first) / int64(time.Second))
		buckets[sec] = append(buckets[sec], lagMs[i])
		last = max(last, sec)
	}
	out := []lagSecond{}
	for sec := 0; sec <= last; sec++ {
		if b := buckets[sec]; len(b) > 0 {
			s := summarize(b)
			out = append(out, lagSecond{Second: sec, Count: s.Count, P50Ms: s.P50Ms, P99Ms: s.P99Ms, MaxMs: s.MaxMs})
		}
	}
	return out
}

// writeEventsCSV writes "seq,a,b" lines, one per index of the three slices.
func writeEventsCSV(path string, seqs []int, a, b []int64) error {
	var buf strings.Builder
	for i, seq := range seqs {
		buf.WriteString(strconv.Itoa(seq))
		buf.WriteByte(',')
		buf.WriteString(strconv.FormatInt(a[i], 10))
		buf.WriteByte(',')
		buf.WriteString(strconv.FormatInt(b[i], 10))
		buf.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(buf.String()), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
