package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

const (
	podRequestTimeout = 20 * time.Second // one request of the pods scenario
	podImage          = "registry.k8s.io/pause:3.10"
	podImageUpdated   = "registry.k8s.io/pause:3.9"
	fieldManager      = "rvcheck"
	// conditionType is the pod condition UpdateStatus adds (a qualified name, as validation asks).
	conditionType = corev1.PodConditionType("rvcheck.example.com/Checked")
)

type podsOptions struct {
	commonFlags
	namespace string
	name      string
	node      string
}

func parsePodsFlags(args []string) (podsOptions, error) {
	var o podsOptions
	fs := flag.NewFlagSet("pods", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.register(fs)
	fs.StringVar(&o.namespace, "namespace", "", "namespace of the pod (must exist; required)")
	fs.StringVar(&o.name, "name", "", "name of the pod to create (must not exist; required)")
	fs.StringVar(&o.node, "node", "", "spec.nodeName of the pod (required; no scheduler binds it)")
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	if err := o.validate(); err != nil {
		return o, err
	}
	if o.namespace == "" || o.name == "" || o.node == "" {
		return o, fmt.Errorf("%w: pods: --namespace, --name and --node are required", errUsage)
	}
	return o, nil
}

// expectation is the answer kube-apiserver gives a step: a status code, and for errors the
// Status reason.
type expectation struct {
	code   int32
	reason metav1.StatusReason
}

func (e expectation) String() string {
	if e.reason == "" {
		return strconv.Itoa(int(e.code))
	}
	return fmt.Sprintf("%d %s", e.code, e.reason)
}

var (
	expectOK       = expectation{code: http.StatusOK}
	expectCreated  = expectation{code: http.StatusCreated}
	expectConflict = expectation{code: http.StatusConflict, reason: metav1.StatusReasonConflict}
	expectNotFound = expectation{code: http.StatusNotFound, reason: metav1.StatusReasonNotFound}
	// A failed RFC 6902 "test" operation is 422 Invalid in kube-apiserver, not 409
	// (k8s.io/apiserver/pkg/endpoints/handlers/patch.go, applyJSPatch).
	expectTestOpFailed = expectation{code: http.StatusUnprocessableEntity, reason: metav1.StatusReasonInvalid}
)

// podStep is one request of the pods scenario. OK means the answer is the expected one (a
// success for the plain steps, the expected refusal for the stale ones).
type podStep struct {
	Step     string `json:"step"`
	OK       bool   `json:"ok"`
	Expected string `json:"expected"`
	Code     int32  `json:"code"`
	Reason   string `json:"reason"`
	Message  string `json:"message"`
	RVBefore string `json:"rv_before"` // the resourceVersion the request carried or started from
	RVAfter  string `json:"rv_after"`  // the resourceVersion of the object answered, if any
	Note     string `json:"note,omitempty"`
}

type podsReport struct {
	Scenario    string    `json:"scenario"`
	ContentType string    `json:"content_type"`
	Server      string    `json:"server"`
	Namespace   string    `json:"namespace"`
	Name        string    `json:"name"`
	Node        string    `json:"node"`
	Steps       []podStep `json:"steps"`
	AllOK       bool      `json:"all_ok"`
	RVsSeen     []string  `json:"rvs_seen"`
	Fatal       string    `json:"fatal,omitempty"`
	rvSummary
}

func runPodsCommand(args []string, stderr io.Writer) (any, error) {
	o, err := parsePodsFlags(args)
	if err != nil {
		return nil, err
	}
	report, err := runPods(o, stderr)
	if err != nil {
		report.Fatal = err.Error()
	}
	return report, err
}

// podScenario carries the state between steps: the newest object and the stale RV.
type podScenario struct {
	opts    podsOptions
	rc      rest.Interface
	current *corev1.Pod // the newest object an answer carried
	staleRV string      // the resourceVersion create answered: stale after the first update
	report  *podsReport
	rvs     *rvLog
	stderr  io.Writer
}

// runPods runs every step in order. A step that fails does not stop the scenario (the current
// object is re-read so the next step starts from the truth); only a failed create does, which
// returns an error.
func runPods(o podsOptions, stderr io.Writer) (*podsReport, error) {
	report := &podsReport{
		Scenario: "pods", ContentType: o.contentType, Namespace: o.namespace, Name: o.name, Node: o.node,
		Steps: []podStep{}, RVsSeen: []string{},
	}
	s := &podScenario{opts: o, report: report, rvs: newRVLog(), stderr: stderr}
	defer s.finish()
	cs, err := newClientset(o.kubeconfig, o.contentType)
	if err != nil {
		return report, err
	}
	s.rc = cs.CoreV1().RESTClient()
	report.Server = s.rc.Get().URL().Host
	progress(stderr, "pod %s/%s on %s (%s)", o.namespace, o.name, report.Server, o.contentType)

	if !s.create() {
		return report, fmt.Errorf("create pod %s/%s failed: %s", o.namespace, o.name, report.Steps[0].Message)
	}
	s.get()
	s.update()
	s.updateStatus()
	for _, stale := range []bool{false, true} {
		s.jsonPatch(stale)
		s.mergePatch(types.MergePatchType, "patch-merge", stale)
		s.mergePatch(types.StrategicMergePatchType, "patch-strategic", stale)
		s.applyPatch(stale)
	}
	s.delete(true)
	s.delete(false)
	s.getDeleted()
	return report, nil
}

func (s *podScenario) finish() {
	s.report.RVsSeen = s.rvs.all()
	s.report.rvSummary = s.rvs.summary()
	s.report.AllOK = len(s.report.Steps) > 0
	for _, st := range s.report.Steps {
		s.report.AllOK = s.report.AllOK && st.OK
	}
}

func (s *podScenario) currentRV() string {
	if s.current == nil {
		return ""
	}
	return s.current.ResourceVersion
}

// pods returns a request builder for this scenario's pod (or the collection when name is empty).
func (s *podScenario) pods(verb string) *rest.Request {
	return s.rc.Verb(verb).Namespace(s.opts.namespace).Resource("pods")
}

// do sends req, records the step and returns the answered pod on success (nil otherwise). When
// the step was expected to succeed and did not, the current object is re-read.
func (s *podScenario) do(name string, want expectation, rvBefore string, req *rest.Request) *corev1.Pod {
	ctx, cancel := context.WithTimeout(context.Background(), podRequestTimeout)
	defer cancel()
	result := req.Do(ctx)
	var code int
	result.StatusCode(&code)
	pod := &corev1.Pod{}
	err := result.Into(pod)
	st := podStep{Step: name, Expected: want.String(), RVBefore: rvBefore, Code: int32(code)}
	if err != nil {
		st.Code, st.Reason, st.Message = describeError(err)
		if st.Code == 0 {
			st.Code = int32(code)
		}
		pod = nil
	} else {
		st.RVAfter = pod.ResourceVersion
		s.rvs.add(pod.ResourceVersion)
	}
	st.OK = st.Code == want.code && metav1.StatusReason(st.Reason) == want.reason
	if pod != nil && want.code < 300 {
		s.current = pod
	}
	if !st.OK && want.code < 300 {
		st.Note = s.refresh()
	}
	s.report.Steps = append(s.report.Steps, st)
	progress(s.stderr, "%-22s %-5v %d %s rv %s -> %s %s", name, st.OK, st.Code, st.Reason, st.RVBefore, st.RVAfter, st.Message)
	return pod
}

// refresh re-reads the pod after an unexpected failure so the next step starts from the
// current object; returns a note for the report.
func (s *podScenario) refresh() string {
	ctx, cancel := context.WithTimeout(context.Background(), podRequestTimeout)
	defer cancel()
	pod := &corev1.Pod{}
	if err := s.pods(http.MethodGet).Name(s.opts.name).Do(ctx).Into(pod); err != nil {
		_, _, msg := describeError(err)
		return "re-read after the failure failed: " + msg
	}
	s.rvs.add(pod.ResourceVersion)
	s.current = pod
	return "re-read after the failure: rv " + pod.ResourceVersion
}

func (s *podScenario) create() bool {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: s.opts.name, Namespace: s.opts.namespace, Labels: map[string]string{"app": "rvcheck"}},
		Spec: corev1.PodSpec{
			NodeName:   s.opts.node,
			Containers: []corev1.Container{{Name: "app", Image: podImage}},
		},
	}
	created := s.do("create", expectCreated, "", s.pods(http.MethodPost).Body(pod))
	if created == nil {
		return false
	}
	s.staleRV = created.ResourceVersion
	return true
}

