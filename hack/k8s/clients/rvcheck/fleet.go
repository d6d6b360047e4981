package main

// fleet: N simulated kubelets in ONE process, each making the requests a kubelet 1.36 makes
// for a registered node that runs no pods (bench/fleet.py).
//
//	rvcheck fleet --kubeconfig K --ca-cert ca.crt --ca-key ca.key
//	              (--nodes-file F | --node-prefix P --count N) [--pin]
//	              [--duration 0] [--ramp 200] [--status-interval 60s] [--lease-interval 10s]
//	              [--report-interval 10s] [--status-file F] [--mark-file F]
//	              [--cpu-profile F] [--content-type protobuf|json]
//
// Each kubelet has its OWN identity, a client certificate CN=system:node:<node>,
// O=system:nodes minted in-process from the federation CA (--ca-cert, --ca-key: PEM, ECDSA or
// RSA), and its OWN connection: its own rest.Config and http.Transport (client-go's, HTTP/2 as
// negotiated by ALPN, protobuf first unless --content-type json), with the kubelet's client
// settings (QPS 50, burst 100, user agent kubelet/v1.36.3). --kubeconfig gives only the server
// URL and the CA that verifies it; its user is ignored. --pin appends /partitions/<rp> to the
// server URL, <rp> being the node name's text before its first "-", as `partition-proxy
// kubeconfig --role kubelet` writes a kubelet's kubeconfig.
//
// What each kubelet sends (what a kubemark hollow kubelet 1.36.3 was seen to send, read from
// the partitions' audit logs, through the proxy and straight; bench/README.md "fleet"):
//   - GET its Node once at start (a registered kubelet's first read);
//   - five reflectors (client-go's cache.Reflector, each with its own store, as the kubelet's
//     informers): its Node (fieldSelector metadata.name=<node>), its pods in every namespace
//     (fieldSelector spec.nodeName=<node>), services (fieldSelector spec.clusterIP!=None),
//     csidrivers.storage.k8s.io and runtimeclasses.node.k8s.io. client-go 1.36 opens each as a
//     streaming list (WatchListClient, on by default: a watch with sendInitialEvents=true
//     ended by the k8s.io/initial-events-end bookmark, LIST only as its fallback), keeps
//     watching with bookmarks, resumes from its last resourceVersion and relists on 410;
//   - its Lease in kube-node-lease renewed every --lease-interval by the kubelet's own lease
//     controller (k8s.io/component-helpers/apimachinery/lease: GET once, then UPDATE from the
//     object the last UPDATE returned with spec.renewTime = now, GET again after a conflict;
//     on repeated failures all the kubelet's connections are closed, as the kubelet's
//     closeAllConns), through a heartbeat client on the same transport (no client rate limit,
//     10 s timeout, as the kubelet's);
//   - a strategic-merge PATCH of nodes/<node>/status every --status-interval, at a random phase,
//     refreshing the lastHeartbeatTime of the kubelet's conditions (a kubelet 1.36 patches when
//     the status changed or nodeStatusReportFrequency, 5 min by default, has passed; 0 turns the
//     patches off).
//
// Kubelets start at --ramp per second. A watch is "open" once it delivers: a streaming list
// after its initial-events-end bookmark, a resumed watch once the server answered it. The fleet
// records per kubelet and watch when it was last (re)established.
//
// Every second, with --status-file, the fleet writes its status (atomically: a temporary file
// renamed) for a caller to poll: kubelets started, kubelets with all five watches open, open
// watches, lease renewals, the oldest lease renewal age, and the mark. --mark-file is read every
// second: a Unix time in ns written there starts a "storm" measurement (the caller then
// restarts the server; it waits until the status file shows the mark, so every reconnection
// comes after it): a kubelet has recovered once each of its watches was (re)opened after the
// mark and all are open; the status file shows how many recovered and, once all did, the
// seconds from the mark to the last one. The report lists every storm.
//
// The run ends on SIGTERM/SIGINT, or --duration after every kubelet had all its watches open
// (0: only on a signal; if they never all open, --duration after fleetOpenTimeout past the
// ramp). ONE JSON report on stdout: phases, per-resource watch counts (opens, streaming lists,
// relists, closes), errors by class, lease renewals ok/failed and their latency, the oldest
// renewal age seen, status patches, a timeline (one point per second), the storms, the
// process's own CPU seconds and RSS.

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	crand "crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	nodev1client "k8s.io/client-go/kubernetes/typed/node/v1"
	storagev1client "k8s.io/client-go/kubernetes/typed/storage/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/component-helpers/apimachinery/lease"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

const (
	fleetUserAgent = "kubelet/v1.36.3 (linux/amd64) kubernetes/fleet"
	// requests/s and requests: the kubelet's --kube-api-qps and --kube-api-burst defaults
	// (since 1.27).
	fleetQPS   = 50
	fleetBurst = 100
	// seconds: the kubelet's nodeLeaseDurationSeconds default.
	fleetLeaseDurationSeconds = 40
	// the kubelet's heartbeat client timeout: min(nodeStatusUpdateFrequency 10 s, lease duration).
	fleetHeartbeatTimeout   = 10 * time.Second
	fleetNodeLeaseNamespace = "kube-node-lease"
	// how often the timeline is sampled, the status file written and the mark file read.
	fleetTick = time.Second
	// validity of the minted node certificates: a run lasts minutes.
	fleetCertValidity = 24 * time.Hour
	// latency samples kept per kind (8 bytes each): 10,000 kubelets renewing every 10 s for
	// 30 minutes make 1.8 M.
	fleetMaxSamples = 2_000_000
	// after the ramp, how long the kubelets may take to open every watch before --duration
	// counts anyway.
	fleetOpenTimeout = 5 * time.Minute
	// bounds a kubelet's GET of its Node and each status PATCH (client-go's own timeouts apply too).
	fleetRequestTimeout = 30 * time.Second
	// TCP connect timeout and keep-alive period of a kubelet's connection: client-go's
	// defaults (transport.DialerStopCh's net.Dialer, 30 s each).
	fleetDialTimeout = 30 * time.Second
	// bounds the wait for the kubelets' goroutines at the end.
	fleetStopTimeout = 10 * time.Second
	// distinct error and warning texts kept with a count (the rest count under "overflow"): one
	// fleet of the 60-minute soak counted 31 classes, before unclassified errors kept their text.
	fleetMaxKeys = 100
)

// fleetResource is one of the five watches of a kubelet.
type fleetResource int

const (
	fleetNodes fleetResource = iota
	fleetPods
	fleetServices
	fleetCSIDrivers
	fleetRuntimeClasses
	fleetResources // how many
)

var fleetResourceNames = [fleetResources]string{
	"nodes", "pods", "services", "csidrivers.storage.k8s.io", "runtimeclasses.node.k8s.io",
}

// fleetConditions are the Node conditions whose heartbeat a status PATCH refreshes (the
// kubelet's own), in the order of $setElementOrder (NetworkUnavailable, set by others, kept).
var fleetConditions = []string{"MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable", "Ready"}

// fleetOptions are the flags of fleet.
type fleetOptions struct {
	commonFlags
	caCert, caKey  string
	nodesFile      string
	nodePrefix     string
	count          int
	pin            bool
	duration       time.Duration
	ramp           float64 // kubelets started per second
	statusInterval time.Duration
	leaseInterval  time.Duration
	reportInterval time.Duration
	statusFile     string
	markFile       string
	cpuProfile     string
	nodes          []string
}

