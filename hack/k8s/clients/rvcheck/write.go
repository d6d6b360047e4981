package main

// write: sustained, rate-limited updates of ConfigMaps (bench/union_watch.py's writer).
//
//	rvcheck write --kubeconfig K1[,K2...] --namespace NS1[,NS2...] --rate 1000 --duration 20s
//	              [--objects 300] [--prefix bench-] [--clients 8] [--run TAG] [--log-out F] [--content-type protobuf|json]
//
// Write i (0-based) is due at start + i/rate and goes to object i mod objects; object o lives in
// target o mod len(targets) (kubeconfig and namespace at the same position), so writes spread
// evenly over the targets. Each write is a JSON merge patch of three annotations: the wall clock
// of the send in Unix nanoseconds (taken just before the request goes out), the write's number
// and --run. `clients` workers send the writes, each over its own connection per target; a
// write whose worker is busy waits (the report says how far behind schedule sends fell), and
// writes not handed to a worker by the end of --duration are skipped (writes_skipped: the
// servers, or the machine, could not take the rate). The
// objects must exist (the caller creates them: creating here would put ADDED events in the
// watches under test). --log-out writes one CSV line per successful write,
// "seq,sent_ns,answered_ns" (the PATCH's answer arrived), for joining with a watcher's log.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

const (
	writeRequestTimeout = 10 * time.Second // one PATCH; milliseconds when the server keeps up
	writeDrainTimeout   = 30 * time.Second // after the last due time, for the writes in flight
)

type writeOptions struct {
	commonFlags
	kubeconfigs []string
	namespaces  []string
	prefix      string
	objects     int
	rate        float64
	duration    time.Duration
	clients     int
	run         string
	logOut      string
}

func parseWriteFlags(args []string) (writeOptions, error) {
	var o writeOptions
	var namespaces string
	fs := flag.NewFlagSet("write", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.register(fs)
	fs.StringVar(&namespaces, "namespace", "", "comma-separated namespaces, one per kubeconfig (required)")
	fs.StringVar(&o.prefix, "prefix", "bench-", "ConfigMap names are <prefix><5-digit index>")
	fs.IntVar(&o.objects, "objects", 300, "ConfigMaps written, spread over the targets")
	fs.Float64Var(&o.rate, "rate", 100, "writes per second, all targets together")
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "how long to write (rate x duration writes)")
	fs.IntVar(&o.clients, "clients", 8, "concurrent workers, each with its own connection per target")
	fs.StringVar(&o.run, "run", "run", "value of the run annotation")
	fs.StringVar(&o.logOut, "log-out", "", "write seq,sent_ns,answered_ns of every successful write to this CSV file")
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	if err := o.validate(); err != nil {
		return o, err
	}
	o.kubeconfigs, o.namespaces = splitNames(o.kubeconfig), splitNames(namespaces)
	switch {
	case len(o.kubeconfigs) == 0 || len(o.kubeconfigs) != len(o.namespaces):
		return o, fmt.Errorf("%w: write: --kubeconfig and --namespace need the same number of entries", errUsage)
	case o.objects < len(o.kubeconfigs) || o.rate <= 0 || o.duration <= 0 || o.clients < 1:
		return o, fmt.Errorf("%w: write: --objects >= targets, --rate, --duration and --clients must be positive", errUsage)
	}
	return o, nil
}

// writeTarget is one (server, namespace) the writes go to.
type writeTarget struct {
	Server    string `json:"server"`
	Namespace string `json:"namespace"`
	Objects   int    `json:"objects"`
	WritesOK  int    `json:"writes_ok"`
	Errors    int    `json:"errors"`
}

type writeReport struct {
	Scenario      string        `json:"scenario"`
	ContentType   string        `json:"content_type"`
	Run           string        `json:"run"`
	Targets       []writeTarget `json:"targets"`
	Clients       int           `json:"clients"`
	RequestedPerS float64       `json:"requested_per_s"`
	Planned       int           `json:"writes_planned"`
	Sent          int           `json:"writes_sent"`
	Skipped       int           `json:"writes_skipped"` // not handed to a worker within --duration
	OK            int           `json:"writes_ok"`
	// AchievedPerS: writes_ok / (last answer - first send), seconds.
	AchievedPerS float64        `json:"achieved_per_s"`
	SendSeconds  float64        `json:"send_seconds"` // first send to last send
	WallSeconds  float64        `json:"wall_seconds"`
	StartedAtNs  int64          `json:"started_at_ns"` // first send, Unix nanoseconds
	EndedAtNs    int64          `json:"ended_at_ns"`   // last answer, Unix nanoseconds
	BehindMs     latencySummary `json:"behind_schedule_ms"`
	PatchMs      latencySummary `json:"patch_round_trip_ms"`
	CPUSeconds   float64        `json:"cpu_seconds"`
	Errors       []apiError     `json:"errors"`
	ErrorsTotal  int            `json:"errors_total"`
	Fatal        string         `json:"fatal,omitempty"`
}

func runWriteCommand(args []string, stderr io.Writer) (any, error) {
	o, err := parseWriteFlags(args)
	if err != nil {
		return nil, err
	}
	report, err := runWrite(o, stderr)
	if err != nil {
		report.Fatal = err.Error()
	}
	return report, err
}

// writeJob is one due write.
type writeJob struct {
	seq int
	due time.Time
}

// writeStats is what the workers measured. Safe for concurrent use.
type writeStats struct {
	mu        sync.Mutex
	behindMs  []float64
	patchMs   []float64
	sent, ok  int
	perTarget []writeTarget
	firstSend time.Time
	lastSend  time.Time
	lastDone  time.Time
	errs      errorLog
	okSeqs    []int   // per successful write
	okSentNs  []int64 // per successful write
	okDoneNs  []int64 // per successful write
}

