package main

// Shared by the load subcommands `write` and `watch` (bench/union_watch.py): the annotations a
// write stamps on its object and a watch reads back, client configuration without client-side
// rate limits, latency summaries and the process's own CPU time.

import (
	"fmt"
	"math"
	"net"
	"os"
	"sort"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Annotations `write` puts on every object it updates; `watch` computes delivery lag from them.
const (
	annotationSentNs = "bench.partition-proxy.io/sent-ns" // wall clock of the send, Unix nanoseconds
	annotationSeq    = "bench.partition-proxy.io/seq"     // 0-based number of the write in its run
	annotationRun    = "bench.partition-proxy.io/run"     // --run of the writer: watchers count only their run
)

// benchConfig loads kubeconfig for a load client: contentType as newClientset does, no
// client-side rate limit (QPS < 0 disables client-go's token bucket: the scenario paces
// itself), and, with ownConnection, a transport of its own (a distinct Dial keeps client-go's
// transport cache from sharing one HTTP/2 connection between clients).
func benchConfig(kubeconfig, contentType, userAgent string, ownConnection bool) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	switch contentType {
	case contentTypeProtobuf:
		cfg.ContentType = runtime.ContentTypeProtobuf
		cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	case contentTypeJSON:
		cfg.ContentType = runtime.ContentTypeJSON
		cfg.AcceptContentTypes = runtime.ContentTypeJSON
	default:
		return nil, fmt.Errorf("unknown content type %q", contentType)
	}
	cfg.QPS, cfg.Burst = -1, 0
	cfg.UserAgent = userAgent + "/" + contentType + " " + rest.DefaultKubernetesUserAgent()
	if ownConnection {
		cfg.Dial = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	return cfg, nil
}

// writeReadyFile writes the wall clock to path, unless path is empty: a watcher's --ready-file,
// written once its watches are open so that a caller starts writing only then.
func writeReadyFile(path string) error {
	if path == "" {
		return nil
	}
	if err := os.WriteFile(path, []byte(time.Now().Format(time.RFC3339Nano)+"\n"), 0o644); err != nil {
		return fmt.Errorf("write --ready-file: %w", err)
	}
	return nil
}

// latencySummary summarizes durations in milliseconds (nearest-rank percentiles, as
// bench.common.percentile).
type latencySummary struct {
	Count  int     `json:"count"`
	MeanMs float64 `json:"mean_ms"`
	MinMs  float64 `json:"min_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	P999Ms float64 `json:"p999_ms"`
	MaxMs  float64 `json:"max_ms"`
}

// summarize sorts ms in place and summarizes it.
func summarize(ms []float64) latencySummary {
	if len(ms) == 0 {
		return latencySummary{}
	}
	sort.Float64s(ms)
	sum := 0.0
	for _, v := range ms {
		sum += v
	}
	return latencySummary{
		Count:  len(ms),
		MeanMs: round3(sum / float64(len(ms))),
		MinMs:  round3(ms[0]),
		P50Ms:  round3(nearestRank(ms, 50)),
		P90Ms:  round3(nearestRank(ms, 90)),
		P99Ms:  round3(nearestRank(ms, 99)),
		P999Ms: round3(nearestRank(ms, 99.9)),
		MaxMs:  round3(ms[len(ms)-1]),
	}
}

// nearestRank is the q-th percentile (0..100) of sorted values.
func nearestRank(sorted []float64, q float64) float64 {
	rank := int(math.Ceil(q / 100 * float64(len(sorted))))
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// ownCPUSeconds is this process's user + system CPU time, in seconds; -1 when unknown (JSON
// has no NaN).
func ownCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