// runFleetCommand is the fleet subcommand.
func runFleetCommand(args []string, stderr io.Writer) (any, error) {
	o, err := parseFleetFlags(args)
	if err != nil {
		return nil, err
	}
	report, err := runFleet(o, stderr)
	if err != nil {
		if report == nil {
			report = &fleetReport{Scenario: "fleet", Kubelets: len(o.nodes)}
		}
		report.Fatal = err.Error()
	}
	return report, err
}

// parseFleetFlags parses the fleet command line and reads --nodes-file.
func parseFleetFlags(args []string) (fleetOptions, error) {
	var o fleetOptions
	fs := o.flagSet("fleet")
	fs.StringVar(&o.caCert, "ca-cert", "", "PEM certificate of the CA that signs the kubelets' client certificates (required)")
	fs.StringVar(&o.caKey, "ca-key", "", "PEM private key of that CA (required)")
	fs.StringVar(&o.nodesFile, "nodes-file", "", "node names, one per line")
	fs.StringVar(&o.nodePrefix, "node-prefix", "", "node names <prefix>00000 ... (with --count)")
	fs.IntVar(&o.count, "count", 0, "kubelets with --node-prefix")
	fs.BoolVar(&o.pin, "pin", false, "append /partitions/<text of the node name before its first '-'> to the server URL")
	fs.DurationVar(&o.duration, "duration", 0, "stop this long after every kubelet had all its watches open (0: on SIGTERM only)")
	fs.Float64Var(&o.ramp, "ramp", 200, "kubelets started per second")
	fs.DurationVar(&o.statusInterval, "status-interval", 60*time.Second, "node status PATCH period of each kubelet (0: none)")
	fs.DurationVar(&o.leaseInterval, "lease-interval", 10*time.Second, "Lease renewal period of each kubelet")
	fs.DurationVar(&o.reportInterval, "report-interval", 10*time.Second, "progress line period on stderr")
	fs.StringVar(&o.statusFile, "status-file", "", "write the status here every second (JSON)")
	fs.StringVar(&o.markFile, "mark-file", "", "read a storm mark (Unix ns) from this file every second")
	fs.StringVar(&o.cpuProfile, "cpu-profile", "", "write the fleet's own CPU profile (pprof) here")
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	if err := o.validate(); err != nil {
		return o, err
	}
	if err := o.validateFleet(); err != nil {
		return o, err
	}
	nodes, err := fleetNodeNames(o.nodesFile, o.nodePrefix, o.count)
	if err != nil {
		return o, err
	}
	o.nodes = nodes
	return o, nil
}

// validateFleet checks the fleet's own flags.
func (o fleetOptions) validateFleet() error {
	switch {
	case o.caCert == "" || o.caKey == "":
		return fmt.Errorf("%w: fleet: --ca-cert and --ca-key are required", errUsage)
	case (o.nodesFile == "") == (o.nodePrefix == ""):
		return fmt.Errorf("%w: fleet: give --nodes-file or --node-prefix with --count", errUsage)
	case o.nodePrefix != "" && o.count < 1:
		return fmt.Errorf("%w: fleet: --count must be positive", errUsage)
	case !(o.ramp > 0) || o.duration < 0 || o.statusInterval < 0 || o.leaseInterval <= 0 || o.reportInterval <= 0:
		return fmt.Errorf("%w: fleet: --ramp, --lease-interval and --report-interval must be positive, --duration and --status-interval not negative", errUsage)
	}
	return nil
}

// fleetNodeNames reads the node names of file (one per line, blank lines skipped), or makes
// count names <prefix>00000, <prefix>00001, ...; duplicates are a usage error.
func fleetNodeNames(file, prefix string, count int) ([]string, error) {
	var names []string
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("%w: fleet: --nodes-file: %v", errUsage, err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				names = append(names, line)
			}
		}
	} else {
		for i := range count {
			names = append(names, fmt.Sprintf("%s%05d", prefix, i))
		}
	}
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if seen[n] {
			return nil, fmt.Errorf("%w: fleet: node %q named twice", errUsage, n)
		}
		seen[n] = true
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: fleet: no node names", errUsage)
	}
	return names, nil
}

// pinnedHost is host with /partitions/<rp> appended, <rp> being node's text before its first "-".
func pinnedHost(host, node string) string {
	rp, _, _ := strings.Cut(node, "-")
	return strings.TrimRight(host, "/") + "/partitions/" + rp
}

// -- identities ----------------------------------------------------------------------------

// fleetCA signs the kubelets' client certificates.
type fleetCA struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// loadFleetCA reads a PEM certificate and its private key (SEC1 EC, PKCS#1 RSA or PKCS#8).
func loadFleetCA(certFile, keyFile string) (*fleetCA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("read --ca-cert: %w", err)
	}
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("--ca-cert %s: no PEM certificate", certFile)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("--ca-cert %s: %w", certFile, err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("read --ca-key: %w", err)
	}
	key, err := parseSigner(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("--ca-key %s: %w", keyFile, err)
	}
	return &fleetCA{cert: cert, key: key}, nil
}

// parseSigner parses the first PEM private key of data.
func parseSigner(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	switch block.Type {
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(block.Bytes)
	case "PRIVATE KEY":
		key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, err
		}
		if s, ok := key.(crypto.Signer); ok {
			return s, nil
		}
		return nil, fmt.Errorf("a %T is not a signing key", key)
	}
	return nil, fmt.Errorf("PEM block %q is not a private key", block.Type)
}

