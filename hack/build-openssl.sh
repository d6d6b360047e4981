#!/usr/bin/env bash
# Builds the OpenSSL the proxy's Python runs with in every local federation (make run, the tests,
# the benchmarks): OpenSSL 3.5, the series of the image's base (python:3.11-slim is Debian 13,
# OpenSSL 3.5), instead of this machine's Debian 12 OpenSSL 3.0, whose X.509 decoding makes a
# TLS handshake with a client certificate cost ~1.5 ms of CPU against ~1.0 ms with 3.5
# (`python -m bench.tls_handshake`). Python's _ssl and _hashlib load it through LD_LIBRARY_PATH
# (`hack.openssl.proxy_env`); libssl.so.3 keeps its ABI across 3.x.
#
#   bash hack/build-openssl.sh      -> .local/openssl/lib/{libssl,libcrypto}.so.3
#
# The source is the openssl-src crate from crates.io (the OpenSSL release tree, pinned by its
# registry checksum), which leaves out util/mkdef.pl; hack/openssl-mkdef.pl stands in for it.
# Built once (about 2 minutes on 2 cores) and kept in $PARTITION_PROXY_CACHE, from which a
# fresh clone copies it.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cache="${PARTITION_PROXY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/partition-proxy/bin}"

CRATE_VERSION=300.5.5+3.5.5   # openssl-src 300.5.5 carries OpenSSL 3.5.5
CRATE_SHA256=3f1787d533e03597a7934fd0a765f0d28e94ecc5fb7789f8053b1e699a56f709  # index.crates.io cksum
version=${CRATE_VERSION#*+}
out="$top/.local/openssl-$version"
link="$top/.local/openssl"

if [ ! -f "$out/lib/libssl.so.3" ] && [ -f "$cache/openssl-$version/lib/libssl.so.3" ]; then
  mkdir -p "$out.tmp" && cp -r "$cache/openssl-$version/lib" "$out.tmp/" && rm -rf "$out" && mv "$out.tmp" "$out"
  echo "openssl $version taken from $cache" >&2
fi
if [ ! -f "$out/lib/libssl.so.3" ]; then
  echo "building openssl $version from the openssl-src crate (about 2 minutes on 2 cores)..." >&2
  start=$SECONDS
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  curl -sSfL --retry 3 -o "$work/src.crate" "https://static.crates.io/crates/openssl-src/openssl-src-$CRATE_VERSION.crate"
  echo "$CRATE_SHA256  $work/src.crate" | sha256sum -c --quiet -
  tar xzf "$work/src.crate" -C "$work"
  src="$work/openssl-src-$CRATE_VERSION/openssl"
  cp "$top/hack/openssl-mkdef.pl" "$src/util/mkdef.pl"
  # Shared libraries only (no apps, tests or docs); the providers built in (no-module), no
  # legacy provider or zlib: what Python's ssl and hashlib use. OPENSSLDIR is the system's
  # (/usr/lib/ssl on Debian): its openssl.cnf and CA certificates, as the system OpenSSL.
  if ! (cd "$src" && ./Configure linux-x86_64 shared no-module no-legacy no-tests no-docs no-zlib \
          --prefix="$out" --libdir=lib --openssldir=/usr/lib/ssl && make -j"$(nproc)" build_libs) >"$work/build.log" 2>&1; then
    tail -30 "$work/build.log" >&2
    echo "building openssl $version failed (the whole log: $work/build.log, kept)" >&2
    trap - EXIT
    exit 1
  fi
  mkdir -p "$out.tmp/lib"
  cp "$src/libssl.so.3" "$src/libcrypto.so.3" "$out.tmp/lib/"
  rm -rf "$out" && mv "$out.tmp" "$out"
  mkdir -p "$cache/openssl-$version.tmp" && cp -r "$out/lib" "$cache/openssl-$version.tmp/" &&
    rm -rf "$cache/openssl-$version" && mv "$cache/openssl-$version.tmp" "$cache/openssl-$version"
  echo "built openssl $version in $((SECONDS - start)) s" >&2
fi
ln -sfn "openssl-$version" "$link"
# The proof that it loads: Python's ssl module reports it.
LD_LIBRARY_PATH="$link/lib" python3 -c "import ssl; assert ssl.OPENSSL_VERSION.startswith('OpenSSL $version'), ssl.OPENSSL_VERSION"
