// Package demo is `make run`: Vigil's live demonstration on a sandbox, the
// `demo` subcommand of bin/vigil-sandbox.
//
// Run brings up a 3-node sandbox (package sandbox) with Vigil's volume stack
// under the identities of deploy/, installs the CRDs, and starts
// `vigil-manager run` as a host process of the sandbox under the manager's
// identity, wired to the datapath, with the policy
// delete-both-statefulset-and-deployment-pod and the fast fenced trigger on,
// its settings in a bbolt file (the embedded default store) and its UI, REST
// API and metrics on Config.Listen (127.0.0.1:9500). It then creates the demo
// workload: a StatefulSet whose pod has a volume of the StorageClass vigil,
// and a writer (package sandbox/ledger) on the pod's node that appends
// checksummed records to the volume and acknowledges each in a ledger on the
// host once fsync returned.
//
// While it runs, it follows what happens and prints it as it happens: the
// pods of the StatefulSet (scheduled, Running, Terminating, gone), each
// NodeRecovery's timeline (detected, fenced, tainted, pods reaped,
// attachments freed, replacements Running, the node's return), and, when a
// replacement's volume is published on its new node, the data check: every
// record the previous writer acknowledged must be on the volume there.
// Then a new writer starts for the replacement.
//
// Interactive (the default), it prints what to try, with a ready KUBECONFIG
// line, and runs until its context ends (Ctrl-C). With Config.Auto, it cuts
// the power of the node that runs the demo pod once everything is up, and
// returns nil once the replacement runs elsewhere and the data check passed,
// an error after Config.Timeout otherwise. Either way it removes the whole
// sandbox before returning, and checks that nothing is left: no work
// directory, no network namespace of the sandbox, no process started in it.
//
// The package owns only the demonstration; the cluster, the stack and the
// processes are sandbox's, the writer and its checks ledger's. The end-to-end
// suite runs the auto mode once (test/e2e, TestDemo_Auto).
package demo
