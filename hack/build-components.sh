#!/usr/bin/env bash
# Builds the real components the federation runs, from the Go module pinned in hack/k8s
# (Kubernetes v1.36.3, etcd v3.6.8 as Kubernetes itself requires) or installed by version.
#
#   bash hack/build-components.sh run    what `make run` starts: kube-apiserver, etcd,
#                                        kube-scheduler, kube-controller-manager, kubemark, kwok,
#                                        and the proxy's OpenSSL (hack/build-openssl.sh)
#   bash hack/build-components.sh test   (the default) all of run, plus what only the tests use:
#                                        the client-go programs (hack/k8s/clients), toxiproxy, helm
#   bash hack/build-components.sh conformance
#                                        all of run, plus e2e.test (the Kubernetes e2e suite,
#                                        `go test -c k8s.io/kubernetes/test/e2e`) for
#                                        `make conformance`; not in test: CI does not pay for it
#
# Binaries are cached in .local/bin keyed by version: only the first run pays for the build.
# Go's own module and build caches (GOMODCACHE, GOCACHE) stay in their default places so they
# stay warm across fresh clones on this machine, and each built binary is also kept in
# $PARTITION_PROXY_CACHE (default ~/.cache/partition-proxy/bin), from which a fresh clone copies it.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bin="$top/.local/bin"
cache="${PARTITION_PROXY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/partition-proxy/bin}"
mkdir -p "$bin" "$cache"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
set_=${1:-test}
case "$set_" in
  run|test|conformance) ;;
  *) echo "usage: $0 [run|test|conformance]   (run: what make run starts; test: everything the tests use;" \
          "conformance: run and e2e.test)" >&2; exit 2 ;;
esac

K8S_VERSION=v1.36.3   # keep in step with hack/k8s/go.mod
ETCD_VERSION=v3.6.8   # the etcd server k8s.io/kubernetes v1.36.3 requires
KWOK_VERSION=v0.8.0   # its go.mod says go 1.26.0 (newer kwok needs Go >= 1.27)

build() {  # build NAME VERSION PACKAGE [LDFLAGS]: a command (`go build`)
  _build "$1" "$2" "$3" "${4:-}" build
}

build_test() {  # build_test NAME VERSION PACKAGE: the test binary of a package (`go test -c`)
  _build "$1" "$2" "$3" "" "test -c"
}

