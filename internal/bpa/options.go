package bpa

import "time"

// Options tune both controllers. The zero value is usable.
type Options struct {
	// HostNamespaces are the namespaces whose BareMetalHosts may be used; empty
	// means every namespace.
	HostNamespaces []string
	// HostStates are the provisioning states in which a free host may be taken
	// (hostselect.DefaultStates when empty).
	HostStates []string
	// BackoffLimit is the installer Jobs' backoffLimit (0: no retry; `atoll bpa`
	// defaults to 1, as kubespray is idempotent and one retry absorbs a flaky SSH
	// connection).
	BackoffLimit int32
	// HandoffTimeout is how long after an install Job completes the kubeconfig may
	// take to appear in the hand-off Secret (default 2 minutes).
	HandoffTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.HandoffTimeout <= 0 {
		o.HandoffTimeout = 2 * time.Minute
	}
	return o
}
