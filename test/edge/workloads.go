package edge

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// kubeControllers is the smallest kube-controller-manager set for what Options.Workloads
// promises. Without node-lifecycle-controller Pods stay Pending: the API server taints
// new Nodes node.kubernetes.io/not-ready and only that controller removes the taint.
// No service-account controllers: envtest's API server runs without the ServiceAccount
// admission plugin, so Pods need no token.
var kubeControllers = []string{
	"deployment-controller",
	"replicaset-controller",
	"node-lifecycle-controller",
	"namespace-controller",         // finishes Namespace deletion
	"garbage-collector-controller", // deleting a Deployment removes its ReplicaSets and Pods
	"job-controller",               // Jobs (Helm hooks) complete once kwok completes their Pods
}

// nodeResources is the fake Node's capacity and allocatable.
var nodeResources = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("4"),
	corev1.ResourceMemory: resource.MustParse("8Gi"),
	corev1.ResourcePods:   resource.MustParse("110"),
}

// workloadStopTimeout bounds the graceful stop of a workload process.
const workloadStopTimeout = 10 * time.Second

func (c *Cluster) nodeName() string { return c.name + "-node" }

func (c *Cluster) kubeconfigPath() string { return filepath.Join(c.dir, "kubeconfig") }

// setUpWorkloads writes the kubeconfig file the processes need, creates the Node,
// starts the processes and waits until the Node can take Pods.
func (c *Cluster) setUpWorkloads(ctx context.Context) error {
	if err := os.WriteFile(c.kubeconfigPath(), c.kubeconfig, 0o600); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(c.cfg)
	if err != nil {
		return err
	}
	if err := c.createNode(ctx, cs); err != nil {
		return err
	}
	if err := c.startWorkloads(); err != nil {
		return err
	}
	return c.waitNodeSchedulable(ctx, cs)
}

func (c *Cluster) createNode(ctx context.Context, cs kubernetes.Interface) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: c.nodeName(),
			Labels: map[string]string{
				"type":                 "kwok",
				corev1.LabelHostname:   c.nodeName(),
				corev1.LabelOSStable:   "linux",
				corev1.LabelArchStable: "amd64",
			},
			// kwok runs with --manage-all-nodes, so this only documents what the Node is.
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
		},
		Status: corev1.NodeStatus{Capacity: nodeResources, Allocatable: nodeResources},
	}
	// The Node registry keeps status on create, so no UpdateStatus is needed.
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating node %s: %w", node.Name, err)
	}
	return nil
}

// startWorkloads starts kwok, kube-controller-manager and kube-scheduler.
func (c *Cluster) startWorkloads() error {
	kubeconfig := "--kubeconfig=" + c.kubeconfigPath()
	specs := []struct {
		name string
		args []string
	}{
		{"kwok", []string{kubeconfig, "--manage-all-nodes=true", "--config=" + filepath.Join(c.assets, "kwok-stages.yaml")}},
		{"kube-controller-manager", []string{kubeconfig, "--leader-elect=false", "--secure-port=0",
			"--controllers=" + strings.Join(kubeControllers, ",")}},
		{"kube-scheduler", []string{kubeconfig, "--leader-elect=false", "--secure-port=0"}},
	}
	for _, s := range specs {
		p, err := startProc(s.name, filepath.Join(c.assets, s.name), s.args, c.logPath(s.name+".log"))
		if err != nil {
			return errors.Join(err, c.stopWorkloads())
		}
		c.procs = append(c.procs, p)
	}
	return nil
}

// stopWorkloads stops the workload processes, scheduler first.
func (c *Cluster) stopWorkloads() error {
	var err error
	for i := len(c.procs) - 1; i >= 0; i-- {
		err = errors.Join(err, c.procs[i].stop(workloadStopTimeout))
	}
	c.procs = nil
	return err
}

// exitedWorkload reports a workload process that has exited, with the end of its log.
func (c *Cluster) exitedWorkload() error {
	for _, p := range c.procs {
		if exited, err := p.exited(); exited {
			return fmt.Errorf("%s exited (%v)%s", p.name, err, c.logTails(p.name+".log"))
		}
	}
	return nil
}

// waitNodeSchedulable waits until kwok has made the Node Ready and the node-lifecycle
// controller has removed the not-ready taint.
func (c *Cluster) waitNodeSchedulable(ctx context.Context, cs kubernetes.Interface) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, readyTimeout, true, func(ctx context.Context) (bool, error) {
		if err := c.exitedWorkload(); err != nil {
			return false, err
		}
		node, err := cs.CoreV1().Nodes().Get(ctx, c.nodeName(), metav1.GetOptions{})
		if err != nil {
			last = err
			return false, nil
		}
		if !nodeReady(node) {
			last = fmt.Errorf("node %s is not Ready", node.Name)
			return false, nil
		}
		for _, taint := range node.Spec.Taints {
			if taint.Effect == corev1.TaintEffectNoSchedule || taint.Effect == corev1.TaintEffectNoExecute {
				last = fmt.Errorf("node %s still has taint %s", node.Name, taint.ToString())
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("waiting for node %s: %w (last: %w)%s", c.nodeName(), err, last,
			c.logTails("kwok.log", "kube-controller-manager.log"))
	}
	return err
}

func nodeReady(node *corev1.Node) bool {
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}