// issueNode returns a new client certificate and key (PEM, ECDSA P-256) for the kubelet of
// node: CN=system:node:<node>, O=system:nodes, as the Node authorizer and NodeRestriction want.
func (ca *fleetCA) issueNode(node string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := crand.Int(crand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(fleetCertValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(crand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// fleetBaseConfig is the rest.Config every kubelet starts from: the server URL and CA of
// kubeconfig (its credentials dropped), the content type and the kubelet's client settings.
func fleetBaseConfig(kubeconfig, contentType string) (*rest.Config, error) {
	loaded, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	cfg := &rest.Config{
		Host: loaded.Host,
		TLSClientConfig: rest.TLSClientConfig{
			CAFile: loaded.CAFile, CAData: loaded.CAData, ServerName: loaded.ServerName, Insecure: loaded.Insecure,
		},
		QPS: fleetQPS, Burst: fleetBurst, UserAgent: fleetUserAgent,
	}
	switch contentType {
	case contentTypeProtobuf:
		cfg.ContentType = runtime.ContentTypeProtobuf
		cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	default:
		cfg.ContentType = runtime.ContentTypeJSON
		cfg.AcceptContentTypes = runtime.ContentTypeJSON
	}
	return cfg, nil
}

// -- shared figures ------------------------------------------------------------------------

// fleetCalls counts one kind of request and keeps its latencies (ms), apart for the requests
// sent before the first storm mark (the steady state). Safe for concurrent use.
type fleetCalls struct {
	mu       sync.Mutex
	ok       int
	failed   int
	ms       []float64
	steadyMs int // how many of ms came before the first mark (ms is in arrival order)
	marked   bool
}

// record counts one request that took d; marked: a storm mark was set when it was sent.
func (c *fleetCalls) record(d time.Duration, ok, marked bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ok {
		c.ok++
	} else {
		c.failed++
	}
	if len(c.ms) < fleetMaxSamples {
		c.ms = append(c.ms, float64(d.Microseconds())/1e3)
		if c.marked = c.marked || marked; !c.marked {
			c.steadyMs = len(c.ms)
		}
	}
}

// fleetCallReport is what fleetCalls report.
type fleetCallReport struct {
	OK        int            `json:"ok"`
	Failed    int            `json:"failed"`
	LatencyMs latencySummary `json:"latency_ms"`
	// BeforeMarkMs: the latencies of the requests sent before the first storm mark.
	BeforeMarkMs latencySummary `json:"latency_before_mark_ms"`
}

// report summarizes c.
func (c *fleetCalls) report() fleetCallReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fleetCallReport{OK: c.ok, Failed: c.failed, LatencyMs: summarize(append([]float64{}, c.ms...)),
		BeforeMarkMs: summarize(append([]float64{}, c.ms[:c.steadyMs]...))}
}

// totals returns the ok and failed counts so far.
func (c *fleetCalls) totals() (ok, failed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ok, c.failed
}

// fleetCounter counts texts (error classes, warnings), keeping at most fleetMaxKeys distinct
// ones. Safe for concurrent use.
type fleetCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

// add counts key once.
func (c *fleetCounter) add(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[string]int{}
	}
	if _, ok := c.counts[key]; !ok && len(c.counts) >= fleetMaxKeys {
		key = "overflow"
	}
	c.counts[key]++
}

// snapshot returns a copy of the counts (never nil).
func (c *fleetCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// total is the sum of the counts.
func (c *fleetCounter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.counts {
		n += v
	}
	return n
}

// HandleWarningHeader counts a server's Warning header (rest.WarningHandler).
func (c *fleetCounter) HandleWarningHeader(code int, agent string, text string) {
	c.add(strconv.Itoa(code) + " " + text)
}

// errorClass names err for counting: "<status code> <reason>" for an API error (a 403 with its
// message, numbers as N: who may not do what tells an RBAC refusal of the proxy's impersonation
// from one of the kubelet's own request), else the kind of transport failure.
func errorClass(err error) string {
	var status apierrors.APIStatus
	switch {
	case errors.As(err, &status):
		s := status.Status()
		if s.Code == http.StatusForbidden {
			return fmt.Sprintf("%d %s: %s", s.Code, s.Reason, forbiddenText(s.Message))
		}
		return fmt.Sprintf("%d %s", s.Code, s.Reason)
	case utilnet.IsConnectionRefused(err):
		return "connection refused"
	case utilnet.IsConnectionReset(err):
		return "connection reset"
	case errors.Is(err, context.DeadlineExceeded) || utilnet.IsTimeout(err):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || utilnet.IsProbableEOF(err):
		return "EOF"
	}
	return "other: " + otherText(err)
}

// classDigits matches the numbers (ports, addresses, ids, node names' indexes) that would make
// every error text distinct.
var classDigits = regexp.MustCompile(`[0-9]+`)

// otherTextMax is the length (bytes) of an unclassified error's text kept as its class: enough
// to tell a TLS alert from a closed HTTP/2 connection. forbiddenTextMax is the length of a 403's
// message kept: enough for the object, the user and the verb ("leases.coordination.k8s.io
// "rp1-fleet-N" is forbidden: User "system:node:rp1-fleet-N" cannot update resource ...").
const (
	otherTextMax     = 80
	forbiddenTextMax = 200
)

// otherText is an unclassified error's own text as its class (classText, otherTextMax bytes).
func otherText(err error) string { return classText(err.Error(), otherTextMax) }

// forbiddenText is a 403's message as part of its class (classText, forbiddenTextMax bytes).
func forbiddenText(message string) string { return classText(message, forbiddenTextMax) }

// classText is text with its numbers replaced by N and cut to max bytes, so that the counts say
// what happened without one key per port or node.
func classText(text string, max int) string {
	text = classDigits.ReplaceAllString(text, "N")
	if len(text) > max {
		text = text[:max]
	}
	return text
}

// fleetWatchCounts counts one resource's watch requests over every kubelet.
type fleetWatchCounts struct {
	streamLists atomic.Int64 // watches with sendInitialEvents=true (a streaming list)
	lists       atomic.Int64 // LISTs (the streaming list's fallback)
	relists     atomic.Int64 // streaming lists and LISTs after the kubelet's first sync
	resumes     atomic.Int64 // watches from a resourceVersion
	opens       atomic.Int64 // transitions to open
	closes      atomic.Int64 // watch streams ended (any reason)
	failures    atomic.Int64 // list or watch requests that failed
}

// fleetWatchReport is what fleetWatchCounts report, plus the watches open at the end.
type fleetWatchReport struct {
	StreamingLists int64 `json:"streaming_lists"`
	Lists          int64 `json:"lists"`
	Relists        int64 `json:"relists"`
	Resumes        int64 `json:"resumes"`
	Opens          int64 `json:"opens"`
	Closes         int64 `json:"closes"`
	Failures       int64 `json:"request_failures"`
	OpenAtEnd      int   `json:"open_at_end"`
	// LastEstablishedAgeMs: per kubelet, how long ago this watch was last (re)established.
	LastEstablishedAgeMs latencySummary `json:"last_established_age_ms"`
}

func (c *fleetWatchCounts) report() fleetWatchReport {
	return fleetWatchReport{
		StreamingLists: c.streamLists.Load(), Lists: c.lists.Load(), Relists: c.relists.Load(),
		Resumes: c.resumes.Load(), Opens: c.opens.Load(), Closes: c.closes.Load(), Failures: c.failures.Load(),
	}
}

// -- one kubelet ---------------------------------------------------------------------------

// fleetStream is the state of one watch of one kubelet (guarded by its kubelet's mu).
type fleetStream struct {
	live   bool // a watch request was answered and its stream has not ended
	synced bool // a list (streaming or not) reached the store at least once
	open   bool // live and delivering: synced, past its initial events
	// lastOpen: when it was last (re)established; openAfterMark: its first (re)establishment
	// at or after the current storm mark (zero: none yet).
	lastOpen, openAfterMark time.Time
}

// fleetKubelet is one simulated kubelet.
type fleetKubelet struct {
	node     string
	fleet    *fleetRun
	main     fleetClients                 // the kubelet's client (QPS 50, burst 100)
	beat     corev1client.CoreV1Interface // its heartbeat client: same transport, no rate limit, 10 s timeout
	leases   kubernetes.Interface         // the heartbeat client's Leases, for the lease controller
	dialer   *connrotation.Dialer         // tracks the kubelet's connections (closed on repeated heartbeat failures)
	started  time.Time
	renewNs  atomic.Int64 // Unix ns of its last successful Lease renewal (0: none yet)
	mu       sync.Mutex
	streams  [fleetResources]fleetStream
	open     int       // streams open
	allOpen  time.Time // first time all were open
	openedIn time.Duration

	// renewUnsure: a renewal since the last answered one got no answer or a 5xx, so the
	// partition may have applied it; the 409 that follows is its echo (leaseMeter)
	renewUnsure atomic.Bool
}

// newKubelet builds the clients of node's kubelet: its own certificate, transport and dialer.
func (f *fleetRun) newKubelet(node string) (*fleetKubelet, error) {
	certPEM, keyPEM, err := f.ca.issueNode(node)
	if err != nil {
		return nil, fmt.Errorf("issue the certificate of %s: %w", node, err)
	}
	k := &fleetKubelet{node: node, fleet: f, started: time.Now()}
	cfg := rest.CopyConfig(f.base)
	if f.o.pin {
		cfg.Host = pinnedHost(cfg.Host, node)
	}
	cfg.CertData, cfg.KeyData = certPEM, keyPEM
	cfg.WarningHandler = &f.warnings
	dial := (&net.Dialer{Timeout: fleetDialTimeout, KeepAlive: fleetDialTimeout}).DialContext
	k.dialer = connrotation.NewDialer(func(ctx context.Context, network, addr string) (net.Conn, error) {
		f.dialed.Add(1)
		return dial(ctx, network, addr)
	})
	cfg.Dial = k.dialer.DialContext // a distinct Dial: a transport of its own, never shared
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("HTTP client of %s: %w", node, err)
	}
	if k.main, err = newFleetClients(cfg, httpClient); err != nil {
		return nil, fmt.Errorf("clients of %s: %w", node, err)
	}
	beatCfg := rest.CopyConfig(cfg)
	beatCfg.QPS, beatCfg.RateLimiter, beatCfg.Timeout = -1, nil, fleetHeartbeatTimeout
	beatHTTP := &http.Client{Transport: &leaseMeter{next: httpClient.Transport, k: k}, Timeout: fleetHeartbeatTimeout}
	if k.beat, err = corev1client.NewForConfigAndClient(beatCfg, beatHTTP); err != nil {
		return nil, fmt.Errorf("heartbeat client of %s: %w", node, err)
	}
	coordination, err := coordinationv1client.NewForConfigAndClient(beatCfg, beatHTTP)
	if err != nil {
		return nil, fmt.Errorf("heartbeat Lease client of %s: %w", node, err)
	}
	k.leases = leaseClientset{coordination: coordination}
	return k, nil
}

// fleetClients are the typed clients a kubelet's watches use, sharing one rate limiter (QPS 50,
// burst 100) and one transport, as the kubelet's clientset does. Only these groups: a full
// clientset per kubelet is some 50 REST clients, hundreds of KiB for each of 10,000 kubelets.
type fleetClients struct {
	core    corev1client.CoreV1Interface
	storage storagev1client.StorageV1Interface
	node    nodev1client.NodeV1Interface
}

// newFleetClients builds the typed clients of cfg over httpClient.
func newFleetClients(cfg *rest.Config, httpClient *http.Client) (fleetClients, error) {
	var c fleetClients
	cfg = rest.CopyConfig(cfg)
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	var err error
	if c.core, err = corev1client.NewForConfigAndClient(cfg, httpClient); err != nil {
		return c, err
	}
	if c.storage, err = storagev1client.NewForConfigAndClient(cfg, httpClient); err != nil {
		return c, err
	}
	c.node, err = nodev1client.NewForConfigAndClient(cfg, httpClient)
	return c, err
}

// leaseClientset is the kubernetes.Interface the lease controller needs: it only asks for
// CoordinationV1().Leases (component-helpers lease.NewController); any other group panics.
type leaseClientset struct {
	kubernetes.Interface
	coordination coordinationv1client.CoordinationV1Interface
}

// CoordinationV1 is the heartbeat client's coordination/v1 client.
func (c leaseClientset) CoordinationV1() coordinationv1client.CoordinationV1Interface {
	return c.coordination
}

// run is the kubelet until ctx ends: GET its Node, its five reflectors, its Lease controller
// and its status patches.
func (k *fleetKubelet) run(ctx context.Context) {
	k.getNode(ctx)
	var wg sync.WaitGroup
	for r := range fleetResources {
		reflector := k.reflector(r)
		wg.Add(1)
		go func() { defer wg.Done(); reflector.RunWithContext(ctx) }()
	}
	leases := lease.NewController(clock.RealClock{}, k.leases, k.node, fleetLeaseDurationSeconds, k.onHeartbeatFailure,
		k.fleet.o.leaseInterval, k.node, fleetNodeLeaseNamespace, k.setNodeOwner)
	wg.Add(1)
	go func() { defer wg.Done(); leases.Run(ctx) }()
	k.patchStatusLoop(ctx)
	wg.Wait()
}

// getNode reads the kubelet's Node once, as a registered kubelet does at start.
func (k *fleetKubelet) getNode(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, fleetRequestTimeout)
	defer cancel()
	t0, marked := time.Now(), k.fleet.markNs.Load() > 0
	_, err := k.main.core.Nodes().Get(rctx, k.node, metav1.GetOptions{})
	k.fleet.gets.record(time.Since(t0), err == nil, marked)
	if err != nil && ctx.Err() == nil {
		k.fleet.failed("get", "nodes", k.node, err)
	}
}

// onHeartbeatFailure closes every connection of the kubelet, as the kubelet's closeAllConns
// does when Lease updates fail repeatedly.
func (k *fleetKubelet) onHeartbeatFailure() {
	k.fleet.connResets.Add(1)
	k.dialer.CloseAll()
}

// setNodeOwner makes the kubelet's Node the owner of its Lease when the Lease has no owner
// (pkg/kubelet/nodelease setNodeOwnerFunc; a GET of the Node only then).
func (k *fleetKubelet) setNodeOwner(l *coordinationv1.Lease) error {
	if len(l.OwnerReferences) > 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), fleetHeartbeatTimeout)
	defer cancel()
	node, err := k.beat.Nodes().Get(ctx, k.node, metav1.GetOptions{})
	if err != nil {
		k.fleet.failed("get", "nodes", k.node, err)
		return nil // the kubelet renews without an owner and tries again next time
	}
	l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: k.node, UID: node.UID}}
	return nil
}