func (s *podScenario) get() {
	s.do("get", expectOK, s.currentRV(), s.pods(http.MethodGet).Name(s.opts.name))
}

// update changes labels, an annotation and the container image with a PUT of the current object.
func (s *podScenario) update() {
	pod := s.current.DeepCopy()
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Labels["rvcheck-update"] = "v1"
	pod.Annotations["rvcheck.example.com/updated-at"] = time.Now().UTC().Format(time.RFC3339Nano)
	pod.Spec.Containers[0].Image = podImageUpdated
	s.do("update", expectOK, pod.ResourceVersion, s.pods(http.MethodPut).Name(s.opts.name).Body(pod))
}

// updateStatus adds a pod condition with a PUT of the status subresource.
func (s *podScenario) updateStatus() {
	pod := s.current.DeepCopy()
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{
		Type: conditionType, Status: corev1.ConditionTrue, Reason: "RVCheck",
		LastTransitionTime: metav1.NewTime(time.Now()),
	})
	s.do("update-status", expectOK, pod.ResourceVersion, s.pods(http.MethodPut).Name(s.opts.name).SubResource("status").Body(pod))
}

// preconditionRV returns the resourceVersion a patch step carries and the step's name and
// expectation: the current one, or the stale one from create.
func (s *podScenario) preconditionRV(base string, stale bool, staleWant expectation) (rv, name string, want expectation) {
	if stale {
		return s.staleRV, base + "-stale", staleWant
	}
	return s.currentRV(), base, expectOK
}

