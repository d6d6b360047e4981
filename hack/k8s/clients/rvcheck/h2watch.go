package main

// h2watch: many watches of one client-go process over ONE HTTP/2 connection (the way a kubelet,
// or a controller with many informers, shares its transport), every event delivered, and one
// stalled stream not delaying the others.
//
//	rvcheck h2watch --kubeconfig K --nodes n1,n2,... [--pods-per-node=true] [--watches N]
//	                [--per-connection 100] [--consistent-list] [--duration 60s]
//	                [--expect-events E] [--slow-stream] [--stream-window 65536]
//	                [--watch-timeout D] [--ready-file F] [--content-type protobuf|json]
//	                [--lag-out F]
//
// The process builds ONE rest.Config and ONE *http.Client (rest.HTTPClientFor) and hands that
// client to kubernetes.NewForConfigAndClient, so every request goes through one http.Transport:
// client-go's own (TLS with ALPN h2, x/net/http2 with its ping settings). Its Dial counts the TCP
// connections actually dialed, its Wrap records the protocol of every answer (resp.Proto), and
// its HTTP/2 settings carry --stream-window as the receive window of every stream
// (http.HTTP2Config.MaxReceiveBufferPerStream, which x/net/http2 reads when it makes a
// connection).
//
// Watch i is, in turn for each name of --nodes, a watch of that Node by name
// (fieldSelector=metadata.name=<n>) and, with --pods-per-node (the default), a watch of the pods
// bound to it in every namespace (fieldSelector=spec.nodeName=<n>); --watches N (default: one
// round, 1 or 2 per node) goes round the names again as often as it takes. Each first LISTs
// with its selector as client-go's reflector does first, resourceVersion=0 (served from the
// watch cache; --consistent-list: resourceVersion unset, a consistent read), and watches from
// the list's resourceVersion with allowWatchBookmarks, through the typed clientset
// (CoreV1().Nodes().Watch, CoreV1().Pods("").Watch), so client-go's decoder reads every stream.
//
// Go's transport starts one dial per request that finds no connection with a free stream
// (x/net/http2 without StrictMaxConcurrentStreams), and closes the surplus once they turn out
// to be HTTP/2: 4,000 watches opened 32 at a time against 100 streams per connection dialed 355
// connections. So the watches open in batches of --per-connection (which should be the server's
// SETTINGS_MAX_CONCURRENT_STREAMS: 100 for kube-apiserver and partition-proxy by default): the
// batch's first watch alone (its LIST finds every connection full and dials the next one), then
// its other watches h2watchOpenParallel at a time. Each opening goroutine holds one stream at a
// time (client-go closes the LIST's body, which waits until x/net/http2 has forgotten its
// stream, before it sends the watch), so a batch never needs more than --per-connection streams
// and W watches dial ceil(W / --per-connection) connections (one more for --slow-stream when
// the last is full). tcp_connections_dialed counts every dial, tcp_connections_closed the
// connections closed while the scenario ran (a surplus dial, a lost connection).
//
// An event's delivery lag is its receive time minus the wall clock (Unix ns) that whoever
// modified the object stamped in its annotation h2watch.partition-proxy.io/sent-ns (same
// machine, same clock); it counts once per distinct stamp and object on each watch, so an
// unrelated update of an object does not count its old stamp again.
//
// --slow-stream opens one more watch, a raw GET of the first node's watch URL through the same
// *http.Client, and never reads its body while the scenario runs: once the server has filled
// that stream's window (--stream-window bytes), it can write nothing more to it. At the end the
// body is read for up to h2watchSlowDrain: the error it ends with says what the server did to
// the stream meanwhile (reset: "stream error: ... CANCEL; received from peer"; ended: it closed
// the watch normally; open: it was still streaming).
//
// The scenario ends at --duration (counted from the moment every watch is open; --ready-file
// is written then), once every watch has seen --expect-events events that are not bookmarks
// (ADDED, MODIFIED, DELETED), when every watch has ended, or on SIGTERM/SIGINT (a caller that
// cannot know the duration beforehand: the report is written as at the others).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