func (s *writeStats) record(seq, target int, due, sent, done time.Time, err error, subject string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent++
	if s.firstSend.IsZero() || sent.Before(s.firstSend) {
		s.firstSend = sent
	}
	if sent.After(s.lastSend) {
		s.lastSend = sent
	}
	s.behindMs = append(s.behindMs, float64(sent.Sub(due))/1e6)
	if err != nil {
		s.perTarget[target].Errors++
		s.errs.add(newAPIError(subject, "patch", err))
		return
	}
	s.ok++
	s.okSeqs = append(s.okSeqs, seq)
	s.okSentNs = append(s.okSentNs, sent.UnixNano())
	s.okDoneNs = append(s.okDoneNs, done.UnixNano())
	s.perTarget[target].WritesOK++
	s.patchMs = append(s.patchMs, float64(done.Sub(sent))/1e6)
	if done.After(s.lastDone) {
		s.lastDone = done
	}
}

func runWrite(o writeOptions, stderr io.Writer) (writeReport, error) {
	report := writeReport{
		Scenario: "write", ContentType: o.contentType, Run: o.run, Clients: o.clients,
		RequestedPerS: o.rate, Errors: []apiError{},
	}
	stats := &writeStats{perTarget: make([]writeTarget, len(o.kubeconfigs))}
	// clients[w][t]: worker w's clientset for target t.
	clients := make([][]*kubernetes.Clientset, o.clients)
	for t, kc := range o.kubeconfigs {
		stats.perTarget[t] = writeTarget{Namespace: o.namespaces[t], Objects: (o.objects - t + len(o.kubeconfigs) - 1) / len(o.kubeconfigs)}
		for w := range clients {
			cfg, err := benchConfig(kc, o.contentType, "rvcheck-write", true)
			if err != nil {
				return report, err
			}
			stats.perTarget[t].Server = cfg.Host
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return report, fmt.Errorf("build clientset for %s: %w", cfg.Host, err)
			}
			clients[w] = append(clients[w], cs)
		}
	}
	report.Planned = int(o.rate * o.duration.Seconds())
	ctx, cancel := context.WithTimeout(context.Background(), o.duration+writeDrainTimeout)
	defer cancel()

	jobs := make(chan writeJob, o.clients)
	var wg sync.WaitGroup
	for w := 0; w < o.clients; w++ {
		wg.Add(1)
		go func(mine []*kubernetes.Clientset) {
			defer wg.Done()
			for job := range jobs {
				object := job.seq % o.objects
				target := object % len(o.kubeconfigs)
				name := fmt.Sprintf("%s%05d", o.prefix, object)
				sent := time.Now()
				patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
					annotationSentNs: strconv.FormatInt(sent.UnixNano(), 10),
					annotationSeq:    strconv.Itoa(job.seq),
					annotationRun:    o.run,
				}}})
				rctx, rcancel := context.WithTimeout(ctx, writeRequestTimeout)
				_, err := mine[target].CoreV1().ConfigMaps(o.namespaces[target]).Patch(rctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
				rcancel()
				stats.record(job.seq, target, job.due, sent, time.Now(), err, o.namespaces[target]+"/"+name)
			}
		}(clients[w])
	}

	progress(stderr, "write: %d writes at %.0f/s over %d objects in %v, %d clients", report.Planned, o.rate, o.objects, o.kubeconfigs, o.clients)
	start := time.Now()
	end := start.Add(o.duration)
	interval := time.Duration(float64(time.Second) / o.rate)
	stop := time.NewTimer(o.duration)
	defer stop.Stop()
dispatch:
	for seq := 0; seq < report.Planned; seq++ {
		due := start.Add(time.Duration(seq) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		if time.Now().After(end) {
			break
		}
		select {
		case jobs <- writeJob{seq: seq, due: due}:
		case <-stop.C:
			break dispatch
		case <-ctx.Done():
			break dispatch
		}
	}
	close(jobs)
	wg.Wait()

	stats.mu.Lock()
	defer stats.mu.Unlock()
	report.Targets = stats.perTarget
	report.Sent, report.OK = stats.sent, stats.ok
	report.Skipped = report.Planned - report.Sent
	report.WallSeconds = round3(time.Since(start).Seconds())
	if !stats.firstSend.IsZero() {
		report.StartedAtNs = stats.firstSend.UnixNano()
		report.SendSeconds = round3(stats.lastSend.Sub(stats.firstSend).Seconds())
	}
	if !stats.lastDone.IsZero() {
		report.EndedAtNs = stats.lastDone.UnixNano()
		if window := stats.lastDone.Sub(stats.firstSend).Seconds(); window > 0 {
			report.AchievedPerS = round3(float64(stats.ok) / window)
		}
	}
	report.BehindMs = summarize(stats.behindMs)
	report.PatchMs = summarize(stats.patchMs)
	report.Errors, report.ErrorsTotal = stats.errs.snapshot()
	report.CPUSeconds = round3(ownCPUSeconds())
	if o.logOut != "" {
		if err := writeEventsCSV(o.logOut, stats.okSeqs, stats.okSentNs, stats.okDoneNs); err != nil {
			return report, err
		}
	}
	progress(stderr, "write: %d/%d ok at %.1f/s, %d skipped, %d errors, behind schedule p99 %.1f ms",
		report.OK, report.Planned, report.AchievedPerS, report.Skipped, report.ErrorsTotal, report.BehindMs.P99Ms)
	return report, nil
}