// labelValue is the value a patch step writes: different for the stale attempt so that it
// would be a change if the precondition were ignored.
func labelValue(stale bool) string {
	if stale {
		return "stale"
	}
	return "v1"
}

// jsonPatch sends an RFC 6902 patch whose first operation tests metadata.resourceVersion.
func (s *podScenario) jsonPatch(stale bool) {
	rv, name, want := s.preconditionRV("patch-json", stale, expectTestOpFailed)
	ops := []map[string]any{
		{"op": "test", "path": "/metadata/resourceVersion", "value": rv},
		{"op": "add", "path": "/metadata/labels/rvcheck-json", "value": labelValue(stale)},
	}
	s.patch(name, want, rv, types.JSONPatchType, ops, nil)
}

// mergePatch sends a JSON merge patch or a strategic merge patch carrying metadata.resourceVersion
// (a precondition) and a label.
func (s *podScenario) mergePatch(pt types.PatchType, base string, stale bool) {
	rv, name, want := s.preconditionRV(base, stale, expectConflict)
	body := map[string]any{"metadata": map[string]any{
		"resourceVersion": rv,
		"labels":          map[string]string{"rvcheck-" + base: labelValue(stale)},
	}}
	s.patch(name, want, rv, pt, body, nil)
}

// applyPatch sends a server-side apply in YAML with metadata.resourceVersion set.
func (s *podScenario) applyPatch(stale bool) {
	rv, name, want := s.preconditionRV("patch-apply", stale, expectConflict)
	body := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
  resourceVersion: %s
  labels:
    rvcheck-apply: %s
`, strconv.Quote(s.opts.name), strconv.Quote(s.opts.namespace), strconv.Quote(rv), strconv.Quote(labelValue(stale)))
	opts := &metav1.PatchOptions{FieldManager: fieldManager}
	s.patch(name, want, rv, types.ApplyYAMLPatchType, []byte(body), opts)
}

// patch sends body (bytes as they are, anything else as JSON) with patch type pt.
func (s *podScenario) patch(name string, want expectation, rv string, pt types.PatchType, body any, opts *metav1.PatchOptions) {
	data, ok := body.([]byte)
	if !ok {
		var err error
		if data, err = json.Marshal(body); err != nil {
			s.report.Steps = append(s.report.Steps, podStep{Step: name, Expected: want.String(), RVBefore: rv, Message: fmt.Sprintf("encode patch: %v", err)})
			return
		}
	}
	req := s.rc.Patch(pt).Namespace(s.opts.namespace).Resource("pods").Name(s.opts.name).Body(data)
	if opts != nil {
		req = req.VersionedParams(opts, scheme.ParameterCodec)
	}
	s.do(name, want, rv, req)
}

// delete sends a DELETE with a resourceVersion precondition (stale: the one from create) and
// gracePeriodSeconds 0, since no kubelet will ever confirm a graceful deletion.
func (s *podScenario) delete(stale bool) {
	rv, name, want := s.preconditionRV("delete", stale, expectConflict)
	grace := int64(0)
	opts := &metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{ResourceVersion: &rv}}
	s.do(name, want, rv, s.pods(http.MethodDelete).Name(s.opts.name).Body(runtime.Object(opts)))
}

func (s *podScenario) getDeleted() {
	s.do("get-deleted", expectNotFound, "", s.pods(http.MethodGet).Name(s.opts.name))
}