const (
	// annotationH2SentNs is the wall clock (Unix ns) of the modification that carries it.
	annotationH2SentNs = "h2watch.partition-proxy.io/sent-ns"
	// h2watchOpenParallel bounds the watches of a batch being opened at once (LIST + watch
	// answer each).
	h2watchOpenParallel = 64
	// h2watchSlowDrain bounds the final read of the slow stream.
	h2watchSlowDrain = 2 * time.Second
	// h2watchMaxListed caps the watches that ended early listed in the report.
	h2watchMaxListed = 20
	// Kinds of watch.
	h2KindNode = "node"
	h2KindPods = "pods"
)

// h2watchOptions are the flags of h2watch.
type h2watchOptions struct {
	commonFlags
	nodes          []string
	podsPerNode    bool
	watches        int
	perConnection  int
	consistentList bool
	duration       time.Duration
	expectEvents   int
	slowStream     bool
	streamWindow   int
	watchTimeout   time.Duration
	readyFile      string
	lagOut         string
}

// runH2WatchCommand is the h2watch subcommand.
func runH2WatchCommand(args []string, stderr io.Writer) (any, error) {
	o, err := parseH2WatchFlags(args)
	if err != nil {
		return nil, err
	}
	return runH2Watch(o, stderr)
}

// parseH2WatchFlags parses the h2watch command line.
func parseH2WatchFlags(args []string) (h2watchOptions, error) {
	var o h2watchOptions
	var nodes string
	fs := o.flagSet("h2watch")
	fs.StringVar(&nodes, "nodes", "", "comma-separated node names to watch (required)")
	fs.BoolVar(&o.podsPerNode, "pods-per-node", true, "watch each node's pods (spec.nodeName) besides the Node itself")
	fs.IntVar(&o.watches, "watches", 0, "watches to open, going round the node names (0: one round)")
	fs.IntVar(&o.perConnection, "per-connection", 100, "watches opened per batch: the server's SETTINGS_MAX_CONCURRENT_STREAMS, so that each batch fills one connection")
	fs.BoolVar(&o.consistentList, "consistent-list", false, "LIST with resourceVersion unset (a consistent read) instead of resourceVersion=0 as client-go's reflector")
	fs.DurationVar(&o.duration, "duration", 60*time.Second, "stop after this long (from the moment every watch is open)")
	fs.IntVar(&o.expectEvents, "expect-events", 0, "stop once every watch saw this many events other than bookmarks (0: no count limit)")
	fs.BoolVar(&o.slowStream, "slow-stream", false, "hold one more node watch whose body is never read")
	fs.IntVar(&o.streamWindow, "stream-window", 65536, "HTTP/2 receive window of every stream, bytes (MaxReceiveBufferPerStream)")
	fs.StringVar(&o.readyFile, "ready-file", "", "write this file once every watch is open")
	fs.StringVar(&o.lagOut, "lag-out", "", "write every lag sample to this file, one line each: receive time (Unix ns),lag (ms)")
	fs.DurationVar(&o.watchTimeout, "watch-timeout", 0, "timeoutSeconds of every watch (0: --duration + 60s); opening many watches takes time, and the first opened must outlive the last")
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	if err := o.validate(); err != nil {
		return o, err
	}
	o.nodes = splitNames(nodes)
	perNode := 1
	if o.podsPerNode {
		perNode = 2
	}
	if o.watches == 0 {
		o.watches = perNode * len(o.nodes)
	}
	switch {
	case len(o.nodes) == 0:
		return o, fmt.Errorf("%w: h2watch: --nodes is required", errUsage)
	case o.watches < 1 || o.perConnection < 1 || o.duration <= 0 || o.expectEvents < 0 || o.watchTimeout < 0:
		return o, fmt.Errorf("%w: h2watch: --watches, --per-connection and --duration must be positive, --expect-events not negative", errUsage)
	case o.streamWindow < 1 || o.streamWindow > 1<<31-1:
		return o, fmt.Errorf("%w: h2watch: --stream-window must be between 1 and 2^31-1", errUsage)
	}
	return o, nil
}

// listRV is the resourceVersion of every LIST: "0" as client-go's reflector first asks (the
// watch cache answers), "" with --consistent-list.
func (o h2watchOptions) listRV() string {
	if o.consistentList {
		return ""
	}
	return "0"
}

// h2watchSpec is what watch i watches.
type h2watchSpec struct {
	kind string // h2KindNode or h2KindPods
	node string
}

