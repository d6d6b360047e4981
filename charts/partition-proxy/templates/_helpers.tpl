{{/*
Names, labels, the proxy config rendered from values, the memory sizing and render-time checks.
*/}}

{{- define "partition-proxy.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "partition-proxy.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "partition-proxy.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "partition-proxy.selectorLabels" -}}
app.kubernetes.io/name: {{ include "partition-proxy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "partition-proxy.labels" -}}
helm.sh/chart: {{ include "partition-proxy.chart" . }}
{{ include "partition-proxy.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: proxy
{{- end }}

{{- define "partition-proxy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "partition-proxy.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "partition-proxy.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Path of the config file in the container (the Dockerfile's ENTRYPOINT uses the same). */}}
{{- define "partition-proxy.configPath" -}}
/etc/partition-proxy/config/config.yaml
{{- end }}

{{/*
A checksum of the config sections the proxy reads at start-up only: a change of one rolls the
replicas. `partitions`, `tenants` and `nodes` are left out: the proxy re-reads them from the
mounted ConfigMap at runtime (docs/partition-set.md), so changing them rolls nothing.
*/}}
{{- define "partition-proxy.startupChecksum" -}}
{{- omit (include "partition-proxy.config" . | fromYaml) "partitions" "tenants" "nodes" | toYaml | sha256sum }}
{{- end }}

{{/*
seconds; the proxy's own graceful stop: the defaults of failure.shutdown_drain_seconds (10) +
failure.shutdown_grace_seconds (5) (config/models.py: connections let go one by one, their
watches ended cleanly, then each one's requests in flight finish). Not a flag of the proxy: change it here
if cli.py changes. terminationGracePeriodSeconds must exceed preStopSleepSeconds + this.
*/}}
{{- define "partition-proxy.shutdownTimeoutSeconds" -}}
15
{{- end }}

{{/*
The proxy config (config/models.py, snake_case keys) built from `.Values.proxy`. Kubeconfig and
TLS paths point into the mounted Secrets. Integers pass through `int` so large values never
render in exponent form (helm holds numbers as float64).
*/}}
{{- define "partition-proxy.config" -}}
{{- $p := .Values.proxy }}
{{- $tls := dict "cert_file" (printf "%s/%s" $p.mountPaths.tls $p.tls.certKey) "key_file" (printf "%s/%s" $p.mountPaths.tls $p.tls.keyKey) }}
{{- if $p.tls.clientCAKey }}
{{- $_ := set $tls "client_ca_file" (printf "%s/%s" $p.mountPaths.tls $p.tls.clientCAKey) }}
{{- end }}
{{- $partitions := list }}
{{- range $p.partitions }}
{{- $kubeconfig := printf "%s/%s/%s" $p.mountPaths.partitions .name (default "kubeconfig" .kubeconfigKey) }}
{{- if $p.partitionsSecret }}
{{- $kubeconfig = printf "%s/%s" $p.mountPaths.partitions (default (printf "%s.kubeconfig" .name) .kubeconfigKey) }}
{{- end }}
{{- $entry := dict "name" .name "role" .role "kubeconfig" $kubeconfig }}
{{- if .state }}
{{- $_ := set $entry "state" .state }}
{{- end }}
{{- $partitions = append $partitions $entry }}
{{- end }}
{{- $tenants := dict "namespace_to_tenant" $p.tenants.namespaceToTenant "separator" $p.tenants.separator "namespaces" $p.tenants.namespaces "partitions" $p.tenants.partitions "ranges" $p.tenants.ranges }}
{{- if $p.tenants.fenced }}
{{- $_ := set $tenants "fenced" $p.tenants.fenced }}
{{- end }}
{{- if $p.tenants.defaultPartition }}
{{- $_ := set $tenants "default_partition" $p.tenants.defaultPartition }}
{{- end }}
{{- $prefixes := dict }}
{{- range $p.nodes.prefixes }}
{{- $_ := set $prefixes .prefix .partition }}
{{- end }}
{{- $nodes := dict "placement" $p.nodes.placement "prefixes" $prefixes "regex" $p.nodes.regex }}
{{- $caches := list }}
{{- range $p.caches }}
{{- $c := dict "name" .name "resource" .resource "role" .role }}
{{- $keys := dict "group" "group" "version" "version" "namespace" "namespace" "labelSelector" "label_selector" "fieldSelector" "field_selector" "stripManagedFields" "strip_managed_fields" "stripLastApplied" "strip_last_applied" "protobuf" "protobuf" }}
{{- $cache := . }}
{{- range $camel, $snake := $keys }}
{{- if hasKey $cache $camel }}
{{- $_ := set $c $snake (get $cache $camel) }}
{{- end }}
{{- end }}
{{- if hasKey . "history" }}
{{- $_ := set $c "history" (int .history) }}
{{- end }}
{{- $caches = append $caches $c }}
{{- end }}
{{- $config := dict
  "listen" (dict "address" $p.listenAddress "port" (int $p.port) "tls" $tls)
  "partitions" $partitions
  "system_partition" $p.systemPartition
  "tenants" $tenants
  "nodes" $nodes
  "resource_versions" (dict "table_namespace" $p.resourceVersions.tableNamespace "table_name" $p.resourceVersions.tableName "refresh_seconds" $p.resourceVersions.refreshSeconds "retain_epochs" (int $p.resourceVersions.retainEpochs))
  "upstream" (dict "connect_timeout_seconds" $p.upstream.connectTimeoutSeconds "request_timeout_seconds" $p.upstream.requestTimeoutSeconds)
  "caches" $caches }}
{{- if $p.kubelet.existingSecret }}
{{- $kubelet := dict "client_cert_file" (printf "%s/%s" $p.mountPaths.kubelet $p.kubelet.certKey) "client_key_file" (printf "%s/%s" $p.mountPaths.kubelet $p.kubelet.keyKey) }}
{{- if $p.kubelet.caKey }}
{{- $_ := set $kubelet "ca_file" (printf "%s/%s" $p.mountPaths.kubelet $p.kubelet.caKey) }}
{{- end }}
{{- $_ := set $config "kubelet" $kubelet }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/*
Memory of one replica in MiB, from the object counts and the kubelets it serves (see `sizing` in
values.yaml):
  max(floorMiB, roundUp(workers*(baseMiB + (expectedNodes*bytesPerNode + expectedPods*bytesPerPod)/MiB)
                        + kubelets*bytesPerKubelet/MiB + (supervisorMiB if workers > 1), stepMiB))
kubelets = expectedKubeletsPerReplica, or when null every node's kubelet spread over the
replicas but one (the fewest replicas: autoscaling.minReplicas, else replicaCount): kubelets
that reconnect while one replica restarts stay where they land.
Integer arithmetic in bytes, rounded up, so the figure never falls below what the counts need.
*/}}
{{- define "partition-proxy.kubeletsPerReplica" -}}
{{- $s := .Values.sizing }}
{{- if kindIs "invalid" $s.expectedKubeletsPerReplica }}
{{- $fewest := ternary .Values.autoscaling.minReplicas .Values.replicaCount .Values.autoscaling.enabled }}
{{- $others := max 1 (sub (int64 $fewest) 1) }}
{{- div (add (int64 $s.expectedNodes) (sub $others 1)) $others }}
{{- else }}
{{- int64 $s.expectedKubeletsPerReplica }}
{{- end }}
{{- end }}

{{- define "partition-proxy.memoryMiB" -}}
{{- $s := .Values.sizing }}
{{- $mib := 1048576 }}
{{- $workers := int64 (default 1 .Values.proxy.workers) }}
{{- $objectBytes := add (mul (int64 $s.expectedNodes) (int64 $s.bytesPerNode)) (mul (int64 $s.expectedPods) (int64 $s.bytesPerPod)) }}
{{- $bytes := mul (add (mul (int64 $s.baseMiB) $mib) $objectBytes) $workers }}
{{- $kubelets := int64 (include "partition-proxy.kubeletsPerReplica" .) }}
{{- $bytes = add $bytes (mul $kubelets (int64 $s.bytesPerKubelet)) }}
{{- if gt $workers 1 }}{{ $bytes = add $bytes (mul (int64 $s.supervisorMiB) $mib) }}{{ end }}
{{- $step := mul (int64 $s.stepMiB) $mib }}
{{- $rounded := mul (div (sub (add $bytes $step) 1) $step) (int64 $s.stepMiB) }}
{{- max $rounded (int64 $s.floorMiB) }}
{{- end }}

{{/* The container's resources: `resources` with the computed memory where none is set. */}}
{{- define "partition-proxy.resources" -}}
{{- $memory := printf "%sMi" (include "partition-proxy.memoryMiB" .) }}
{{- $requests := deepCopy (default (dict) .Values.resources.requests) }}
{{- $limits := deepCopy (default (dict) .Values.resources.limits) }}
{{- if not (hasKey $requests "memory") }}{{ $_ := set $requests "memory" $memory }}{{ end }}
{{- if not (hasKey $limits "memory") }}{{ $_ := set $limits "memory" $memory }}{{ end }}
{{- toYaml (dict "requests" $requests "limits" $limits) }}
{{- end }}

{{/*
Checks the schema cannot express; each fails rendering with one line naming the value.
*/}}
{{- define "partition-proxy.validate" -}}
{{- $p := .Values.proxy }}
{{- $roles := dict }}
{{- range $i, $part := $p.partitions }}
{{- if and (not $p.partitionsSecret) (not $part.existingSecret) (ne (default "active" $part.state) "retired") }}
{{- fail (printf "proxy.partitions[%d].existingSecret: required unless proxy.partitionsSecret holds every partition's kubeconfig" $i) }}
{{- end }}
{{- if hasKey $roles $part.name }}
{{- fail (printf "proxy.partitions[%d].name: duplicate partition %q" $i $part.name) }}
{{- end }}
{{- $_ := set $roles $part.name $part.role }}
{{- end }}
{{- $tenant := false }}{{ $resource := false }}
{{- range $name, $role := $roles }}
{{- if eq $role "tenant" }}{{ $tenant = true }}{{ else }}{{ $resource = true }}{{ end }}
{{- end }}
{{- if not $tenant }}{{ fail "proxy.partitions: at least one partition with role tenant is required" }}{{ end }}
{{- if not $resource }}{{ fail "proxy.partitions: at least one partition with role resource is required" }}{{ end }}
{{- if ne (get $roles $p.systemPartition) "tenant" }}
{{- fail (printf "proxy.systemPartition: %q is not a tenant partition of proxy.partitions" $p.systemPartition) }}
{{- end }}
{{- $grace := add (int .Values.preStopSleepSeconds) (int (include "partition-proxy.shutdownTimeoutSeconds" .)) }}
{{- if le (int .Values.terminationGracePeriodSeconds) $grace }}
{{- fail (printf "terminationGracePeriodSeconds: %d must exceed preStopSleepSeconds + the proxy's %ss shutdown grace (%d)" (int .Values.terminationGracePeriodSeconds) (include "partition-proxy.shutdownTimeoutSeconds" .) $grace) }}
{{- end }}
{{- if and .Values.autoscaling.enabled (gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) }}
{{- fail "autoscaling.minReplicas: must not exceed autoscaling.maxReplicas" }}
{{- end }}
{{- end }}