// patchStatusLoop PATCHes the node status every --status-interval from a random phase.
func (k *fleetKubelet) patchStatusLoop(ctx context.Context) {
	interval := k.fleet.o.statusInterval
	if interval <= 0 {
		return
	}
	timer := time.NewTimer(time.Duration(rand.Int64N(int64(interval))))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		k.patchStatus(ctx)
		timer.Reset(interval)
	}
}

// patchStatus sends one heartbeat of the node's conditions (strategic merge, heartbeat client).
func (k *fleetKubelet) patchStatus(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, fleetRequestTimeout)
	defer cancel()
	t0, marked := time.Now(), k.fleet.markNs.Load() > 0
	_, err := k.beat.Nodes().Patch(rctx, k.node, types.StrategicMergePatchType, statusPatch(t0), metav1.PatchOptions{}, "status")
	k.fleet.patches.record(time.Since(t0), err == nil, marked)
	if err != nil && ctx.Err() == nil {
		k.fleet.failed("patch", "nodes/status", k.node, err)
	}
}

// statusPatch is the strategic merge patch of a kubelet's status heartbeat at now: the
// lastHeartbeatTime of every condition it owns (NetworkUnavailable only keeps its place).
func statusPatch(now time.Time) []byte {
	type cond struct {
		Type          string `json:"type"`
		LastHeartbeat string `json:"lastHeartbeatTime,omitempty"`
	}
	order := make([]cond, 0, len(fleetConditions))
	conds := make([]cond, 0, len(fleetConditions))
	stamp := now.UTC().Format(time.RFC3339)
	for _, t := range fleetConditions {
		order = append(order, cond{Type: t})
		if t != "NetworkUnavailable" {
			conds = append(conds, cond{Type: t, LastHeartbeat: stamp})
		}
	}
	body, _ := json.Marshal(map[string]any{"status": map[string]any{"$setElementOrder/conditions": order, "conditions": conds}})
	return body
}

// leaseMeter times the Lease UPDATEs of one kubelet's heartbeat client (the renewals) and counts
// the failures of its other Lease requests (the lease controller's GET or create of its Lease).
type leaseMeter struct {
	next http.RoundTripper
	k    *fleetKubelet
}