// h2watchSpecs lists the watches of o: per node name its Node, then (podsPerNode) its pods,
// round after round until there are o.watches.
func h2watchSpecs(o h2watchOptions) []h2watchSpec {
	kinds := []string{h2KindNode}
	if o.podsPerNode {
		kinds = append(kinds, h2KindPods)
	}
	specs := make([]h2watchSpec, o.watches)
	for i := range specs {
		specs[i] = h2watchSpec{kind: kinds[i%len(kinds)], node: o.nodes[i/len(kinds)%len(o.nodes)]}
	}
	return specs
}

// h2watchStream is what one watch saw.
type h2watchStream struct {
	Name        string           `json:"name"` // node/<n> or pods/<n>, #<round> from the second round on
	ListRV      string           `json:"list_rv"`
	OpenMs      float64          `json:"open_ms"` // LIST + the watch's answer
	Events      watchEventCounts `json:"events"`
	FirstRecvNs int64            `json:"first_receive_ns"` // any event, bookmarks included; 0: none
	LastRecvNs  int64            `json:"last_receive_ns"`
	EndedEarly  bool             `json:"ended_early"` // the stream closed before the scenario stopped it
	Errors      []string         `json:"errors"`
}

// nonBookmark counts the events of w that are ADDED, MODIFIED or DELETED.
func (w *h2watchStream) nonBookmark() int {
	return w.Events.Added + w.Events.Modified + w.Events.Deleted
}

// plus returns the sum of two event counts.
func (c watchEventCounts) plus(o watchEventCounts) watchEventCounts {
	return watchEventCounts{
		Added: c.Added + o.Added, Modified: c.Modified + o.Modified, Deleted: c.Deleted + o.Deleted,
		Bookmark: c.Bookmark + o.Bookmark, Error: c.Error + o.Error,
	}
}

// h2slowStreamReport is the outcome of --slow-stream.
type h2slowStreamReport struct {
	Opened      bool    `json:"opened"`
	Path        string  `json:"path"`
	Status      int     `json:"status"`
	Proto       string  `json:"proto"`
	HeldSeconds float64 `json:"held_seconds"` // from its answer to the final read
	// Outcome: reset (the read ended with a stream error: the server reset it), ended (the
	// server ended the watch normally), open (still streaming at the end of the final read),
	// error (anything else, or it did not open).
	Outcome      string `json:"outcome"`
	Error        string `json:"error"`
	ResetCode    string `json:"reset_code"`    // of the stream error (reset), e.g. CANCEL
	BytesDrained int64  `json:"bytes_drained"` // by the final read: what was buffered, then whatever came
}

// h2watchReport is the JSON report of h2watch.
type h2watchReport struct {
	Scenario     string                      `json:"scenario"`
	ContentType  string                      `json:"content_type"`
	Server       string                      `json:"server"`
	Nodes        int                         `json:"nodes"`
	StreamWindow int                         `json:"stream_window"`
	Requested    int                         `json:"watches_requested"`
	PerConn      int                         `json:"per_connection"`        // --per-connection: watches opened per batch
	ListRV       string                      `json:"list_resource_version"` // of each LIST: "0", or "" (--consistent-list)
	Opened       int                         `json:"watches_opened"`
	OpenSeconds  float64                     `json:"open_seconds"` // opening every watch (and the slow stream)
	OpenMs       latencySummary              `json:"open_ms"`      // per watch: LIST + the watch's answer
	TCPDialed    int64                       `json:"tcp_connections_dialed"`
	TCPClosed    int64                       `json:"tcp_connections_closed"` // while the scenario ran (a surplus dial, a lost connection)
	Protocols    map[string]int              `json:"protocols"`              // resp.Proto of every answer: count
	Expected     int                         `json:"expect_events"`
	Events       watchEventCounts            `json:"events"`
	EventsByKind map[string]watchEventCounts `json:"events_by_kind"`
	// MinEvents: the fewest events other than bookmarks any watch saw; Reached: the watches
	// that saw --expect-events of them.
	MinEvents   int                       `json:"min_events_per_watch"`
	Reached     int                       `json:"watches_reached_expected"`
	FirstRecvNs int64                     `json:"first_receive_ns"`
	LastRecvNs  int64                     `json:"last_receive_ns"`
	EndedEarly  []h2watchStream           `json:"ended_early"` // the first h2watchMaxListed
	EndedEarlyN int                       `json:"ended_early_total"`
	Lag         latencySummary            `json:"lag_ms"`
	LagByKind   map[string]latencySummary `json:"lag_ms_by_kind"`
	LagBySecond []lagSecond               `json:"lag_by_second"`
	SlowStream  *h2slowStreamReport       `json:"slow_stream"` // null without --slow-stream
	Watches     []h2watchStream           `json:"watches"`
	StopReason  string                    `json:"stop_reason"` // expected | duration | watches-ended | signal
	WatchedSecs float64                   `json:"watched_seconds"`
	CPUSeconds  float64                   `json:"cpu_seconds"`
	Fatal       string                    `json:"fatal,omitempty"`
}

