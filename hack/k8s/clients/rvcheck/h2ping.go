package main

// h2ping: how fast the server answers HTTP/2 PING while it is busy. client-go's transport pings
// a connection it has read nothing from for 30 s and closes it when the answer takes more than
// 15 s (ReadIdleTimeout, PingTimeout), losing every watch on it.
//
//	rvcheck h2ping --kubeconfig K [--interval 100ms] [--duration 30s] [--ready-file F]
//
// The probe dials ONE TLS connection of its own to the kubeconfig's server (client-go's TLS
// configuration, rest.TLSConfigFor, with ALPN h2 only), makes it an x/net/http2 ClientConn
// (Transport.NewClientConn) that sends no request, and calls ClientConn.Ping every --interval,
// one at a time: a ping that takes longer than the interval still counts, and the next goes out
// as soon as it is answered. A ping not answered within h2pingTimeout (client-go's PingTimeout)
// fails. --ready-file is written once the connection is up. The probe stops at --duration, or
// when the connection is closed (a GOAWAY, a lost connection: its error is the stop reason).
//
// Note: kube-apiserver closes an HTTP/2 connection that has had no stream for 90 s
// (http2.Server IdleTimeout; PINGs do not count), so a --duration past that ends with the
// connection closed.

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"time"

	"golang.org/x/net/http2"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	// h2pingTimeout fails a ping not answered by then: client-go's http2 PingTimeout.
	h2pingTimeout = 15 * time.Second
	// h2pingDialTimeout bounds the TCP dial and the TLS handshake.
	h2pingDialTimeout = 10 * time.Second
	// h2pingMaxErrors caps the distinct ping errors listed in the report.
	h2pingMaxErrors = 20
)

// h2pingOptions are the flags of h2ping.
type h2pingOptions struct {
	kubeconfig string
	interval   time.Duration
	duration   time.Duration
	readyFile  string
}

// h2pingError is one distinct error of the failed pings.
type h2pingError struct {
	Error string `json:"error"`
	Count int    `json:"count"`
	First int    `json:"first_ping"` // 0-based number of the first ping that failed so
}

// h2pingReport is the JSON report of h2ping.
type h2pingReport struct {
	Scenario   string  `json:"scenario"`
	Server     string  `json:"server"`
	Addr       string  `json:"addr"`
	IntervalMs float64 `json:"interval_ms"`
	ConnectMs  float64 `json:"connect_ms"` // TCP dial + TLS handshake
	ALPN       string  `json:"alpn"`
	// MaxStreams is the server's SETTINGS_MAX_CONCURRENT_STREAMS, once its SETTINGS arrived
	// (0: they did not).
	MaxStreams  uint32         `json:"server_max_concurrent_streams"`
	Sent        int            `json:"pings_sent"`
	Answered    int            `json:"pings_answered"`
	Failed      int            `json:"pings_failed"`
	Errors      []h2pingError  `json:"errors"` // the first h2pingMaxErrors distinct ones
	RTT         latencySummary `json:"rtt_ms"` // of the answered pings
	RTTBySecond []lagSecond    `json:"rtt_by_second"`
	StopReason  string         `json:"stop_reason"` // duration | connection-closed
	PingedSecs  float64        `json:"pinged_seconds"`
	CPUSeconds  float64        `json:"cpu_seconds"`
	Fatal       string         `json:"fatal,omitempty"`
}

// parseH2PingFlags parses the h2ping command line.
func parseH2PingFlags(args []string) (h2pingOptions, error) {
	var o h2pingOptions
	fs := flag.NewFlagSet("h2ping", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the server to ping (required)")
	fs.DurationVar(&o.interval, "interval", 100*time.Millisecond, "one ping every interval (the next waits for the answer)")
	fs.DurationVar(&o.duration, "duration", 30*time.Second, "stop after this long (from the moment the connection is up)")
	fs.StringVar(&o.readyFile, "ready-file", "", "write this file once the connection is up")
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	switch {
	case o.kubeconfig == "":
		return o, fmt.Errorf("%w: h2ping: --kubeconfig is required", errUsage)
	case o.interval <= 0 || o.duration <= 0:
		return o, fmt.Errorf("%w: h2ping: --interval and --duration must be positive", errUsage)
	}
	return o, nil
}

// dialH2 dials cfg's server with cfg's TLS configuration, offering only h2, and returns the
// connection as an x/net/http2 ClientConn.
func dialH2(ctx context.Context, cfg *rest.Config, report *h2pingReport) (*http2.ClientConn, error) {
	u, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("server URL of %s: %w", cfg.Host, err)
	}
	if u.Scheme != "https" {
		return nil, fmt.Errorf("server %s is not https: h2ping needs TLS with ALPN h2", u)
	}
	report.Addr = hostPort(u)
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("TLS configuration of %s: %w", cfg.Host, err)
	}
	if tlsCfg == nil {
		tlsCfg = &tls.Config{}
	}
	tlsCfg = tlsCfg.Clone()
	tlsCfg.NextProtos = []string{http2.NextProtoTLS}
	dialer := &tls.Dialer{NetDialer: &net.Dialer{Timeout: h2pingDialTimeout}, Config: tlsCfg}
	dctx, cancel := context.WithTimeout(ctx, h2pingDialTimeout)
	defer cancel()
	t0 := time.Now()
	conn, err := dialer.DialContext(dctx, "tcp", report.Addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", report.Addr, err)
	}
	report.ConnectMs = round3(float64(time.Since(t0).Microseconds()) / 1e3)
	report.ALPN = conn.(*tls.Conn).ConnectionState().NegotiatedProtocol
	if report.ALPN != http2.NextProtoTLS {
		conn.Close()
		return nil, fmt.Errorf("%s negotiated ALPN %q, not h2", report.Addr, report.ALPN)
	}
	// A zero Transport: no health-check pings of its own (ReadIdleTimeout 0).
	cc, err := (&http2.Transport{}).NewClientConn(conn)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("HTTP/2 connection to %s: %w", report.Addr, err)
	}
	return cc, nil
}

