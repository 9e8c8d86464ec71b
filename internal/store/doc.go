// Package store is Atoll's typed object store on etcd.
//
// Every object the API knows is a JSON document under one key derived from its
// Kind and the names on its path (a cluster lives under its cluster provider, a
// label under its cluster). The store gives the guarantees the rest of the hub
// relies on, each as a single etcd transaction:
//
//   - Create fails if the object exists or its parent does not, and checks that
//     every object it references exists.
//   - Update compares the object's revision (compare-and-swap): a caller that read
//     an older revision gets a conflict instead of overwriting a newer write.
//   - Delete fails while the object has children or is referenced by another object.
//   - List returns the direct children of one kind under a parent, in name order.
//
// Errors are *errs.Error values of kind NotFound, Exists, Conflict or Invalid, with
// messages that name the objects involved, so the API can answer them as they are.
//
//	kinds := store.NewSchema()
//	providers := kinds.Add("cluster-providers", "cluster provider", nil)
//	clusters := kinds.Add("clusters", "cluster", providers)
//	s := store.New(client, kinds, "/atoll")
//	rev, err := s.Create(ctx, store.K(clusters, "cp1", "edge-1"), &cluster)
package store
