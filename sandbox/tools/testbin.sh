#!/usr/bin/env bash
# testbin.sh builds the sandbox's binaries (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kwok, kwokctl,
# csi-attacher, csi-provisioner) from the pinned tools modules next to this script, once, into
# a per-version cache outside the repository:
#   ${VIGIL_TESTBIN:-$HOME/.cache/vigil/testbin/<kube version>-<hash of pins.env>}
# Binaries already built for the same tools module (go.mod, go.sum, ldflags) are
# reused, not rebuilt. `testbin.sh --dir` prints the directory.
# `testbin.sh conformance` builds, instead, what `make conformance` runs into the
# same directory: e2e.test (`go test -c k8s.io/kubernetes/test/e2e`), agnhost and ginkgo,
# from the e2e tools module at the same k8s.io/kubernetes version (make testbin
# never builds them: they are not on CI's path).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
GO=${GO:-go}
# shellcheck source=pins.env
source "$here/pins.env"

pin_hash=$(sha256sum "$here/pins.env" | cut -c1-12)
root=${VIGIL_TESTBIN_CACHE:-${HOME}/.cache/vigil/testbin}
dir=${VIGIL_TESTBIN:-$root/${KUBERNETES_VERSION}-${pin_hash}}
set_=sandbox
case "${1:-}" in
--dir)
	echo "$dir"
	exit 0
	;;
conformance) set_=conformance ;;
"") ;;
*)
	echo "testbin: unknown argument '$1': want none (the sandbox's binaries), --dir or conformance" >&2
	exit 2
	;;
esac

# require MODULE_DIR MODULE VERSION: the tools module must pin what pins.env says.
require() {
	local got
	got=$(awk -v m="$2" '$1 == m && $2 ~ /^v/ {print $2; exit} $1 == "require" && $2 == m {print $3; exit}' "$here/$1/go.mod")
	if [[ "$got" != "$3" ]]; then
		echo "testbin: $1/go.mod pins $2 at '${got:-nothing}' but pins.env says $3;" \
			"run: (cd sandbox/tools/$1 && go get $2@$3)" >&2
		exit 1
	fi
}
require etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
require kube k8s.io/kubernetes "$KUBERNETES_VERSION"
require kwok sigs.k8s.io/kwok "$KWOK_VERSION"
require attacher github.com/kubernetes-csi/external-attacher/v4 "$EXTERNAL_ATTACHER_VERSION"
require provisioner github.com/kubernetes-csi/external-provisioner/v6 "$EXTERNAL_PROVISIONER_VERSION"
require e2e k8s.io/kubernetes "$KUBERNETES_VERSION"
for m in kube e2e; do
	if grep -E '^\s*k8s\.io/[a-z-]+ => ' "$here/$m/go.mod" | grep -vq " $KUBERNETES_STAGING_VERSION\$"; then
		echo "testbin: $m/go.mod replaces a staging module with a version other than $KUBERNETES_STAGING_VERSION" >&2
		exit 1
	fi
done

mkdir -p "$dir"
step=0
total=5
[[ $set_ == conformance ]] && total=3
start_all=$SECONDS

