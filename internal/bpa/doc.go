// Package bpa is the BPA operator (the seeds' Binary Provisioning Agent): the
// controllers that turn metal3 BareMetalHosts into a Kubernetes cluster with
// kubespray, and keep it.
//
// # Provisioning
//
// Each pass of the Provisioning controller derives everything from what exists
// (the Provisioning, the BareMetalHosts and the Jobs it owns, the kubeconfig
// Secret), never from memory of an earlier pass:
//
//  1. Choose the hosts (package hostselect) among the BareMetalHosts of the
//     configured namespaces, and claim them on the hosts themselves (package
//     baremetal): all of them or none, with optimistic locking, so that two
//     Provisionings never share a host. Too few hosts: HostsSelected=False with what
//     is missing, and a new pass whenever a BareMetalHost changes.
//  2. Write the inventory, ConfigMap <cluster>-inventory (hosts.ini from package
//     inventory, vars.yml), owned by the Provisioning: InventoryReady.
//  3. Run one installer Job at a time (package installer), owned by the
//     Provisioning, named after a hash of everything it depends on: cluster.yml
//     when the cluster has no kubeconfig yet, then remove-node.yml for joined hosts
//     no longer wanted, then scale.yml for claimed hosts that have not joined.
//     While a Job runs nothing else changes (Installing=True); its completion or
//     failure is seen through the watch on owned Jobs. A failed Job sets Failed with
//     the Job's reason and message; a change of the spec or of the hosts makes a new
//     Job name and so a new attempt.
//  4. After cluster.yml: the kubeconfig hand-off. The install Job writes the admin
//     kubeconfig into the Secret <cluster>-kubeconfig-handoff (key "kubeconfig"),
//     which the operator created empty and which the Job's ServiceAccount may write
//     and nothing else. The operator checks it, keeps it in the Secret
//     <cluster>-kubeconfig owned by the Provisioning (status.kubeconfigSecretRef),
//     and empties the hand-off Secret. It is never put in a ConfigMap or a file.
//  5. Ready=True when the cluster is installed and every wanted host has joined.
//
// Deleting a Provisioning (finalizer bpa.akraino.org/release-hosts) stops its
// Jobs, releases its hosts and deletes the ConfigMap, Secrets, ServiceAccount,
// Role and RoleBinding it made. The hosts are released as they are: nothing is
// run on them.
//
// Errors: a bad spec or an object in the way is terminal (Failed=True, no retry
// until something changes); an API error is transient (returned, retried with
// backoff).
//
// # Software
//
// A Software names a cluster of its namespace and the packages of each role. The
// Software controller runs one package-update Job per role (ansible's apt module
// over the role's joined hosts), named after a hash of the packages and the hosts,
// so a new package list or a new host is a new Job; status.hosts says, per host,
// Updating, Updated or Failed.
//
// # RBAC
//
// The operator reads BareMetalHosts and patches their metadata; it manages
// Provisionings and Softwares (and their status), Jobs, ConfigMaps, Secrets,
// ServiceAccounts, Roles and RoleBindings in the namespaces of its Provisionings.
// Because it creates the Role that lets the install Job write the hand-off Secret,
// it needs get, update and patch on Secrets itself (Kubernetes refuses to let it
// grant more than it has).
package bpa
