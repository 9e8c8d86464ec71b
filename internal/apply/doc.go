// Package apply applies rendered Kubernetes objects to one edge cluster with
// server-side apply, and deletes them again.
//
// An Applier holds a dynamic client and a discovery-backed RESTMapper for one
// cluster. It is what a per-cluster sync worker calls, object by object, in the
// plan's order:
//
//	a, err := apply.New(cfg, apply.Options{})
//	if err != nil { ... }
//	for _, obj := range objects { // namespaces, CRDs, then the rest
//		apply.Label(obj, map[string]string{apply.LabelDIG: dig, apply.LabelApp: app})
//		res, err := a.Apply(ctx, obj)
//		switch {
//		case apply.IsUnreachable(err): // the cluster did not answer: back off, retry later
//		case apply.IsRejected(err): // the object itself is bad: mark it Failed
//		case err != nil: // the cluster cannot take it now: retry later
//		}
//		record(res.Ref, res.Operation)
//	}
//
// What Apply does beyond a plain patch:
//
//   - A namespaced object without a namespace goes to Options.DefaultNamespace;
//     a namespace on a cluster-scoped object is dropped (as kubectl and Helm do).
//   - The object's namespace is created when it is missing (and remembered, so
//     that it is looked up once per Applier); Result.CreatedNamespace says so.
//   - A CustomResourceDefinition is waited for until it is Established and its
//     kinds are served by discovery, so that custom resources of it can be
//     applied right after.
//   - The Result says whether the object was created, changed or left as it was.
//
// Errors name the operation and the object ("apply apps/v1 Deployment web/api")
// and carry an errs.Kind: errs.Unavailable when the cluster did not answer or
// cannot serve now (IsUnreachable), errs.Invalid when the API server refused the
// object (IsRejected), errs.Conflict or errs.NotFound when the cluster cannot take
// it yet (a terminating namespace, a CRD that does not become Established in time).
// Errors about a Secret carry its name and the fields at fault, never the server's
// message text, which could quote a value.
package apply