// connCounter counts the TCP connections a transport dials and how many of them closed.
type connCounter struct {
	dialer net.Dialer
	dialed atomic.Int64
	closed atomic.Int64
}

// DialContext dials as net.Dialer does and counts the connection.
func (c *connCounter) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := c.dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c.dialed.Add(1)
	return &countedConn{Conn: conn, counter: c}, nil
}

// countedConn counts its first Close in its connCounter.
type countedConn struct {
	net.Conn
	counter *connCounter
	once    sync.Once
}

// Close closes the connection.
func (c *countedConn) Close() error {
	c.once.Do(func() { c.counter.closed.Add(1) })
	return c.Conn.Close()
}

// protoRecorder counts the protocol of every answer (resp.Proto). Safe for concurrent use.
type protoRecorder struct {
	next   http.RoundTripper
	mu     sync.Mutex
	protos map[string]int
}

// RoundTrip sends req through the next round tripper and counts the answer's protocol.
func (r *protoRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err == nil {
		r.mu.Lock()
		r.protos[resp.Proto]++
		r.mu.Unlock()
	}
	return resp, err
}

// counts returns a copy of the counts.
func (r *protoRecorder) counts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.protos))
	for p, n := range r.protos {
		out[p] = n
	}
	return out
}

// httpTransportOf finds the *http.Transport under client-go's wrappers (its transport cache
// wraps the one it builds).
func httpTransportOf(rt http.RoundTripper) (*http.Transport, bool) {
	for {
		switch t := rt.(type) {
		case *http.Transport:
			return t, true
		case utilnet.RoundTripperWrapper:
			rt = t.WrappedRoundTripper()
		default:
			return nil, false
		}
	}
}

// h2client is the one client of the process: every watch goes through its *http.Client.
type h2client struct {
	cfg   *rest.Config
	http  *http.Client
	cs    *kubernetes.Clientset
	conns *connCounter
	proto *protoRecorder
}

// newH2Client builds the process's only rest.Config, *http.Client and clientset, with the
// connection counter, the protocol recorder and the per-stream receive window of o.
func newH2Client(o h2watchOptions) (*h2client, error) {
	cfg, err := benchConfig(o.kubeconfig, o.contentType, "rvcheck-h2watch", false)
	if err != nil {
		return nil, err
	}
	c := &h2client{
		cfg:   cfg,
		conns: &connCounter{dialer: net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}},
		proto: &protoRecorder{protos: map[string]int{}},
	}
	cfg.Dial = c.conns.DialContext
	var wrapErr error
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		if t, ok := httpTransportOf(rt); ok {
			// Read by x/net/http2 for each new connection: none exists yet.
			t.HTTP2 = &http.HTTP2Config{MaxReceiveBufferPerStream: o.streamWindow}
		} else {
			wrapErr = fmt.Errorf("client-go's transport is a %T, not an *http.Transport: cannot set the stream window", rt)
		}
		c.proto.next = rt
		return c.proto
	})
	if c.http, err = rest.HTTPClientFor(cfg); err != nil {
		return nil, fmt.Errorf("build HTTP client for %s: %w", cfg.Host, err)
	}
	if wrapErr != nil {
		return nil, wrapErr
	}
	if c.cs, err = kubernetes.NewForConfigAndClient(cfg, c.http); err != nil {
		return nil, fmt.Errorf("build clientset for %s: %w", cfg.Host, err)
	}
	return c, nil
}