_build() {  # _build NAME VERSION PACKAGE LDFLAGS GOCMD
  local name=$1 version=$2 pkg=$3 ldflags=$4 gocmd=$5
  local out="$bin/$name-$version"
  if [ ! -x "$out" ] && [ -x "$cache/$name-$version" ]; then
    cp "$cache/$name-$version" "$out.tmp" && mv "$out.tmp" "$out"
    echo "$name $version taken from $cache" >&2
  fi
  if [ -x "$out" ]; then
    ln -sf "$name-$version" "$bin/$name"
    return
  fi
  echo "building $name $version from $pkg (cold builds take minutes on 2 cores)..." >&2
  local start=$SECONDS
  # shellcheck disable=SC2086 # GOCMD is two words for `go test -c`
  (cd "$top/hack/k8s" && go $gocmd -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp" "$pkg")
  mv "$out.tmp" "$out"
  ln -sf "$name-$version" "$bin/$name"
  cp "$out" "$cache/$name-$version.tmp" && mv "$cache/$name-$version.tmp" "$cache/$name-$version"
  echo "built $name $version in $((SECONDS - start)) s" >&2
}

minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
vpkg=k8s.io/component-base/version
kversion="-X $vpkg.gitVersion=$K8S_VERSION -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean"
build kube-apiserver "$K8S_VERSION" k8s.io/kubernetes/cmd/kube-apiserver "$kversion"
build etcd "$ETCD_VERSION" go.etcd.io/etcd/server/v3
# The living federation of `make run` (hack/controlplane.py): the control plane's own clients.
build kube-scheduler "$K8S_VERSION" k8s.io/kubernetes/cmd/kube-scheduler "$kversion"
build kube-controller-manager "$K8S_VERSION" k8s.io/kubernetes/cmd/kube-controller-manager "$kversion"
build kubemark "$K8S_VERSION" k8s.io/kubernetes/cmd/kubemark "$kversion"

install() {  # install NAME VERSION PACKAGE BINARY: `go install PACKAGE@VERSION` (modules
  # without replace directives only), binary BINARY renamed to NAME-VERSION.
  local name=$1 version=$2 pkg=$3 binary=$4
  local out="$bin/$name-$version"
  if [ ! -x "$out" ] && [ -x "$cache/$name-$version" ]; then
    cp "$cache/$name-$version" "$out"
  fi
  if [ ! -x "$out" ]; then
    echo "installing $name $version from $pkg..." >&2
    local start=$SECONDS gobin
    gobin=$(mktemp -d)
    (cd "$gobin" && GOBIN="$gobin" GOFLAGS= go install -trimpath -ldflags "-s -w" "$pkg@$version")
    mv "$gobin/$binary" "$out"
    rm -rf "$gobin"
    cp "$out" "$cache/$name-$version"
    echo "installed $name $version in $((SECONDS - start)) s" >&2
  fi
  ln -sf "$name-$version" "$bin/$name"
}

# kwok simulates nodes and their pods (no replace directives: go install works).
install kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok kwok

# The OpenSSL every local proxy runs with (the image's series, 3.5; hack/build-openssl.sh).
bash "$top/hack/build-openssl.sh"

[ "$set_" = run ] && exit 0

if [ "$set_" = conformance ]; then
  # The e2e suite of the pinned module, for hack/conformance.py. Its test-only dependencies are
  # in hack/k8s/go.sum. The largest binary of all (104 MiB) and the longest link.
  build_test e2e.test "$K8S_VERSION" k8s.io/kubernetes/test/e2e
  exit 0
fi

# client-go programs the tests run as clients (hack/k8s/clients), built from the same module.
# Their "version" is a content hash of their sources, go.mod and go.sum: an edit rebuilds them
# (seconds with a warm Go build cache), an unchanged tree copies them from the cache.
clients_hash=$(cd "$top/hack/k8s" &&
  { find clients -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum; sha256sum go.mod go.sum; } |
  sha256sum | cut -c1-12)
build rvcheck "src-$clients_hash" ./clients/rvcheck

# toxiproxy (faults between the proxy and partitions in tests); the binary is named `server`.
install toxiproxy-server v2.12.0 github.com/Shopify/toxiproxy/v2/cmd/server server
# helm (chart lint/template in tests). go install leaves helm's default KubeVersion at v1.20:
# every helm call in this project passes --kube-version.
install helm v3.21.4 helm.sh/helm/v3/cmd/helm helm

# promtool (`promtool check rules` of the chart's alerts in tests/chart/test_operations.py), from
# Debian's prometheus package: downloaded and unpacked, only the binary kept (nothing installed
# system-wide; building it from its Go module pulls in every service-discovery SDK).
PROMTOOL_DEB_VERSION=2.42.0+ds-5+deb12u1   # Debian 12 (bookworm)
promtool_out="$bin/promtool-$PROMTOOL_DEB_VERSION"
if [ ! -x "$promtool_out" ] && [ -x "$cache/promtool-$PROMTOOL_DEB_VERSION" ]; then
  cp "$cache/promtool-$PROMTOOL_DEB_VERSION" "$promtool_out"
fi
if [ ! -x "$promtool_out" ]; then
  echo "installing promtool from Debian's prometheus $PROMTOOL_DEB_VERSION..." >&2
  debdir=$(mktemp -d)
  (cd "$debdir" && { apt-get download "prometheus=$PROMTOOL_DEB_VERSION" 2>/dev/null ||
                     { apt-get update -qq && apt-get download "prometheus=$PROMTOOL_DEB_VERSION"; }; } &&
   dpkg-deb -x prometheus_*.deb x)
  mv "$debdir/x/usr/bin/promtool" "$promtool_out"
  rm -rf "$debdir"
  cp "$promtool_out" "$cache/promtool-$PROMTOOL_DEB_VERSION"
fi
ln -sf "promtool-$PROMTOOL_DEB_VERSION" "$bin/promtool"