// RoundTrip sends req; a PUT of a Lease counts as a renewal, ok when answered 200.
func (m *leaseMeter) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.Contains(req.URL.Path, "/leases") {
		return m.next.RoundTrip(req)
	}
	if req.Method != http.MethodPut {
		resp, err := m.next.RoundTrip(req)
		op := strings.ToLower(req.Method) + " leases: "
		switch {
		case err != nil:
			m.k.fleet.leaseLookupErrs.add(op + errorClass(err))
		case resp.StatusCode >= 300 && resp.StatusCode != http.StatusNotFound: // a 404 GET is answered by a create
			m.k.fleet.leaseLookupErrs.add(fmt.Sprintf("%s%d", op, resp.StatusCode))
		}
		return resp, err
	}
	t0, marked := time.Now(), m.k.fleet.markNs.Load() > 0
	resp, err := m.next.RoundTrip(req)
	ok := err == nil && resp.StatusCode == http.StatusOK
	m.k.fleet.leases.record(time.Since(t0), ok, marked)
	switch {
	case ok:
		m.k.renewNs.Store(time.Now().UnixNano())
		m.k.renewUnsure.Store(false)
	case err != nil:
		m.k.fleet.errs.add("update leases: " + errorClass(err))
		m.k.renewUnsure.Store(true)
	case resp.StatusCode == http.StatusConflict && m.k.renewUnsure.Swap(false):
		// The lease controller sends the same object again after a failure; when the failed
		// one was applied (its answer lost), the partition answers 409, as kube-apiserver
		// straight does, and the controller reads the Lease and renews (component-helpers
		// lease retryUpdateLease). That failure was counted; this is its echo, not a second one.
		m.k.fleet.echoes.add("update leases: 409 after an unanswered renewal")
	default:
		m.k.fleet.errs.add(fmt.Sprintf("update leases: %d", resp.StatusCode))
		switch {
		case resp.StatusCode >= 500: // a 5xx may come after the partition applied it
			m.k.renewUnsure.Store(true)
		case resp.StatusCode != http.StatusTooManyRequests: // a 429 was never sent on
			m.k.renewUnsure.Store(false)
		}
	}
	return resp, err
}

// -- a kubelet's watches -------------------------------------------------------------------

// reflector is the kubelet's reflector of r: a typed ListerWatcher with its selector, a store
// of its own, client-go's defaults (streaming list, bookmarks, resume, relist on 410, backoff).
func (k *fleetKubelet) reflector(r fleetResource) *cache.Reflector {
	store := &fleetStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc), k: k, res: r}
	name := fleetResourceNames[r]
	return cache.NewReflectorWithOptions(&fleetLW{k: k, res: r}, fleetExpectedType(r), store,
		cache.ReflectorOptions{Name: k.node + "/" + name, TypeDescription: name})
}

// fleetExpectedType is the object type of r.
func fleetExpectedType(r fleetResource) runtime.Object {
	switch r {
	case fleetNodes:
		return &corev1.Node{}
	case fleetPods:
		return &corev1.Pod{}
	case fleetServices:
		return &corev1.Service{}
	case fleetCSIDrivers:
		return &storagev1.CSIDriver{}
	}
	return &nodev1.RuntimeClass{}
}

// selected is opts with the kubelet's selector of r.
func (k *fleetKubelet) selected(r fleetResource, opts metav1.ListOptions) metav1.ListOptions {
	switch r {
	case fleetNodes:
		opts.FieldSelector = "metadata.name=" + k.node
	case fleetPods:
		opts.FieldSelector = "spec.nodeName=" + k.node
	case fleetServices:
		opts.FieldSelector = "spec.clusterIP!=None" // the kubelet's service informer (pkg/kubelet/kubelet.go)
	}
	return opts
}

// list LISTs r through the typed client.
func (k *fleetKubelet) list(ctx context.Context, r fleetResource, opts metav1.ListOptions) (runtime.Object, error) {
	opts = k.selected(r, opts)
	switch r {
	case fleetNodes:
		return k.main.core.Nodes().List(ctx, opts)
	case fleetPods:
		return k.main.core.Pods(metav1.NamespaceAll).List(ctx, opts)
	case fleetServices:
		return k.main.core.Services(metav1.NamespaceAll).List(ctx, opts)
	case fleetCSIDrivers:
		return k.main.storage.CSIDrivers().List(ctx, opts)
	}
	return k.main.node.RuntimeClasses().List(ctx, opts)
}

// watch opens the watch of r through the typed client.
func (k *fleetKubelet) watch(ctx context.Context, r fleetResource, opts metav1.ListOptions) (watch.Interface, error) {
	opts = k.selected(r, opts)
	switch r {
	case fleetNodes:
		return k.main.core.Nodes().Watch(ctx, opts)
	case fleetPods:
		return k.main.core.Pods(metav1.NamespaceAll).Watch(ctx, opts)
	case fleetServices:
		return k.main.core.Services(metav1.NamespaceAll).Watch(ctx, opts)
	case fleetCSIDrivers:
		return k.main.storage.CSIDrivers().Watch(ctx, opts)
	}
	return k.main.node.RuntimeClasses().Watch(ctx, opts)
}

// fleetLW is the ListerWatcher of one kubelet's watch of res; it tells the kubelet every
// request and every stream's end. It supports streaming lists (it does not implement
// IsWatchListSemanticsUnSupported).
type fleetLW struct {
	k   *fleetKubelet
	res fleetResource
}

func (lw *fleetLW) List(opts metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), opts)
}

func (lw *fleetLW) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), opts)
}

func (lw *fleetLW) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	lw.k.listing(lw.res)
	obj, err := lw.k.list(ctx, lw.res, opts)
	if err != nil {
		lw.k.requestFailed(ctx, lw.res, "list", err)
	}
	return obj, err
}

func (lw *fleetLW) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	initial := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	w, err := lw.k.watch(ctx, lw.res, opts)
	if err != nil {
		lw.k.requestFailed(ctx, lw.res, "watch", err)
		return nil, err
	}
	lw.k.watchStarted(lw.res, initial)
	return &fleetWatch{Interface: w, stopped: func() { lw.k.watchStopped(lw.res) }}, nil
}

// fleetWatch tells its kubelet when the reflector stops it (the reflector stops every watch
// whose stream ended, and only then).
type fleetWatch struct {
	watch.Interface
	once    sync.Once
	stopped func()
}

func (w *fleetWatch) Stop() {
	w.once.Do(w.stopped)
	w.Interface.Stop()
}

// fleetStore is a reflector's store that tells its kubelet when a list reached it.
type fleetStore struct {
	cache.Store
	k   *fleetKubelet
	res fleetResource
}

func (s *fleetStore) Replace(items []any, rv string) error {
	err := s.Store.Replace(items, rv)
	s.k.replaced(s.res)
	return err
}

// listing counts a LIST of r (the streaming list's fallback).
func (k *fleetKubelet) listing(r fleetResource) {
	c := &k.fleet.counts[r]
	c.lists.Add(1)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.streams[r].synced {
		c.relists.Add(1)
	}
}

// requestFailed counts a failed list or watch request of r (not when the kubelet stops).
func (k *fleetKubelet) requestFailed(ctx context.Context, r fleetResource, op string, err error) {
	if ctx.Err() != nil {
		return
	}
	k.fleet.counts[r].failures.Add(1)
	k.fleet.failed(op, fleetResourceNames[r], k.node, err)
}

// watchStarted: a watch request of r was answered; initial: a streaming list.
func (k *fleetKubelet) watchStarted(r fleetResource, initial bool) {
	c := &k.fleet.counts[r]
	now := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	s := &k.streams[r]
	s.live = true
	if initial {
		c.streamLists.Add(1)
		if s.synced {
			c.relists.Add(1)
		}
		return // open once its initial events reach the store
	}
	c.resumes.Add(1)
	if s.synced {
		k.openLocked(r, now)
	}
}

// replaced: a list of r reached the store (a streaming list past its initial-events-end
// bookmark, or a LIST).
func (k *fleetKubelet) replaced(r fleetResource) {
	now := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.streams[r].synced = true
	if k.streams[r].live {
		k.openLocked(r, now)
	}
}

