#!/usr/bin/env bash
# run.sh is `make conformance`: the upstream Kubernetes storage end-to-end
# suite (e2e.test, built from k8s.io/kubernetes at the control plane's
# version) against Vigil installed from deploy/ on a sandbox of real nodes.
#
#   1. check that e2e.test's image references (KUBE_TEST_REPO_LIST=repo-list.yaml)
#      are those of the images built here;
#   2. vigil-sandbox up --nodes 3 --kubelet real --install, importing the images
#      of make image and of the conformance set into every node;
#   3. e2e.test --storage.testdriver=driver.yaml, focused on the External
#      Storage tests of CONFORMANCE_SUITES, JUnit report and log under
#      CONFORMANCE_REPORT;
#   4. print the counts per suite (vigil-sandbox junit-summary), tear down.
#
# Needs root, like every sandbox. Environment:
#   CONFORMANCE_REPORT  report directory (default $TMPDIR/vigil-conformance-report)
#   CONFORMANCE_SUITES  comma-separated suites (default the six below)
#   CONFORMANCE_SKIP    ginkgo skip expression (default: disruptive and feature-gated tests)
#   CONFORMANCE_KEEP=1  leave the sandbox up afterwards (vigil-sandbox --name conformance down)
#   CONFORMANCE_TIMEOUT ginkgo's timeout for the whole run (default 3h)
#   CONFORMANCE_PROCS   specs run in parallel in this many processes (ginkgo -p; default 1)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=$root/bin
sandbox="$bin/vigil-sandbox --name conformance"
testbin=$("$root/sandbox/tools/testbin.sh" --dir)
report=${CONFORMANCE_REPORT:-${TMPDIR:-/tmp}/vigil-conformance-report}
suites=${CONFORMANCE_SUITES:-provisioning,volumes,volumeMode,multiVolume,subPath,volumeIO}
# Left out by default, each for a reason of this sandbox, not of Vigil
# (docs/conformance.md):
#   - [Disruptive]: they restart a node's kubelet over SSH, which a sandbox
#     node does not offer; [Feature:...]: what driver.yaml does not declare
#     (csi-driver-host-path's CI leaves both out too);
#   - "any volume data source": it runs the hello-populator and the
#     volume-data-source-validator, images that are not built here;
#   - "should not mount / map unused volumes": it looks at the node through a
#     hostexec pod that enters PID 1's mount namespace, and a sandbox node's
#     pods see this machine's PID 1, which they may not enter.
skip=${CONFORMANCE_SKIP:-'\[Disruptive\]|\[Feature:|should provision storage with any volume data source|should not mount / map unused volumes in a pod'}
timeout=${CONFORMANCE_TIMEOUT:-3h}
procs=${CONFORMANCE_PROCS:-1}
e2e_images=$bin/e2e-images

for f in "$testbin/e2e.test" "$testbin/ginkgo" "$testbin/agnhost" "$bin/vigil-sandbox"; do
	if [[ ! -x $f ]]; then
		echo "conformance: $f is missing: run make conformance-testbin and make build (make conformance does both)" >&2
		exit 1
	fi
done
if [[ ! $procs =~ ^[1-9][0-9]?$ ]]; then
	echo "conformance: CONFORMANCE_PROCS='$procs': want a number of processes from 1 to 99" >&2
	exit 2
fi
if [[ $suites =~ [^A-Za-z,] ]]; then
	echo "conformance: CONFORMANCE_SUITES='$suites': want suite names separated by commas, e.g. provisioning,subPath" >&2
	exit 2
fi
focus="External Storage \[Driver: driver\.vigil\.io\] \[Testpattern: [^]]*\] (${suites//,/|}) "

mkdir -p "$report"
rm -f "$report"/junit_*.xml
export KUBE_TEST_REPO_LIST=$here/repo-list.yaml

# 1. e2e.test must ask for exactly the references built here.
"$testbin/e2e.test" --list-images >"$report/e2e-images.txt"
for name in e2e-agnhost e2e-busybox e2e-nginx e2e-jessie-dnsutils; do
	ref=$(tar -xOf "$e2e_images/$name.tar" manifest.json | sed -n 's/.*"RepoTags":\["\([^"]*\)".*/\1/p')
	if ! grep -qxF "$ref" "$report/e2e-images.txt"; then
		echo "conformance: the image $name is built as $ref, which e2e.test does not use; it uses:" >&2
		grep e2e-test-images "$report/e2e-images.txt" >&2
		echo "(sandbox/images/e2e.go names the versions of test/utils/image/manifest.go)" >&2
		exit 1
	fi
done

# 2. A real-node sandbox with Vigil installed from deploy/.
images=()
for f in "$bin"/images/*.tar "$e2e_images"/*.tar; do
	images+=(--node-image "$f")
done
if [[ ${CONFORMANCE_KEEP:-} != 1 ]]; then
	trap '$sandbox down >/dev/null 2>&1 || true' EXIT
fi
$sandbox down >/dev/null 2>&1 || true
t0=$SECONDS
$sandbox up --nodes 3 --kubelet real --install "${images[@]}" 2>&1 | tee "$report/sandbox-up.log"
kubeconfig=$($sandbox kubeconfig)
echo "conformance: sandbox up and Vigil installed in $((SECONDS - t0))s"

# 3. The suite. Its namespaces are deleted after each test, failed or not.
echo "conformance: e2e.test, suites $suites; log in $report/e2e.log"
t1=$SECONDS
rc=0
e2e_args=(--kubeconfig="$kubeconfig" --storage.testdriver="$here/driver.yaml" --report-dir="$report")
ginkgo_args=(--focus="$focus" --skip="$skip" --timeout="$timeout" --no-color --v)
if [[ $procs -gt 1 ]]; then
	# ginkgo runs the specs in $procs processes; [Serial] ones run alone at the end.
	(cd "$here" && "$testbin/ginkgo" --procs="$procs" "${ginkgo_args[@]}" "$testbin/e2e.test" -- "${e2e_args[@]}") >"$report/e2e.log" 2>&1 || rc=$?
else
	(cd "$here" && "$testbin/e2e.test" "${e2e_args[@]}" "${ginkgo_args[@]/#--/--ginkgo.}") >"$report/e2e.log" 2>&1 || rc=$?
fi
echo "conformance: e2e.test exited $rc after $((SECONDS - t1))s"

# 4. The counts.
junit=$report/junit_01.xml
if [[ ! -s $junit ]]; then
	echo "conformance: e2e.test wrote no JUnit report; the end of its log:" >&2
	tail -40 "$report/e2e.log" >&2
	exit 1
fi
$sandbox junit-summary --fail "$junit" | tee "$report/summary.txt"
