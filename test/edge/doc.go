// Package edge starts simulated edge clusters for Atoll's tests: each one is a real
// kube-apiserver with its own etcd, started through controller-runtime's envtest, and
// optionally kube-controller-manager, kube-scheduler and kwok with one fake Node so that
// workloads really run.
//
// The binaries come from the folder named by KUBEBUILDER_ASSETS, which `make test` sets;
// by hand:
//
//	export KUBEBUILDER_ASSETS=$(hack/testbin.sh)
//	go test ./test/...
//
// A test starts its clusters with Start, which stops them again in t.Cleanup:
//
//	func TestPlacement(t *testing.T) {
//		clusters := edge.Start(t, 3, edge.Options{Workloads: true})
//		for _, c := range clusters {
//			registerEdge(t, hub, c.Name(), c.Kubeconfig())
//		}
//		clusters[1].Stop(t.Context()) // the edge goes offline ...
//		// ...
//		clusters[1].Restart(t.Context()) // ... and comes back, same port, same data
//	}
//
// Benchmarks and tools use StartOne and Close instead.
//
// Every cluster has a temporary folder holding its certificates, its etcd data and one
// log file per process (logs/etcd.log, logs/kube-apiserver.log, ...); process output never
// goes to the test output. Close removes the folder; when a test that used Start failed,
// the logs are kept and their path is logged. When a test binary dies without cleaning
// up (go test -timeout), the next StartOne in any test binary kills its leftover etcd and
// kube-apiserver processes and keeps only their logs.
package edge
