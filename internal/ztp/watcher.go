package ztp

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bpav1 "github.com/atoll-edge/atoll/api/bpa/v1alpha1"
)

// watcher follows the managed Provisionings of one site with an informer, and
// handles each change from a rate-limited work queue: a failed registration is
// retried with per-item exponential backoff, and one slow site never delays another.
type watcher struct {
	z      *Controller
	site   site
	cancel context.CancelFunc
	done   chan struct{}
}

func newWatcher(z *Controller, s site) *watcher {
	return &watcher{z: z, site: s, done: make(chan struct{})}
}

func (w *watcher) run(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	w.z.mu.Lock()
	w.cancel = cancel
	w.z.mu.Unlock()
	defer close(w.done)
	defer cancel()
	for ctx.Err() == nil {
		err := w.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		// A site deleted from the registry is not followed any more.
		if _, gerr := w.z.opts.Store.Get(ctx, w.site.key(), nil); errors.Is(gerr, errNotFound) {
			w.z.log.Info("site left the registry; no longer followed", "site", w.site.String())
			if derr := w.z.opts.Store.Delete(ctx, siteKey(w.site), 0); derr != nil && !errors.Is(derr, errNotFound) {
				w.z.log.Warn("forget site", "site", w.site.String(), "error", derr.Error())
			}
			return
		}
		w.z.log.Warn("following site failed; trying again", "site", w.site.String(), "error", err.Error(), "in", w.z.opts.Retry.String())
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.z.opts.Retry):
		}
	}
}

func (w *watcher) stop() {
	w.z.mu.Lock()
	cancel := w.cancel
	w.z.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	<-w.done
}

// follow runs the site's informer and the queue until ctx ends or the hub loses
// the site's connection.
func (w *watcher) follow(ctx context.Context) error {
	c, cfg, err := w.z.siteClient(w.site)
	if err != nil {
		return err
	}
	informers, err := cache.New(cfg, cache.Options{Scheme: w.z.scheme,
		DefaultLabelSelector: labels.SelectorFromSet(labels.Set{LabelManaged: "true"})})
	if err != nil {
		return fmt.Errorf("informers of site %s: %w", w.site, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	inf, err := informers.GetInformer(ctx, &bpav1.Provisioning{})
	if err != nil {
		return fmt.Errorf("site %s does not serve Provisionings (is the BPA operator installed?): %w", w.site, err)
	}
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName]())
	defer queue.ShutDown()
	enqueue := func(obj any) {
		if o, ok := obj.(client.Object); ok {
			queue.Add(types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()})
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return err
	}
	started := make(chan error, 1)
	go func() { started <- informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		return fmt.Errorf("the Provisionings of site %s did not sync", w.site)
	}

	// The connection can go (the site is deleted or its kubeconfig replaced): check
	// now and then, and start over when it has.
	go func() {
		t := time.NewTicker(w.z.opts.Retry)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if _, ok := w.z.opts.Sites.Config(w.site.key()); !ok {
					cancel()
					return
				}
			}
		}
	}()
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	for {
		item, shutdown := queue.Get()
		if shutdown {
			break
		}
		err := w.handle(ctx, informers, c, item)
		if err != nil && ctx.Err() == nil {
			w.z.log.Warn("registration failed; retrying", "site", w.site.String(), "provisioning", item.String(), "error", err.Error())
			queue.AddRateLimited(item)
		} else {
			queue.Forget(item)
		}
		queue.Done(item)
	}
	if err := <-started; err != nil && ctx.Err() == nil {
		return err
	}
	if _, ok := w.z.opts.Sites.Config(w.site.key()); !ok {
		return errNoConnection(w.site)
	}
	return nil
}

// handle registers the cluster of one Provisioning once its kubeconfig is there.
func (w *watcher) handle(ctx context.Context, r client.Reader, c client.Client, item types.NamespacedName) error {
	p := &bpav1.Provisioning{}
	if err := r.Get(ctx, item, p); err != nil {
		return client.IgnoreNotFound(err)
	}
	ref := p.Status.KubeconfigSecretRef
	if ref == nil || !p.DeletionTimestamp.IsZero() {
		return nil
	}
	target, labels, err := target(p)
	if err != nil {
		w.z.setResult(resultKey(w.site, p.Namespace, p.Name), registration{Err: err.Error()})
		return nil // terminal: the annotations are wrong
	}
	rctx, cancel := context.WithTimeout(ctx, siteRequestTimeout)
	defer cancel()
	var secret corev1.Secret
	if err := c.Get(rctx, types.NamespacedName{Namespace: p.Namespace, Name: ref.Name}, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			err = fmt.Errorf("Secret %s/%s named by status.kubeconfigSecretRef does not exist yet", p.Namespace, ref.Name)
		}
		w.z.setResult(resultKey(w.site, p.Namespace, p.Name), registration{Cluster: target.String(), Err: err.Error()})
		return err
	}
	data := secret.Data[ref.Key]
	if len(data) == 0 {
		return fmt.Errorf("Secret %s/%s has no key %q yet", p.Namespace, ref.Name, ref.Key)
	}
	err = w.z.register(ctx, w.site, p, target, labels, data)
	res := registration{Cluster: target.String()}
	if err != nil {
		res.Err = err.Error()
	}
	w.z.setResult(resultKey(w.site, p.Namespace, p.Name), res)
	var term *terminalError
	if errors.As(err, &term) {
		return nil
	}
	return err
}