// listOptions are the options of spec's LIST at resourceVersion listRV ("0": from the watch
// cache; "": a consistent read).
func (s h2watchSpec) listOptions(listRV string) metav1.ListOptions {
	lo := metav1.ListOptions{FieldSelector: "metadata.name=" + s.node, ResourceVersion: listRV}
	if s.kind == h2KindPods {
		lo.FieldSelector = "spec.nodeName=" + s.node
	}
	return lo
}

// watchOptions are the options of spec's watch from rv, which the server ends after timeout.
func (s h2watchSpec) watchOptions(rv string, timeout time.Duration) metav1.ListOptions {
	lo := s.listOptions(rv)
	secs := int64(timeout.Seconds())
	lo.AllowWatchBookmarks, lo.TimeoutSeconds = true, &secs
	return lo
}

// open LISTs what spec selects at listRV and watches it from the list's resourceVersion; the
// watch lives as long as ctx. timeout is the server-side end of the watch.
func (c *h2client) open(ctx context.Context, spec h2watchSpec, listRV string, timeout time.Duration) (watch.Interface, string, error) {
	octx, cancel := context.WithTimeout(ctx, watchOpenTimeout)
	defer cancel()
	var (
		list metav1.ListInterface
		err  error
	)
	lo := spec.listOptions(listRV)
	if spec.kind == h2KindPods {
		list, err = c.cs.CoreV1().Pods("").List(octx, lo)
	} else {
		list, err = c.cs.CoreV1().Nodes().List(octx, lo)
	}
	if err != nil {
		return nil, "", fmt.Errorf("list %s of %s: %w", spec.kind, spec.node, err)
	}
	rv := list.GetResourceVersion()
	wo := spec.watchOptions(rv, timeout)
	var w watch.Interface
	if spec.kind == h2KindPods {
		w, err = c.cs.CoreV1().Pods("").Watch(ctx, wo)
	} else {
		w, err = c.cs.CoreV1().Nodes().Watch(ctx, wo)
	}
	if err != nil {
		return nil, rv, fmt.Errorf("watch %s of %s: %w", spec.kind, spec.node, err)
	}
	return w, rv, nil
}

// h2watchStats is what every watch received. Safe for concurrent use.
type h2watchStats struct {
	mu       sync.Mutex
	specs    []h2watchSpec
	streams  []h2watchStream
	lastSent []map[types.UID]string // per watch: the last sent-ns stamp seen per object
	expect   int
	reached  int
	done     chan struct{} // closed when every watch reached expect (expect > 0)
	lagMs    []float64     // per lag sample
	lagKind  []string
	recvNs   []int64
}

// newH2WatchStats prepares the stats of specs.
func newH2WatchStats(specs []h2watchSpec, expect int) *h2watchStats {
	s := &h2watchStats{specs: specs, streams: make([]h2watchStream, len(specs)), lastSent: make([]map[types.UID]string, len(specs)), expect: expect, done: make(chan struct{})}
	rounds := map[string]int{}
	for i, sp := range specs {
		name := sp.kind + "/" + sp.node
		if rounds[name]++; rounds[name] > 1 {
			name += "#" + strconv.Itoa(rounds[name])
		}
		s.streams[i] = h2watchStream{Name: name, Errors: []string{}}
		s.lastSent[i] = map[types.UID]string{}
	}
	return s
}

// record takes one event of watch i received at now.
func (s *h2watchStats) record(i int, ev watch.Event, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &s.streams[i]
	if st.FirstRecvNs == 0 {
		st.FirstRecvNs = now.UnixNano()
	}
	st.LastRecvNs = now.UnixNano()
	st.Events.count(ev.Type)
	switch ev.Type {
	case watch.Bookmark:
		return
	case watch.Error:
		if len(st.Errors) < maxStreamEndErrors {
			st.Errors = append(st.Errors, "ERROR event: "+apierrors.FromObject(ev.Object).Error())
		}
		return
	}
	if s.expect > 0 && st.nonBookmark() == s.expect {
		if s.reached++; s.reached == len(s.streams) {
			close(s.done)
		}
	}
	obj, err := meta.Accessor(ev.Object)
	if err != nil {
		return
	}
	stamp := obj.GetAnnotations()[annotationH2SentNs]
	sentNs, err := strconv.ParseInt(stamp, 10, 64)
	if err != nil || s.lastSent[i][obj.GetUID()] == stamp {
		return
	}
	s.lastSent[i][obj.GetUID()] = stamp
	s.lagMs = append(s.lagMs, float64(now.UnixNano()-sentNs)/1e6)
	s.lagKind = append(s.lagKind, s.specs[i].kind)
	s.recvNs = append(s.recvNs, now.UnixNano())
}