// watchStopped: the stream of r ended.
func (k *fleetKubelet) watchStopped(r fleetResource) {
	f := k.fleet
	f.counts[r].closes.Add(1)
	k.mu.Lock()
	defer k.mu.Unlock()
	s := &k.streams[r]
	s.live = false
	if !s.open {
		return
	}
	s.open = false
	if k.open == int(fleetResources) {
		f.allOpen.Add(-1)
	}
	k.open--
	f.openWatches.Add(-1)
}

// openLocked marks r open (re-established at now).
func (k *fleetKubelet) openLocked(r fleetResource, now time.Time) {
	f := k.fleet
	s := &k.streams[r]
	s.lastOpen = now
	if mark := f.markNs.Load(); mark > 0 && s.openAfterMark.IsZero() && now.UnixNano() >= mark {
		s.openAfterMark = now
	}
	if s.open {
		return
	}
	s.open = true
	f.counts[r].opens.Add(1)
	f.openWatches.Add(1)
	if k.open++; k.open < int(fleetResources) {
		return
	}
	f.allOpen.Add(1)
	if k.allOpen.IsZero() {
		k.allOpen, k.openedIn = now, now.Sub(k.started)
		f.everAllOpen.Add(1)
	}
}

// resetMark forgets the (re)establishments before mark (Unix ns).
func (k *fleetKubelet) resetMark(mark int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range k.streams {
		if s := &k.streams[i]; s.openAfterMark.UnixNano() < mark {
			s.openAfterMark = time.Time{}
		}
	}
}

// recovery is how long after mark the kubelet had every watch (re)established, if it has
// (all open now, each opened at or after the mark).
func (k *fleetKubelet) recovery(mark int64) (time.Duration, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.open < int(fleetResources) {
		return 0, false
	}
	var last time.Time
	for i := range k.streams {
		t := k.streams[i].openAfterMark
		if t.IsZero() {
			return 0, false
		}
		if t.After(last) {
			last = t
		}
	}
	return last.Sub(time.Unix(0, mark)), true
}

// -- the fleet -----------------------------------------------------------------------------

// fleetRun is the state of one run, shared by every kubelet.
type fleetRun struct {
	o      fleetOptions
	base   *rest.Config
	ca     *fleetCA
	stderr io.Writer
	t0     time.Time

	mu       sync.Mutex
	kubelets []*fleetKubelet // started so far
	rampDone time.Time

	counts                            [fleetResources]fleetWatchCounts
	openWatches, allOpen, everAllOpen atomic.Int64
	dialed, connResets                atomic.Int64
	markNs                            atomic.Int64
	leases, patches, gets             fleetCalls
	errs, reflectorErrs, warnings     fleetCounter
	leaseLookupErrs                   fleetCounter // the lease controller's GET/create of its Lease (not renewals)
	echoes                            fleetCounter // 409s of renewals after an unanswered one (leaseMeter), not in errs
	samples                           *errorLog

	// written by the sampling loop only
	timeline    []fleetPoint
	maxRenewAge float64
	allOpenAt   time.Time // when every kubelet first had all its watches open
	storms      []fleetStorm
	markSeenNs  int64 // Unix ns when the current mark was read
}

// fleetPoint is the status of the fleet at one moment (the status file, and the timeline).
type fleetPoint struct {
	TS          float64 `json:"t_s"` // since the first kubelet started
	TUnixNs     int64   `json:"t_unix_ns"`
	Kubelets    int     `json:"kubelets"`
	Started     int     `json:"started"`
	AllOpen     int64   `json:"kubelets_all_open"`
	EverAllOpen int64   `json:"kubelets_ever_all_open"`
	OpenWatches int64   `json:"open_watches"`
	LeaseOK     int     `json:"lease_renewals_ok"`
	LeaseFailed int     `json:"lease_renewals_failed"`
	// OldestRenewAgeS: the largest (now - last successful renewal) over the kubelets that
	// renewed at least once, seconds.
	OldestRenewAgeS float64 `json:"oldest_renew_age_s"`
	// Renewed: the kubelets that renewed their Lease at least once.
	Renewed    int     `json:"kubelets_renewed"`
	Errors     int     `json:"errors"`
	MarkNs     int64   `json:"mark_ns"`
	Recovered  int     `json:"recovered_since_mark"`
	RecoveredS float64 `json:"all_recovered_s"` // from the mark to the last kubelet recovered; -1 until all did
	// ErrorsByClass: Errors by class ("update leases: 503", ...), in the status file only (a
	// reader that samples it every second sees which failures fell in which second).
	ErrorsByClass map[string]int `json:"errors_by_class,omitempty"`
	// LeaseLookupErrorsByClass: failures of the lease controller's GET (or create) of its Lease,
	// which it falls back to after its updates failed (backoffEnsureLease: retried with up to 7 s
	// of backoff, no renewal until one succeeds); not in Errors, so a Lease can age with no
	// failure counted there. Status file only, as ErrorsByClass.
	LeaseLookupErrorsByClass map[string]int `json:"lease_lookup_errors_by_class,omitempty"`
	// EchoesByClass: the report's Echoes so far (not in Errors). Status file only.
	EchoesByClass map[string]int `json:"echoes_by_class,omitempty"`
}

// fleetStorm is one mark of --mark-file and how the kubelets recovered after it.
type fleetStorm struct {
	MarkUnixNs   int64          `json:"mark_unix_ns"`
	SeenAfterMs  float64        `json:"seen_after_ms"` // when the fleet read the mark
	Kubelets     int            `json:"kubelets"`
	Recovered    int            `json:"recovered"`
	AllRecovered float64        `json:"all_recovered_s"` // -1: not all
	PerKubeletMs latencySummary `json:"per_kubelet_recovery_ms"`
}

// failed counts a failed request: by class, and the first few in full.
func (f *fleetRun) failed(op, resource, node string, err error) {
	f.errs.add(op + " " + resource + ": " + errorClass(err))
	f.samples.add(newAPIError(node, op+" "+resource, err))
}

// handleError counts what client-go reports through utilruntime.HandleError (a reflector's
// "Failed to watch", a watch that ended with an error, ...), without its global 1 ms backoff
// (one process of many kubelets must not serialize their errors).
func (f *fleetRun) handleError(_ context.Context, err error, msg string, _ ...any) {
	f.reflectorErrs.add(msg + ": " + errorClass(err))
}

