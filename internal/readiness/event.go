package readiness

import (
	"maps"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/atoll-edge/atoll/internal/apply"
)

// Status is an object's readiness as kstatus computes it.
type Status string

// The statuses, as kstatus names them.
const (
	Current     Status = Status(status.CurrentStatus)     // ready: reconciled and healthy
	InProgress  Status = Status(status.InProgressStatus)  // being reconciled (e.g. a Deployment rolling out)
	Failed      Status = Status(status.FailedStatus)      // reconciling has stalled (e.g. progress deadline exceeded)
	Terminating Status = Status(status.TerminatingStatus) // being deleted
	NotFound    Status = Status(status.NotFoundStatus)    // gone, or no longer matches the selector
	Unknown     Status = Status(status.UnknownStatus)     // the object's status could not be read
)

// Event is what the Watcher knows of one object after a change.
type Event struct {
	// Ref names the object; it matches apply.Result.Ref of the object applied.
	Ref apply.ObjectRef
	// Labels are the object's labels (the last known ones once it is gone).
	Labels map[string]string
	// Status is the kstatus verdict; NotFound when Present is false.
	Status Status
	// Present is false once the object is deleted or stops matching the selector.
	Present bool
	// Message is kstatus's explanation, such as "Deployment is available. Replicas: 2".
	Message string
}

// Ready reports whether the object exists and is Current.
func (e Event) Ready() bool { return e.Present && e.Status == Current }

// eventFor judges a present object with kstatus.
func eventFor(obj *unstructured.Unstructured) Event {
	ev := Event{Ref: apply.RefOf(obj), Labels: maps.Clone(obj.GetLabels()), Present: true}
	res, err := status.Compute(obj)
	switch {
	case err != nil:
		ev.Status, ev.Message = Unknown, "computing status: "+err.Error()
	case res == nil:
		ev.Status = Unknown
	default:
		ev.Status, ev.Message = Status(res.Status), res.Message
	}
	return ev
}

// goneEvent is the event of an object deleted (or out of the selector), from the
// informer's delete notification, which may be a tombstone.
func goneEvent(obj any) (Event, bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return Event{}, false
	}
	return Event{
		Ref:     apply.RefOf(u),
		Labels:  maps.Clone(u.GetLabels()),
		Status:  NotFound,
		Message: "object is gone",
	}, true
}

// slim is the informers' transform: it drops what readiness never reads, so the
// hub's caches stay small and hold no ConfigMap or Secret payloads.
func slim(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	u.SetManagedFields(nil)
	if ann := u.GetAnnotations(); ann != nil {
		if _, ok := ann[lastApplied]; ok {
			delete(ann, lastApplied)
			u.SetAnnotations(ann)
		}
	}
	if u.GroupVersionKind().Group == "" && (u.GetKind() == "Secret" || u.GetKind() == "ConfigMap") {
		for _, f := range []string{"data", "stringData", "binaryData"} {
			delete(u.Object, f)
		}
	}
	return u, nil
}

const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"
