package main

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Values of --content-type.
const (
	contentTypeProtobuf = "protobuf"
	contentTypeJSON     = "json"
)

// Client-side rate limits: high enough that client-go's limiter (default 5 QPS) never paces the
// scenario, so every request goes out when the scenario says (50 leases renewed each second is
// 50 QPS; kubelets set their own --kube-api-qps likewise).
const (
	clientQPS   = 500
	clientBurst = 1000
)

// newClientset returns a clientset for kubeconfig speaking contentType the way kubelets do:
// protobuf requests with "protobuf, then JSON" accepted (kubelet's --kube-api-content-type
// default), or JSON only.
func newClientset(kubeconfig, contentType string) (*kubernetes.Clientset, error) {
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
	cfg.QPS, cfg.Burst = clientQPS, clientBurst
	cfg.UserAgent = "rvcheck/" + contentType + " " + rest.DefaultKubernetesUserAgent()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("build clientset for %s: %w", cfg.Host, err)
	}
	return cs, nil
}