// hostPort is u's host:port, the port defaulting to 443.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), "443")
}

// h2pinger pings one connection and keeps what it saw.
type h2pinger struct {
	cc     *http2.ClientConn
	report *h2pingReport
	rttMs  []float64
	sentNs []int64
	errIdx map[string]int // error text: index in report.Errors
}

// ping sends one ping and records its round trip or its error; false when the connection is
// closed.
func (p *h2pinger) ping(ctx context.Context) bool {
	pctx, cancel := context.WithTimeout(ctx, h2pingTimeout)
	defer cancel()
	n := p.report.Sent
	p.report.Sent++
	t0 := time.Now()
	err := p.cc.Ping(pctx)
	rtt := time.Since(t0)
	if err == nil {
		p.report.Answered++
		p.rttMs = append(p.rttMs, float64(rtt.Microseconds())/1e3)
		p.sentNs = append(p.sentNs, t0.UnixNano())
		if p.report.MaxStreams == 0 {
			p.report.MaxStreams = p.cc.State().MaxConcurrentStreams
		}
		return true
	}
	p.report.Failed++
	msg := err.Error()
	if errors.Is(err, context.DeadlineExceeded) {
		msg = fmt.Sprintf("no answer within %s", h2pingTimeout)
	}
	if p.cc.State().Closing {
		// Nothing of ours closes it: the server sent GOAWAY (e.g. its idle timeout).
		msg += " (after the server's GOAWAY)"
	}
	if i, ok := p.errIdx[msg]; ok {
		p.report.Errors[i].Count++
	} else if len(p.report.Errors) < h2pingMaxErrors {
		p.errIdx[msg] = len(p.report.Errors)
		p.report.Errors = append(p.report.Errors, h2pingError{Error: msg, Count: 1, First: n})
	}
	return !p.cc.State().Closed
}

// runH2Ping pings the server of o; the report's fatal is the error returned.
func runH2Ping(o h2pingOptions, stderr io.Writer) (report h2pingReport, err error) {
	report = h2pingReport{Scenario: "h2ping", IntervalMs: round3(float64(o.interval.Microseconds()) / 1e3),
		Errors: []h2pingError{}, RTTBySecond: []lagSecond{}}
	defer func() {
		report.CPUSeconds = round3(ownCPUSeconds())
		if err != nil {
			report.Fatal = err.Error()
		}
	}()
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return report, fmt.Errorf("load kubeconfig %s: %w", o.kubeconfig, err)
	}
	report.Server = cfg.Host
	ctx := context.Background()
	cc, err := dialH2(ctx, cfg, &report)
	if err != nil {
		return report, err
	}
	defer cc.Close()
	progress(stderr, "h2ping: connected to %s in %.1f ms (ALPN %s); one ping every %s for %s", report.Addr, report.ConnectMs, report.ALPN, o.interval, o.duration)
	if err := writeReadyFile(o.readyFile); err != nil {
		return report, err
	}
	p := &h2pinger{cc: cc, report: &report, errIdx: map[string]int{}}
	start := time.Now()
	deadline := start.Add(o.duration)
	nextProgress := start.Add(progressInterval)
	report.StopReason = "duration"
	for next := start; next.Before(deadline); next = next.Add(o.interval) {
		time.Sleep(time.Until(next))
		if !p.ping(ctx) {
			report.StopReason = "connection-closed"
			break
		}
		if now := time.Now(); now.After(next.Add(o.interval)) {
			// A ping longer than the interval: the next goes out now, the schedule moves on.
			next = now.Add(-o.interval)
		}
		if time.Now().After(nextProgress) {
			nextProgress = nextProgress.Add(progressInterval)
			progress(stderr, "h2ping: %d ping(s), %d answered, %d failed", report.Sent, report.Answered, report.Failed)
		}
	}
	report.PingedSecs = round3(time.Since(start).Seconds())
	if len(p.sentNs) > 0 {
		report.RTTBySecond = lagBySecond(p.sentNs, p.rttMs)
	}
	report.RTT = summarize(p.rttMs)
	progress(stderr, "h2ping: %s after %.1f s: %d ping(s), %d answered, %d failed, rtt p50 %.3f ms p99 %.3f ms max %.3f ms",
		report.StopReason, report.PingedSecs, report.Sent, report.Answered, report.Failed, report.RTT.P50Ms, report.RTT.P99Ms, report.RTT.MaxMs)
	if report.StopReason == "connection-closed" {
		return report, fmt.Errorf("h2ping: the connection to %s closed after %d ping(s)", report.Addr, report.Sent)
	}
	return report, nil
}