// consume records the events of watch i, w, until its stream closes: ended early unless stopped
// is closed by then. Events after stopped is closed are the errors of Stop itself ("response
// body closed") and are not recorded.
func (s *h2watchStats) consume(i int, w watch.Interface, stopped <-chan struct{}) {
	for ev := range w.ResultChan() {
		select {
		case <-stopped:
		default:
			s.record(i, ev, time.Now())
		}
	}
	select {
	case <-stopped:
	default:
		s.mu.Lock()
		s.streams[i].EndedEarly = true
		s.mu.Unlock()
	}
}

// totals returns the events so far and the fewest non-bookmark events of any watch.
func (s *h2watchStats) totals() (total, least int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.streams {
		n := s.streams[i].nonBookmark()
		total += n
		if i == 0 || n < least {
			least = n
		}
	}
	return total, least
}

// fill writes the figures of every watch into report.
func (s *h2watchStats) fill(report *h2watchReport) {
	s.mu.Lock()
	defer s.mu.Unlock()
	report.Watches = append([]h2watchStream{}, s.streams...)
	report.EndedEarly = []h2watchStream{}
	report.EventsByKind = map[string]watchEventCounts{}
	report.Reached = s.reached
	for i, st := range s.streams {
		kind := s.specs[i].kind
		report.Events = report.Events.plus(st.Events)
		report.EventsByKind[kind] = report.EventsByKind[kind].plus(st.Events)
		if n := st.nonBookmark(); i == 0 || n < report.MinEvents {
			report.MinEvents = n
		}
		if st.FirstRecvNs != 0 && (report.FirstRecvNs == 0 || st.FirstRecvNs < report.FirstRecvNs) {
			report.FirstRecvNs = st.FirstRecvNs
		}
		report.LastRecvNs = max(report.LastRecvNs, st.LastRecvNs)
		if st.EndedEarly {
			if report.EndedEarlyN++; len(report.EndedEarly) < h2watchMaxListed {
				report.EndedEarly = append(report.EndedEarly, st)
			}
		}
	}
	byKind := map[string][]float64{}
	for i, ms := range s.lagMs {
		byKind[s.lagKind[i]] = append(byKind[s.lagKind[i]], ms)
	}
	report.LagByKind = map[string]latencySummary{}
	for kind, ms := range byKind {
		report.LagByKind[kind] = summarize(ms)
	}
	report.LagBySecond = []lagSecond{}
	if len(s.recvNs) > 0 {
		report.LagBySecond = lagBySecond(s.recvNs, s.lagMs)
	}
	report.Lag = summarize(append([]float64{}, s.lagMs...))
}

