// Command rvcheck drives a kube-apiserver, or partition-proxy in front of several, with the real
// client-go the way kubelets and controllers do (protobuf by default, writing back the
// resourceVersions it read), and reports what it saw as ONE JSON document on stdout. Human
// progress goes to stderr.
//
//	rvcheck leases --kubeconfig K --names a,b,c [--duration 30s] [--interval 1s] [--content-type protobuf|json]
//	rvcheck pods   --kubeconfig K --namespace NS --name NAME --node NODE [--content-type protobuf|json]
//	rvcheck write  --kubeconfig K1[,K2] --namespace NS1[,NS2] --rate R --duration D ...  (write.go)
//	rvcheck watch  --kubeconfig K1[,K2] --path P --run TAG [--expect N] ...              (watch.go)
//	rvcheck create-pods --kubeconfig K --namespace NS1[,NS2] --count M --rate R --run TAG ... (createpods.go)
//	rvcheck pod-watch   --kubeconfig K1[,K2] --run TAG [--expect M] ...                   (podwatch.go)
//	rvcheck h2watch     --kubeconfig K --nodes n1,n2 [--watches N] [--slow-stream] ...    (h2watch.go)
//	rvcheck h2ping      --kubeconfig K [--interval 100ms] [--duration 30s] ...           (h2ping.go)
//	rvcheck requests    --kubeconfig K --op get|renew-lease|... [--concurrency 16] ...  (requests.go)
//	rvcheck fleet       --kubeconfig K --ca-cert C --ca-key K --nodes-file F ...        (fleet.go)
//
// leases: a SharedInformer on Leases in kube-node-lease plus one renewer per named Lease that
// updates spec.renewTime every interval, as the kubelet's node lease controller does
// (k8s.io/component-helpers/apimachinery/lease). pods: one pod through GET, UPDATE,
// UpdateStatus, every patch type with a resourceVersion precondition (current, then stale),
// DELETE with preconditions and a final GET (see pods.go for the steps).
//
// Exit status: 0 when the scenario ran (the caller judges the figures in the report), 1 when it
// could not run (the report's "fatal" says why), 2 on bad usage.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

const (
	exitRan      = 0
	exitCouldNot = 1
	exitUsage    = 2
)

// errUsage marks errors in the command line (exit 2).
var errUsage = errors.New("usage")

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run parses args, runs one scenario and writes its report to stdout. Returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return exitUsage
	}
	var (
		report any
		err    error
	)
	switch args[0] {
	case "leases":
		report, err = runLeasesCommand(args[1:], stderr)
	case "pods":
		report, err = runPodsCommand(args[1:], stderr)
	case "write":
		report, err = runWriteCommand(args[1:], stderr)
	case "watch":
		report, err = runWatchCommand(args[1:], stderr)
	case "create-pods":
		report, err = runCreatePodsCommand(args[1:], stderr)
	case "pod-watch":
		report, err = runPodWatchCommand(args[1:], stderr)
	case "h2watch":
		report, err = runH2WatchCommand(args[1:], stderr)
	case "requests":
		report, err = runRequestsCommand(args[1:], stderr)
	case "fleet":
		report, err = runFleetCommand(args[1:], stderr)
	case "h2ping":
		var o h2pingOptions
		if o, err = parseH2PingFlags(args[1:]); err == nil {
			report, err = runH2Ping(o, stderr)
		}
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, usage)
		return exitRan
	default:
		fmt.Fprintf(stderr, "rvcheck: unknown subcommand %q\n%s\n", args[0], usage)
		return exitUsage
	}
	if errors.Is(err, errUsage) {
		fmt.Fprintf(stderr, "rvcheck: %v\n", err)
		return exitUsage
	}
	if report != nil {
		if werr := writeJSON(stdout, report); werr != nil {
			fmt.Fprintf(stderr, "rvcheck: write report: %v\n", werr)
			return exitCouldNot
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "rvcheck: %v\n", err)
		return exitCouldNot
	}
	return exitRan
}

const usage = `usage:
  rvcheck leases --kubeconfig K --names a,b,c [--duration 30s] [--interval 1s] [--content-type protobuf|json]
  rvcheck pods   --kubeconfig K --namespace NS --name NAME --node NODE [--content-type protobuf|json]
  rvcheck write  --kubeconfig K1[,K2] --namespace NS1[,NS2] --rate R --duration D [--objects N] [--clients C] [--run TAG] [--content-type protobuf|json]
  rvcheck watch  --kubeconfig K1[,K2] --path P --run TAG [--expect N] [--duration D] [--idle D] [--ready-file F] [--content-type protobuf|json]
  rvcheck create-pods --kubeconfig K --namespace NS1[,NS2] --count M --rate R --run TAG [--clients C] [--prefix P] [--log-out F] [--timeout D] [--content-type protobuf|json]
  rvcheck pod-watch   --kubeconfig K1[,K2] --run TAG [--expect M] [--duration D] [--idle D] [--ready-file F] [--events-out F] [--progress D] [--name N] [--content-type protobuf|json]
  rvcheck h2watch     --kubeconfig K --nodes n1,n2,... [--pods-per-node=true|false] [--watches N] [--per-connection N] [--consistent-list] [--duration D] [--expect-events E] [--slow-stream] [--stream-window BYTES] [--ready-file F] [--content-type protobuf|json]
  rvcheck h2ping      --kubeconfig K [--interval D] [--duration D] [--ready-file F]
  rvcheck requests    --kubeconfig K --op get|renew-lease|patch-status|list --namespace NS [--names a,b] [--concurrency C] [--duration D] [--warmup D] [--content-type protobuf|json]
  rvcheck fleet       --kubeconfig K --ca-cert CA.crt --ca-key CA.key (--nodes-file F | --node-prefix P --count N) [--pin] [--duration D] [--ramp R] [--status-interval D] [--lease-interval D] [--report-interval D] [--status-file F] [--mark-file F] [--cpu-profile F] [--content-type protobuf|json]`

// commonFlags are the flags every subcommand takes.
type commonFlags struct {
	kubeconfig  string
	contentType string
}

func (c *commonFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig of the server to talk to (required)")
	fs.StringVar(&c.contentType, "content-type", contentTypeProtobuf, "request and preferred response encoding: protobuf (as kubelets) or json")
}

// flagSet returns the FlagSet of subcommand name with the common flags registered; it prints
// nothing (parseFlags reports its errors).
func (c *commonFlags) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.register(fs)
	return fs
}

func (c *commonFlags) validate() error {
	if c.kubeconfig == "" {
		return fmt.Errorf("%w: --kubeconfig is required", errUsage)
	}
	if c.contentType != contentTypeProtobuf && c.contentType != contentTypeJSON {
		return fmt.Errorf("%w: --content-type must be protobuf or json, not %q", errUsage, c.contentType)
	}
	return nil
}

// parseFlags parses args into fs; any error, including positional leftovers, is a usage error.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %s: %v", errUsage, fs.Name(), err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: %s: unexpected arguments %q", errUsage, fs.Name(), fs.Args())
	}
	return nil
}

// splitNames splits a comma-separated list, dropping empty entries.
func splitNames(s string) []string {
	var out []string
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// progress prints one human line to stderr, prefixed with the wall clock.
func progress(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "%s rvcheck: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}
