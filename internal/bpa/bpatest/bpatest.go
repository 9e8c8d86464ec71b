// Package bpatest helps tests of the BPA operator against real API servers: it
// installs the CRDs (the committed config/crd and metal3's from the shared test
// data), runs the operator, creates BareMetalHosts with hardware data and plays
// the part of the kubelet and of the installer (a Job completes or fails, the
// kubeconfig is handed back) — there are no kubelets in these tests.
package bpatest

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/atoll-edge/atoll/config/crd"
	"github.com/atoll-edge/atoll/internal/bpa"
	"github.com/atoll-edge/atoll/internal/bpa/baremetal"
	"github.com/atoll-edge/atoll/internal/bpa/installer"
	"github.com/atoll-edge/atoll/internal/bpa/operator"
)

// metal3CRDYAML is metal3's BareMetalHost CRD, a copy of the project's shared test
// data (shared/testdata/crds), kept in the repository so that the tests need
// nothing beside it.
//
//go:embed testdata/metal3.io_baremetalhosts.yaml
var metal3CRDYAML []byte

// InstallCRDs installs the BPA CRDs and the metal3 BareMetalHost CRD into the API
// server at cfg and waits until they are served.
func InstallCRDs(cfg *rest.Config) error {
	crds, err := crd.CRDs()
	if err != nil {
		return err
	}
	metal3, err := metal3CRD()
	if err != nil {
		return err
	}
	_, err = envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{
		CRDs: append(crds, metal3), ErrorIfPathMissing: true, MaxTime: time.Minute, PollInterval: 100 * time.Millisecond,
	})
	if err != nil {
		return fmt.Errorf("install the CRDs: %w", err)
	}
	return nil
}

// metal3CRD decodes the metal3 CRD.
func metal3CRD() (*apiextensionsv1.CustomResourceDefinition, error) {
	out := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(metal3CRDYAML, out); err != nil {
		return nil, fmt.Errorf("bpatest: decode the metal3 CRD: %w", err)
	}
	return out, nil
}

// Client returns a client of the API server at cfg that knows the BPA types.
func Client(cfg *rest.Config) (client.Client, error) {
	scheme, err := bpa.NewScheme()
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 200, 400 // tests poll; client-go's default of 5/s would throttle them
	return client.New(cfg, client.Options{Scheme: scheme})
}

// RunOperator runs the operator against cfg, serving namespace (and taking hosts
// from it), until the test ends. HandoffTimeout is short, for tests.
func RunOperator(t testing.TB, cfg *rest.Config, namespace string) {
	t.Helper()
	oc := operator.NewConfig()
	oc.MetricsAddr, oc.ProbeAddr = "0", "0"
	oc.WatchNamespaces = []string{namespace}
	oc.HostNamespaces = []string{namespace}
	oc.HandoffTimeout = 10 * time.Second
	oc.LogLevel = "warn"
	if l := os.Getenv("BPA_TEST_LOG_LEVEL"); l != "" {
		oc.LogLevel = l
	}
	oc.SeveralInProcess = true
	mgr, err := operator.New(oc, rest.CopyConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("operator: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("operator did not stop within 30s")
		}
	})
}

// Namespace creates a namespace for one test, named prefix-<random>, with an SSH
// key Secret in it named "ssh-key", and returns its name.
func Namespace(t testing.TB, c client.Client, prefix string) string {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	name := ns.Name
	key := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ssh-key", Namespace: name}, Type: corev1.SecretTypeSSHAuth,
		Data: map[string][]byte{installer.SSHKeyKey: []byte("-----BEGIN OPENSSH PRIVATE KEY-----\ntest\n-----END OPENSSH PRIVATE KEY-----\n")}}
	if err := c.Create(ctx, key); err != nil {
		t.Fatal(err)
	}
	return name
}

// Hardware is what a test BareMetalHost reports.
type Hardware struct {
	CPUs      int64
	MemoryMiB int64
	// NICs are MAC → IP ("" for a NIC without an address); the first is the boot NIC.
	NICs  [][2]string
	State string // provisioning state; "available" when empty
}