// runFleet runs the fleet of o until it stops and returns its report.
func runFleet(o fleetOptions, stderr io.Writer) (*fleetReport, error) {
	f := &fleetRun{o: o, stderr: stderr, samples: &errorLog{}}
	var err error
	if f.ca, err = loadFleetCA(o.caCert, o.caKey); err != nil {
		return nil, err
	}
	if f.base, err = fleetBaseConfig(o.kubeconfig, o.contentType); err != nil {
		return nil, err
	}
	if o.cpuProfile != "" {
		stop, err := startCPUProfile(o.cpuProfile)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	klog.SetLogger(logr.Discard()) // thousands of reflectors: errors are counted, not logged
	utilruntime.ErrorHandlers = []utilruntime.ErrorHandler{f.handleError}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	progress(stderr, "fleet: %d kubelet(s) at %s (pinned %v, %s), %.0f/s, lease every %s, status every %s",
		len(o.nodes), f.base.Host, o.pin, o.contentType, o.ramp, o.leaseInterval, o.statusInterval)
	f.t0 = time.Now()
	var wg sync.WaitGroup
	rampDone := make(chan struct{})
	go f.ramp(ctx, &wg, rampDone)
	reason := f.loop(sigs, rampDone)
	watches := f.watchReports(f.started()) // before the kubelets stop
	running := goroutines()
	if mark := f.markNs.Load(); mark > 0 {
		f.storms = append(f.storms, f.storm(mark, f.started()))
	}
	cancel()
	<-rampDone
	stopped := waitGroupTimeout(&wg, fleetStopTimeout)
	report := f.report(reason, watches)
	report.StoppedCleanly, report.GoroutinesRunning = stopped, running
	progress(stderr, "fleet: %s after %.1f s", reason, report.RunSeconds)
	return report, nil
}

// startCPUProfile profiles this process's CPU into path until the returned function is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// waitGroupTimeout waits for wg up to d; false when it did not finish.
func waitGroupTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// ramp starts the kubelets at --ramp per second; closes done after the last (or on ctx end).
func (f *fleetRun) ramp(ctx context.Context, wg *sync.WaitGroup, done chan<- struct{}) {
	defer close(done)
	interval := time.Duration(float64(time.Second) / f.o.ramp)
	next := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for _, node := range f.o.nodes {
		timer.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		next = next.Add(interval)
		k, err := f.newKubelet(node)
		if err != nil {
			f.errs.add("start kubelet: " + err.Error())
			continue
		}
		f.mu.Lock()
		f.kubelets = append(f.kubelets, k)
		f.mu.Unlock()
		wg.Add(1)
		go func() { defer wg.Done(); k.run(ctx) }()
	}
	f.mu.Lock()
	f.rampDone = time.Now()
	f.mu.Unlock()
}

// loop samples every fleetTick until a signal or --duration; returns the stop reason.
func (f *fleetRun) loop(sigs <-chan os.Signal, rampDone <-chan struct{}) string {
	tick := time.NewTicker(fleetTick)
	defer tick.Stop()
	lastProgress := time.Now()
	for {
		select {
		case <-sigs:
			return "signal"
		case <-tick.C:
		}
		p := f.sample()
		if time.Since(lastProgress) >= f.o.reportInterval {
			lastProgress = time.Now()
			progress(f.stderr, "fleet: %d/%d started, %d all open, %d watches open, leases ok %d failed %d, oldest renewal %.1f s ago, %d errors",
				p.Started, p.Kubelets, p.AllOpen, p.OpenWatches, p.LeaseOK, p.LeaseFailed, p.OldestRenewAgeS, p.Errors)
		}
		if f.durationOver(rampDone) {
			return "duration"
		}
	}
}

// durationOver: --duration has passed since every kubelet had all its watches open (or since
// fleetOpenTimeout after the ramp, when they never all did).
func (f *fleetRun) durationOver(rampDone <-chan struct{}) bool {
	if f.o.duration <= 0 {
		return false
	}
	if !f.allOpenAt.IsZero() {
		return time.Since(f.allOpenAt) >= f.o.duration
	}
	select {
	case <-rampDone:
		f.mu.Lock()
		defer f.mu.Unlock()
		return !f.rampDone.IsZero() && time.Since(f.rampDone) >= fleetOpenTimeout+f.o.duration
	default:
		return false
	}
}

// started returns the kubelets started so far.
func (f *fleetRun) started() []*fleetKubelet {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.kubelets
}

// sample takes one timeline point, reads the mark file and writes the status file.
func (f *fleetRun) sample() fleetPoint {
	now := time.Now()
	f.readMark(now)
	kubelets := f.started()
	ok, failed := f.leases.totals()
	p := fleetPoint{
		TS: round3(now.Sub(f.t0).Seconds()), TUnixNs: now.UnixNano(), Kubelets: len(f.o.nodes), Started: len(kubelets),
		AllOpen: f.allOpen.Load(), EverAllOpen: f.everAllOpen.Load(), OpenWatches: f.openWatches.Load(),
		LeaseOK: ok, LeaseFailed: failed, OldestRenewAgeS: oldestRenewAge(kubelets, now), Renewed: renewedOnce(kubelets),
		Errors: f.errs.total(), MarkNs: f.markNs.Load(), RecoveredS: -1,
	}
	if p.MarkNs > 0 {
		st := f.storm(p.MarkNs, kubelets)
		p.Recovered, p.RecoveredS = st.Recovered, st.AllRecovered
	}
	f.maxRenewAge = max(f.maxRenewAge, p.OldestRenewAgeS)
	if f.allOpenAt.IsZero() && int(p.EverAllOpen) == len(f.o.nodes) {
		f.allOpenAt = now
		progress(f.stderr, "fleet: all %d kubelet(s) have all their watches open, %.2f s after the first started", p.Kubelets, p.TS)
	}
	f.timeline = append(f.timeline, p)
	status := p
	status.ErrorsByClass = f.errs.snapshot()
	status.LeaseLookupErrorsByClass = f.leaseLookupErrs.snapshot()
	status.EchoesByClass = f.echoes.snapshot()
	if err := writeStatusFile(f.o.statusFile, status); err != nil {
		f.errs.add("status file: " + err.Error())
	}
	return p
}

// oldestRenewAge is the largest now - last renewal (s) over kubelets that renewed at least once.
func oldestRenewAge(kubelets []*fleetKubelet, now time.Time) float64 {
	oldest := 0.0
	for _, k := range kubelets {
		if ns := k.renewNs.Load(); ns > 0 {
			oldest = max(oldest, now.Sub(time.Unix(0, ns)).Seconds())
		}
	}
	return round3(oldest)
}

// renewedOnce counts the kubelets that renewed their Lease at least once.
func renewedOnce(kubelets []*fleetKubelet) int {
	n := 0
	for _, k := range kubelets {
		if k.renewNs.Load() > 0 {
			n++
		}
	}
	return n
}

// writeStatusFile writes p as JSON to path through a temporary file renamed over it (a reader
// never sees half a document); nothing when path is empty.
func writeStatusFile(path string, p fleetPoint) error {
	if path == "" {
		return nil
	}
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// readMark reads --mark-file: a new Unix ns time there closes the previous storm (if any) and
// starts measuring recovery from it.
func (f *fleetRun) readMark(now time.Time) {
	if f.o.markFile == "" {
		return
	}
	data, err := os.ReadFile(f.o.markFile)
	if err != nil {
		return // not written yet
	}
	mark, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil || mark <= 0 || mark == f.markNs.Load() {
		return
	}
	if old := f.markNs.Load(); old > 0 {
		f.storms = append(f.storms, f.storm(old, f.started()))
	}
	f.markNs.Store(mark)
	f.markSeenNs = now.UnixNano()
	for _, k := range f.started() {
		k.resetMark(mark)
	}
	progress(f.stderr, "fleet: storm mark %d read %.0f ms after it", mark, float64(now.UnixNano()-mark)/1e6)
}

// storm measures the recovery of kubelets since mark.
func (f *fleetRun) storm(mark int64, kubelets []*fleetKubelet) fleetStorm {
	st := fleetStorm{MarkUnixNs: mark, Kubelets: len(f.o.nodes), AllRecovered: -1, SeenAfterMs: float64(f.markSeenNs-mark) / 1e6}
	var ms []float64
	for _, k := range kubelets {
		if d, ok := k.recovery(mark); ok {
			ms = append(ms, float64(d.Microseconds())/1e3)
		}
	}
	st.Recovered = len(ms)
	st.PerKubeletMs = summarize(ms)
	if st.Recovered == st.Kubelets {
		st.AllRecovered = round3(st.PerKubeletMs.MaxMs / 1e3)
	}
	return st
}

// -- the report ----------------------------------------------------------------------------

// fleetReport is the JSON report of fleet.
type fleetReport struct {
	Scenario          string                      `json:"scenario"`
	ContentType       string                      `json:"content_type"`
	Server            string                      `json:"server"`
	Pinned            bool                        `json:"pinned"`
	UserAgent         string                      `json:"user_agent"`
	Kubelets          int                         `json:"kubelets"`
	RampPerS          float64                     `json:"ramp_per_s"`
	LeaseIntervalS    float64                     `json:"lease_interval_s"`
	StatusIntervalS   float64                     `json:"status_interval_s"`
	StartedUnixNs     int64                       `json:"started_unix_ns"`
	Start             fleetStartReport            `json:"start"`
	Watches           map[string]fleetWatchReport `json:"watches"`
	Leases            fleetLeaseReport            `json:"leases"`
	StatusPatches     fleetCallReport             `json:"status_patches"`
	NodeGets          fleetCallReport             `json:"node_gets"`
	Errors            map[string]int              `json:"errors"`              // "<op> <resource>: <class>" -> count
	ErrorSamples      []apiError                  `json:"error_samples"`       // the first few in full
	ReflectorErrors   map[string]int              `json:"reflector_errors"`    // what client-go reported (utilruntime.HandleError)
	LeaseLookupErrors map[string]int              `json:"lease_lookup_errors"` // the lease controller's GETs/creates of its Lease that failed
	Echoes            map[string]int              `json:"echoes"`              // renewals answered 409 after an unanswered one was applied: its echo (that failure is in Errors)
	Warnings          map[string]int              `json:"warnings"`            // Warning headers of the server
	TCPDialed         int64                       `json:"tcp_connections_dialed"`
	ConnResets        int64                       `json:"connection_resets"` // repeated heartbeat failures: every connection of a kubelet closed
	Storms            []fleetStorm                `json:"storms"`
	Timeline          []fleetPoint                `json:"timeline"`
	StopReason        string                      `json:"stop_reason"` // signal | duration
	StoppedCleanly    bool                        `json:"stopped_cleanly"`
	RunSeconds        float64                     `json:"run_seconds"`
	CPUSeconds        float64                     `json:"cpu_seconds"`
	RSSBytes          int64                       `json:"rss_bytes"`
	MaxRSSBytes       int64                       `json:"max_rss_bytes"`
	GoroutinesRunning int                         `json:"goroutines_running"` // before the kubelets stopped
	GoroutinesAtStop  int                         `json:"goroutines_at_stop"`
	Fatal             string                      `json:"fatal,omitempty"`
}

// fleetStartReport is the start phase: the ramp and the time until every watch was open.
type fleetStartReport struct {
	RampS    float64 `json:"ramp_s"`     // first kubelet started -> last started
	AllOpenS float64 `json:"all_open_s"` // first kubelet started -> every kubelet had all its watches open; -1: never
	AllOpen  int64   `json:"kubelets_ever_all_open"`
	// PerKubeletMs: per kubelet, its start -> all its watches open.
	PerKubeletMs latencySummary `json:"per_kubelet_open_ms"`
}

// fleetLeaseReport is the Lease renewals (UPDATEs) of every kubelet.
type fleetLeaseReport struct {
	fleetCallReport
	// OldestRenewAgeS: the largest age of a kubelet's last successful renewal seen in any
	// sample (once per second), seconds; OldestRenewAgeAtStopS: at the last sample.
	OldestRenewAgeS       float64 `json:"oldest_renew_age_s"`
	OldestRenewAgeAtStopS float64 `json:"oldest_renew_age_at_stop_s"`
	NeverRenewed          int     `json:"kubelets_never_renewed"`
}

// report builds the report once the loop has stopped; watches were taken before the kubelets
// stopped.
func (f *fleetRun) report(reason string, watches map[string]fleetWatchReport) *fleetReport {
	kubelets := f.started()
	r := &fleetReport{
		Scenario: "fleet", ContentType: f.o.contentType, Server: f.base.Host, Pinned: f.o.pin, UserAgent: fleetUserAgent,
		Kubelets: len(f.o.nodes), RampPerS: f.o.ramp, LeaseIntervalS: f.o.leaseInterval.Seconds(),
		StatusIntervalS: f.o.statusInterval.Seconds(), StartedUnixNs: f.t0.UnixNano(),
		Start: f.startReport(kubelets), Watches: watches,
		StatusPatches: f.patches.report(), NodeGets: f.gets.report(),
		Errors: f.errs.snapshot(), ReflectorErrors: f.reflectorErrs.snapshot(), Warnings: f.warnings.snapshot(),
		LeaseLookupErrors: f.leaseLookupErrs.snapshot(), Echoes: f.echoes.snapshot(), TCPDialed: f.dialed.Load(), ConnResets: f.connResets.Load(),
		Storms:   append([]fleetStorm{}, f.storms...),
		Timeline: f.timeline, StopReason: reason, RunSeconds: round3(time.Since(f.t0).Seconds()),
	}
	r.ErrorSamples, _ = f.samples.snapshot()
	r.Leases = fleetLeaseReport{fleetCallReport: f.leases.report(), OldestRenewAgeS: f.maxRenewAge}
	if n := len(f.timeline); n > 0 {
		r.Leases.OldestRenewAgeAtStopS = f.timeline[n-1].OldestRenewAgeS
	}
	for _, k := range kubelets {
		if k.renewNs.Load() == 0 {
			r.Leases.NeverRenewed++
		}
	}
	r.CPUSeconds = round3(ownCPUSeconds())
	r.RSSBytes, r.MaxRSSBytes = ownMemory()
	r.GoroutinesAtStop = goroutines()
	return r
}

// startReport summarizes the start phase.
func (f *fleetRun) startReport(kubelets []*fleetKubelet) fleetStartReport {
	s := fleetStartReport{AllOpenS: -1, AllOpen: f.everAllOpen.Load()}
	f.mu.Lock()
	if !f.rampDone.IsZero() {
		s.RampS = round3(f.rampDone.Sub(f.t0).Seconds())
	}
	f.mu.Unlock()
	if !f.allOpenAt.IsZero() {
		s.AllOpenS = round3(f.allOpenAt.Sub(f.t0).Seconds())
	}
	var ms []float64
	for _, k := range kubelets {
		k.mu.Lock()
		if !k.allOpen.IsZero() {
			ms = append(ms, float64(k.openedIn.Microseconds())/1e3)
		}
		k.mu.Unlock()
	}
	s.PerKubeletMs = summarize(ms)
	return s
}

// watchReports is the per-resource watch figures, with the watches open now and, per kubelet
// whose watch is open, how long ago it was last (re)established.
func (f *fleetRun) watchReports(kubelets []*fleetKubelet) map[string]fleetWatchReport {
	now := time.Now()
	out := make(map[string]fleetWatchReport, fleetResources)
	for r := range fleetResources {
		wr := f.counts[r].report()
		var ages []float64
		for _, k := range kubelets {
			k.mu.Lock()
			s := k.streams[r]
			k.mu.Unlock()
			if s.open {
				wr.OpenAtEnd++
				ages = append(ages, float64(now.Sub(s.lastOpen).Microseconds())/1e3)
			}
		}
		wr.LastEstablishedAgeMs = summarize(ages)
		out[fleetResourceNames[r]] = wr
	}
	return out
}

// ownMemory is this process's VmRSS and peak RSS (getrusage ru_maxrss, KiB on Linux), bytes.
func ownMemory() (rss, maxRSS int64) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		maxRSS = ru.Maxrss * 1024
	}
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1, maxRSS
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			fields := strings.Fields(rest)
			if len(fields) > 0 {
				kib, _ := strconv.ParseInt(fields[0], 10, 64)
				return kib * 1024, maxRSS
			}
		}
	}
	return -1, maxRSS
}

// goroutines is the number of goroutines now.
func goroutines() int { return goruntime.NumGoroutine() }