// writeLags writes every lag sample to path, one line each: receive time (Unix ns),lag (ms),
// so that a caller can cut the samples into the windows it made events in.
func (s *h2watchStats) writeLags(path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var buf strings.Builder
	for i, ms := range s.lagMs {
		buf.WriteString(strconv.FormatInt(s.recvNs[i], 10))
		buf.WriteByte(',')
		buf.WriteString(strconv.FormatFloat(ms, 'f', 3, 64))
		buf.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(buf.String()), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// openAll opens the watch of every spec at listRV, in batches of perConn: the batch's first
// alone (it makes the batch's connection), then its others h2watchOpenParallel at a time. It
// stops after the first batch where one failed; watches[i] is nil where opening failed or was
// not tried.
func (c *h2client) openAll(ctx context.Context, specs []h2watchSpec, stats *h2watchStats, listRV string, perConn int, timeout time.Duration) ([]watch.Interface, []float64, error) {
	watches := make([]watch.Interface, len(specs))
	openMs := make([]float64, len(specs))
	errs := make([]error, len(specs))
	openOne := func(i int) {
		t0 := time.Now()
		w, rv, err := c.open(ctx, specs[i], listRV, timeout)
		openMs[i] = round3(float64(time.Since(t0).Microseconds()) / 1e3)
		watches[i], errs[i] = w, err
		stats.mu.Lock()
		stats.streams[i].ListRV, stats.streams[i].OpenMs = rv, openMs[i]
		stats.mu.Unlock()
	}
	sem := make(chan struct{}, h2watchOpenParallel)
	for first := 0; first < len(specs); first += perConn {
		end := min(first+perConn, len(specs))
		openOne(first)
		var wg sync.WaitGroup
		for i := first + 1; i < end && errs[first] == nil; i++ {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				openOne(i)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs[first:end]...); err != nil {
			return watches, openMs[:end], err
		}
	}
	return watches, openMs, nil
}

// h2slowStream is the raw watch of --slow-stream, its body unread until finish.
type h2slowStream struct {
	report h2slowStreamReport
	body   io.ReadCloser
	since  time.Time
}

// openSlowStream GETs the watch of spec (a node) from rv through the process's *http.Client
// and keeps the answer's body unread.
func (c *h2client) openSlowStream(ctx context.Context, spec h2watchSpec, rv string, timeout time.Duration) (*h2slowStream, error) {
	lo := spec.watchOptions(rv, timeout)
	lo.Watch = true
	u := c.cs.CoreV1().RESTClient().Get().Resource("nodes").VersionedParams(&lo, scheme.ParameterCodec).URL()
	s := &h2slowStream{report: h2slowStreamReport{Path: u.RequestURI(), Outcome: "error"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return s, fmt.Errorf("slow stream: %w", err)
	}
	req.Header.Set("Accept", c.cfg.AcceptContentTypes)
	resp, err := c.http.Do(req)
	if err != nil {
		s.report.Error = err.Error()
		return s, fmt.Errorf("slow stream: %w", err)
	}
	s.report.Status, s.report.Proto = resp.StatusCode, resp.Proto
	s.body, s.since = resp.Body, time.Now()
	if resp.StatusCode != http.StatusOK {
		s.report.Error = "status " + resp.Status
		return s, fmt.Errorf("slow stream: GET %s answered %s", s.report.Path, resp.Status)
	}
	s.report.Opened = true
	return s, nil
}

// finish reads the slow stream's body for up to h2watchSlowDrain, closes it and returns what
// that read says the server did to the stream.
func (s *h2slowStream) finish() h2slowStreamReport {
	if s.body == nil {
		return s.report
	}
	s.report.HeldSeconds = round3(time.Since(s.since).Seconds())
	type result struct {
		n   int64
		err error
	}
	read := make(chan result, 1)
	go func() {
		n, err := io.Copy(io.Discard, s.body)
		read <- result{n, err}
	}()
	var r result
	select {
	case r = <-read:
		var se http2.StreamError
		if r.err == nil {
			s.report.Outcome = "ended"
		} else if errors.As(r.err, &se) {
			s.report.Outcome, s.report.ResetCode = "reset", se.Code.String()
		}
	case <-time.After(h2watchSlowDrain):
		s.body.Close()
		r = <-read
		s.report.Outcome, r.err = "open", nil
	}
	s.body.Close()
	s.report.BytesDrained = r.n
	if r.err != nil {
		s.report.Error = r.err.Error()
	}
	return s.report
}

// runH2Watch runs the scenario of o; the report's fatal is the error returned.
func runH2Watch(o h2watchOptions, stderr io.Writer) (report h2watchReport, err error) {
	defer func() {
		if err != nil {
			report.Fatal = err.Error()
		}
	}()
	report = h2watchReport{Scenario: "h2watch", ContentType: o.contentType, Nodes: len(o.nodes), StreamWindow: o.streamWindow,
		Requested: o.watches, PerConn: o.perConnection, ListRV: o.listRV(), Expected: o.expectEvents, Protocols: map[string]int{}}
	specs := h2watchSpecs(o)
	stats := newH2WatchStats(specs, o.expectEvents)
	c, err := newH2Client(o)
	if err != nil {
		stats.fill(&report)
		report.CPUSeconds = round3(ownCPUSeconds())
		return report, err
	}
	report.Server = c.cfg.Host
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The server ends the watches a little after --duration as well (bounded on both sides).
	timeout := o.duration + 2*watchOpenTimeout
	if o.watchTimeout > 0 {
		timeout = o.watchTimeout
	}

	var (
		watches []watch.Interface
		slow    *h2slowStream
		wg      sync.WaitGroup
	)
	stopped := make(chan struct{}) // closed when the scenario stops the watches on purpose
	finish := func() h2watchReport {
		select {
		case <-stopped:
		default:
			close(stopped)
		}
		for _, w := range watches {
			if w != nil {
				w.Stop()
			}
		}
		wg.Wait()
		report.TCPDialed, report.TCPClosed = c.conns.dialed.Load(), c.conns.closed.Load()
		if slow != nil {
			sr := slow.finish()
			report.SlowStream = &sr
		}
		cancel()
		report.Protocols = c.proto.counts()
		stats.fill(&report)
		if o.lagOut != "" {
			if err := stats.writeLags(o.lagOut); err != nil && report.Fatal == "" {
				report.Fatal = err.Error()
			}
		}
		report.CPUSeconds = round3(ownCPUSeconds())
		return report
	}

	progress(stderr, "h2watch: opening %d watch(es) of %d node(s) on %s, %d per connection (%s, stream window %d B, LIST resourceVersion %q)",
		len(specs), len(o.nodes), c.cfg.Host, o.perConnection, o.contentType, o.streamWindow, report.ListRV)
	t0 := time.Now()
	watches, openMs, err := c.openAll(ctx, specs, stats, report.ListRV, o.perConnection, timeout)
	for _, w := range watches {
		if w != nil {
			report.Opened++
		}
	}
	report.OpenMs = summarize(openMs)
	if err == nil && o.slowStream {
		slow, err = c.openSlowStream(ctx, h2watchSpec{kind: h2KindNode, node: o.nodes[0]}, stats.streams[0].ListRV, timeout)
	}
	report.OpenSeconds = round3(time.Since(t0).Seconds())
	if err != nil {
		return finish(), err
	}
	progress(stderr, "h2watch: %d watch(es) open in %.2f s over %d TCP connection(s), %v", report.Opened, report.OpenSeconds, c.conns.dialed.Load(), c.proto.counts())
	if err := writeReadyFile(o.readyFile); err != nil {
		return finish(), err
	}
	start := time.Now()
	wg.Add(len(watches))
	for i, w := range watches {
		go func() { defer wg.Done(); stats.consume(i, w, stopped) }()
	}
	allEnded := make(chan struct{})
	go func() { wg.Wait(); close(allEnded) }()
	tick := time.NewTicker(progressInterval)
	defer tick.Stop()
	deadline := time.After(o.duration)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	for report.StopReason == "" {
		select {
		case <-sigs:
			report.StopReason = "signal"
		case <-stats.done:
			report.StopReason = "expected"
		case <-deadline:
			report.StopReason = "duration"
		case <-allEnded:
			report.StopReason = "watches-ended"
		case <-tick.C:
			total, least := stats.totals()
			progress(stderr, "h2watch: %d event(s), the fewest on one watch %d of %d; %d TCP connection(s) dialed", total, least, o.expectEvents, c.conns.dialed.Load())
		}
	}
	report.WatchedSecs = round3(time.Since(start).Seconds())
	out := finish()
	slowOutcome := "none"
	if out.SlowStream != nil {
		slowOutcome = out.SlowStream.Outcome
	}
	progress(stderr, "h2watch: %s after %.1f s: %d event(s), fewest per watch %d, %d ended early, %d TCP connection(s), lag p50 %.1f ms p99 %.1f ms max %.1f ms, slow stream %s",
		out.StopReason, out.WatchedSecs, out.Events.Added+out.Events.Modified+out.Events.Deleted, out.MinEvents, out.EndedEarlyN, out.TCPDialed,
		out.Lag.P50Ms, out.Lag.P99Ms, out.Lag.MaxMs, slowOutcome)
	if out.EndedEarlyN > 0 {
		names := make([]string, 0, len(out.EndedEarly))
		for _, st := range out.EndedEarly {
			names = append(names, st.Name)
		}
		sort.Strings(names)
		return out, fmt.Errorf("%d watch(es) ended early: %v", out.EndedEarlyN, names)
	}
	return out, nil
}