// CreateHost creates a BareMetalHost and sets its status (as metal3's inspection
// would) through the status subresource.
func CreateHost(t testing.TB, c client.Client, namespace, name string, hw Hardware) {
	t.Helper()
	ctx := context.Background()
	u := baremetal.New()
	u.SetNamespace(namespace)
	u.SetName(name)
	spec := map[string]any{"online": true}
	var nics []any
	for i, n := range hw.NICs {
		if i == 0 {
			spec["bootMACAddress"] = n[0]
		}
		nic := map[string]any{"mac": n[0], "name": fmt.Sprintf("eth%d", i)}
		if n[1] != "" {
			nic["ip"] = n[1]
		}
		nics = append(nics, nic)
	}
	u.Object["spec"] = spec
	if err := c.Create(ctx, u); err != nil {
		t.Fatalf("create BareMetalHost %s: %v", name, err)
	}
	state := hw.State
	if state == "" {
		state = "available"
	}
	u.Object["status"] = map[string]any{
		"errorCount": int64(0), "errorMessage": "", "operationalStatus": "OK", "poweredOn": true, "provisioningFailCount": int64(0),
		"provisioning": map[string]any{"ID": "ironic-" + name, "state": state},
		"hardware": map[string]any{
			"hostname": name, "cpu": map[string]any{"count": hw.CPUs, "arch": "x86_64"},
			"ramMebibytes": hw.MemoryMiB, "nics": nics,
		},
	}
	if err := c.Status().Update(ctx, u); err != nil {
		t.Fatalf("set the status of BareMetalHost %s: %v", name, err)
	}
}

// Eventually polls cond every 100ms until it is true, and fails the test with the
// last message after timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, msg := cond(ctx)
		last = msg
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not within %s; last: %s", what, timeout, last)
	}
}

// FinishJob plays the Job controller: it marks the Job complete, or failed with
// message, through the status subresource.
func FinishJob(ctx context.Context, c client.Client, job *batchv1.Job, failMessage string) error {
	now := metav1.Now()
	job.Status.StartTime = &now
	if failMessage == "" {
		job.Status.Succeeded = 1
		job.Status.CompletionTime = &now
		job.Status.Conditions = append(job.Status.Conditions,
			batchv1.JobCondition{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now, LastProbeTime: now},
			batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now, LastProbeTime: now})
	} else {
		job.Status.Failed = 1
		job.Status.Conditions = append(job.Status.Conditions,
			batchv1.JobCondition{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: failMessage, LastTransitionTime: now, LastProbeTime: now},
			batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: failMessage, LastTransitionTime: now, LastProbeTime: now})
	}
	if err := c.Status().Update(ctx, job); err != nil {
		return fmt.Errorf("finish Job %s: %w", job.Name, err)
	}
	return nil
}

// HandBack plays the installer's last step: it writes kubeconfig into the
// cluster's hand-off Secret, as the install Job's ServiceAccount would.
func HandBack(ctx context.Context, c client.Client, namespace, cluster string, kubeconfig []byte) error {
	var s corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: installer.HandoffName(cluster)}, &s); err != nil {
		return fmt.Errorf("the hand-off Secret: %w", err)
	}
	s.Data = map[string][]byte{installer.KubeconfigKey: kubeconfig}
	return c.Update(ctx, &s)
}

// Jobs lists the Jobs of namespace with operation op ("" for all).
func Jobs(ctx context.Context, c client.Client, namespace string, op installer.Operation) ([]batchv1.Job, error) {
	var list batchv1.JobList
	opts := []client.ListOption{client.InNamespace(namespace)}
	if op != "" {
		opts = append(opts, client.MatchingLabels{installer.LabelOperation: string(op)})
	}
	if err := c.List(ctx, &list, opts...); err != nil {
		return nil, err
	}
	return list.Items, nil
}