# build MODULE_DIR LDFLAGS "BINARY=PACKAGE"...: builds the missing binaries of one
# tools module in one go build (they share most of their packages). Builds land in
# $root/modules/<module>-<hash of its go.mod, go.sum and ldflags>, so that moving
# one pin rebuilds one module only, and are hard-linked into $dir. A build goes to
# a temporary directory first, so an interrupted one leaves nothing half-written.
build() {
	local mod=$1 ldflags=$2
	shift 2
	local key mdir
	key=$(cat "$here/$mod/go.mod" "$here/$mod/go.sum" <(echo "$ldflags") | sha256sum | cut -c1-12)
	mdir="$root/modules/$mod-$key"
	mkdir -p "$mdir"
	local missing=() pkgs=() names=()
	for pair in "$@"; do
		# Present in $dir (e.g. a VIGIL_TESTBIN filled by hand) or built before.
		[[ -x "$dir/${pair%%=*}" ]] && continue
		names+=("${pair%%=*}")
		if [[ ! -x "$mdir/${pair%%=*}" ]]; then
			missing+=("${pair%%=*}")
			pkgs+=("${pair#*=}")
		fi
	done
	step=$((step + 1))
	if [[ ${#missing[@]} -eq 0 ]]; then
		echo "testbin [$step/$total] ${*%%=*}: present"
	else
		build_missing
	fi
	for n in "${names[@]+"${names[@]}"}"; do
		ln -f "$mdir/$n" "$dir/$n" 2>/dev/null || cp -f "$mdir/$n" "$dir/$n"
	done
}

build_missing() {
	echo "testbin [$step/$total] building ${missing[*]} (module sandbox/tools/$mod) ..."
	local t0=$SECONDS tmp
	rm -rf "$mdir"/.build.* # left by an interrupted run
	tmp=$(mktemp -d "$mdir/.build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	local out="$tmp/" cmd=(build)
	# One package: name the output (etcd's main package path ends in /v3).
	[[ ${#pkgs[@]} -eq 1 ]] && out="$tmp/${missing[0]}"
	# A test binary (NAME.test=PACKAGE, one per build): go test -c.
	[[ ${missing[0]} == *.test ]] && cmd=(test -c)
	# go build is silent for minutes: say every minute that it still works.
	(while sleep 60; do echo "testbin [$step/$total]   still building ${missing[*]} ($((SECONDS - t0))s)"; done) &
	local ticker=$! rc=0
	(cd "$here/$mod" && CGO_ENABLED=0 "$GO" "${cmd[@]}" -trimpath -ldflags "-s -w $ldflags" -o "$out" "${pkgs[@]}") || rc=$?
	kill "$ticker" 2>/dev/null || true
	wait "$ticker" 2>/dev/null || true
	if [[ $rc -ne 0 ]]; then
		echo "testbin: building ${missing[*]} failed" >&2
		exit "$rc"
	fi
	for n in "${missing[@]}"; do
		mv "$tmp/$n" "$mdir/$n"
	done
	rmdir "$tmp"
	trap - EXIT
	echo "testbin [$step/$total] built ${missing[*]} in $((SECONDS - t0))s"
}

cv=k8s.io/component-base/version
kube_minor=${KUBERNETES_VERSION#v1.}
kube_minor=${kube_minor%%.*}
kube_ld="-X $cv.gitVersion=$KUBERNETES_VERSION -X $cv.gitMajor=1 -X $cv.gitMinor=$kube_minor -X $cv.gitTreeState=clean"
kube_ld+=" -X $cv.buildDate=1970-01-01T00:00:00Z"
cg=k8s.io/client-go/pkg/version
kube_ld+=" -X $cg.gitVersion=$KUBERNETES_VERSION -X $cg.gitMajor=1 -X $cg.gitMinor=$kube_minor -X $cg.gitTreeState=clean"
kwok_ld="-X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v} -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${KUBERNETES_VERSION#v}"

if [[ $set_ == conformance ]]; then
	build e2e "$kube_ld" e2e.test=k8s.io/kubernetes/test/e2e
	agnhost_version=$(cat "$(cd "$here/e2e" && "$GO" list -m -f '{{.Dir}}' k8s.io/kubernetes)/test/images/agnhost/VERSION")
	build e2e "-X main.Version=$agnhost_version" agnhost=k8s.io/kubernetes/test/images/agnhost
	# ginkgo runs e2e.test's specs in parallel processes (CONFORMANCE_PROCS).
	build e2e "" ginkgo=github.com/onsi/ginkgo/v2/ginkgo
	echo "testbin: e2e.test, agnhost $agnhost_version and ginkgo in $dir ($((SECONDS - start_all))s)"
	exit 0
fi

build etcd "" etcd=go.etcd.io/etcd/server/v3
build kwok "$kwok_ld" kwok=sigs.k8s.io/kwok/cmd/kwok kwokctl=sigs.k8s.io/kwok/cmd/kwokctl
build kube "$kube_ld" \
	kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
	kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
	kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler \
	kubelet=k8s.io/kubernetes/cmd/kubelet \
	kube-proxy=k8s.io/kubernetes/cmd/kube-proxy
build attacher "-X main.version=$EXTERNAL_ATTACHER_VERSION" \
	csi-attacher=github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher
build provisioner "-X main.version=$EXTERNAL_PROVISIONER_VERSION" \
	csi-provisioner=github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner
echo "testbin: all binaries in $dir ($((SECONDS - start_all))s)"
