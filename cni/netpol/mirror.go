package main

import (
	"context"
	"fmt"
	"log"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// nadResource is Multus' NetworkAttachmentDefinition.
var nadResource = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1",
	Resource: "network-attachment-definitions"}

// resyncItem, queued, asks for a full resync: etcd's keys below
// {prefix}/k8s/ made what the API's caches say, the stale ones deleted.
const resyncItem = ""

// mirror copies the API's namespaces, masq pods and NetworkPolicies into
// etcd. One worker takes the queue's keys (each a key below {prefix}/k8s/,
// coalesced while waiting) and writes what the caches say of it now.
type mirror struct {
	store      *store
	namespaces corelisters.NamespaceLister
	pods       corelisters.PodLister
	policies   networkinglisters.NetworkPolicyLister
	nads       cache.Indexer
	synced     []cache.InformerSynced
	queue      workqueue.TypedRateLimitingInterface[string]
	resync     time.Duration
	// known: what etcd holds below root, as far as this worker knows
	// (read whole at each resync, then kept with each write).
	known map[string]string
}

type mirrorArgs struct {
	// resync: how often the whole mirror is compared with etcd's keys.
	resync time.Duration
}

// newMirror sets up the informers (not yet started: start them with
// run) and their handlers.
func newMirror(client kubernetes.Interface, dyn dynamic.Interface, st *store, a mirrorArgs) (*mirror, func(<-chan struct{}), error) {
	factory := informers.NewSharedInformerFactory(client, 0)
	dynFactory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	nsInf := factory.Core().V1().Namespaces()
	podInf := factory.Core().V1().Pods()
	npInf := factory.Networking().V1().NetworkPolicies()
	nadInf := dynFactory.ForResource(nadResource)
	m := &mirror{
		store:      st,
		namespaces: nsInf.Lister(),
		pods:       podInf.Lister(),
		policies:   npInf.Lister(),
		nads:       nadInf.Informer().GetIndexer(),
		synced: []cache.InformerSynced{nsInf.Informer().HasSynced, podInf.Informer().HasSynced,
			npInf.Informer().HasSynced, nadInf.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueue(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](500*time.Millisecond, time.Minute)),
		resync: a.resync,
		known:  map[string]string{},
	}
	// A pod's cache entry keeps what the mirror reads (10,000 pods'
	// specs and statuses would be most of its memory).
	if err := podInf.Informer().SetTransform(trimPod); err != nil {
		return nil, nil, err
	}
	for name, inf := range map[string]cache.SharedIndexInformer{"namespaces": nsInf.Informer(),
		"pods": podInf.Informer(), "networkpolicies": npInf.Informer(),
		"network-attachment-definitions": nadInf.Informer()} {
		if err := inf.SetWatchErrorHandler(m.watchError(name)); err != nil {
			return nil, nil, err
		}
	}
	handlers := []struct {
		inf cache.SharedIndexInformer
		key func(metav1.Object) string
	}{
		{nsInf.Informer(), func(o metav1.Object) string { return objectKey(kindNamespace, "", o.GetName()) }},
		{podInf.Informer(), func(o metav1.Object) string { return objectKey(kindPod, o.GetNamespace(), o.GetName()) }},
		{npInf.Informer(), func(o metav1.Object) string { return objectKey(kindPolicy, o.GetNamespace(), o.GetName()) }},
	}
	for _, h := range handlers {
		key := h.key
		enqueue := func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if o, ok := obj.(metav1.Object); ok {
				m.queue.Add(key(o))
			}
		}
		if _, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue,
			UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue}); err != nil {
			return nil, nil, err
		}
	}
	// A NAD's kind decides whether the pods naming it are masq's: any
	// change re-checks every pod (NADs are few and change seldom; the
	// check is in memory, and only a pod whose answer changed is written).
	every := func(any) { m.enqueuePods() }
	if _, err := nadInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: every,
		UpdateFunc: func(_, o any) { every(o) }, DeleteFunc: every}); err != nil {
		return nil, nil, err
	}
	start := func(stop <-chan struct{}) {
		factory.Start(stop)
		dynFactory.Start(stop)
	}
	return m, start, nil
}

// trimPod keeps of a pod its namespace, name, labels and networks
// annotation.
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name,
		UID: pod.UID, ResourceVersion: pod.ResourceVersion, Labels: pod.Labels}}
	if n, ok := pod.Annotations[networksAnnotation]; ok {
		out.Annotations = map[string]string{networksAnnotation: n}
	}
	return out, nil
}

// watchError: the API's watch broke (the API server unreachable, a
// network gap): the informer lists again by itself and its handlers see
// what changed; a resync then checks etcd against the caches too.
func (m *mirror) watchError(what string) cache.WatchErrorHandler {
	return func(_ *cache.Reflector, err error) {
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return // routine: the informer lists again, missing nothing
		}
		log.Printf("watching %s: %v (listed again once the API server answers; etcd keeps the last mirrored state)", what, err)
		m.queue.AddAfter(resyncItem, 10*time.Second)
	}
}

func (m *mirror) enqueuePods() {
	pods, err := m.pods.List(labels.Everything())
	if err != nil {
		return
	}
	for _, p := range pods {
		m.queue.Add(objectKey(kindPod, p.Namespace, p.Name))
	}
}

func (m *mirror) isMasqNAD(nsName string) bool {
	obj, ok, err := m.nads.GetByKey(nsName)
	if err != nil || !ok {
		return false
	}
	u, ok := obj.(*unstructured.Unstructured)
	return ok && isMasqNAD(u)
}

// desired: the value rel should hold in etcd, nil if none (the object is
// gone, or a pod that is not masq's).
func (m *mirror) desired(rel string) ([]byte, error) {
	kind, rest, _ := strings.Cut(rel, "/")
	ns, name, namespaced := strings.Cut(rest, "/")
	switch {
	case kind == kindNamespace && !namespaced:
		o, err := m.namespaces.Get(rest)
		if apierrors.IsNotFound(err) {
			return nil, nil
		} else if err != nil {
			return nil, err
		}
		return namespaceValue(o)
	case kind == kindPod && namespaced:
		o, err := m.pods.Pods(ns).Get(name)
		if apierrors.IsNotFound(err) {
			return nil, nil
		} else if err != nil {
			return nil, err
		}
		if !isMasqPod(o, m.isMasqNAD) {
			return nil, nil
		}
		return podValue(o)
	case kind == kindPolicy && namespaced:
		o, err := m.policies.NetworkPolicies(ns).Get(name)
		if apierrors.IsNotFound(err) {
			return nil, nil
		} else if err != nil {
			return nil, err
		}
		return policyValue(o)
	}
	// Not a key the mirror makes (someone else's under k8s/): deleted.
	return nil, nil
}

// everything: what the caches say etcd should hold below root.
func (m *mirror) everything() (map[string][]byte, [3]int, error) {
	out := map[string][]byte{}
	var counts [3]int
	nss, err := m.namespaces.List(labels.Everything())
	if err != nil {
		return nil, counts, err
	}
	for _, o := range nss {
		v, err := namespaceValue(o)
		if err != nil {
			return nil, counts, err
		}
		out[objectKey(kindNamespace, "", o.Name)] = v
	}
	pods, err := m.pods.List(labels.Everything())
	if err != nil {
		return nil, counts, err
	}
	for _, o := range pods {
		if !isMasqPod(o, m.isMasqNAD) {
			continue
		}
		v, err := podValue(o)
		if err != nil {
			return nil, counts, err
		}
		out[objectKey(kindPod, o.Namespace, o.Name)] = v
		counts[1]++
	}
	nps, err := m.policies.List(labels.Everything())
	if err != nil {
		return nil, counts, err
	}
	for _, o := range nps {
		v, err := policyValue(o)
		if err != nil {
			return nil, counts, err
		}
		out[objectKey(kindPolicy, o.Namespace, o.Name)] = v
	}
	counts[0], counts[2] = len(nss), len(nps)
	return out, counts, nil
}

// fullResync reads etcd's keys below root and writes the differences
// from the caches: changed and new keys, and deletes of keys no longer
// in the API.
func (m *mirror) fullResync(ctx context.Context) error {
	started := time.Now()
	want, counts, err := m.everything()
	if err != nil {
		return fmt.Errorf("the caches: %w", err)
	}
	have, err := m.store.list(ctx)
	if err != nil {
		return err
	}
	var changes []change
	wrote, deleted := 0, 0
	for rel, v := range want {
		if old, ok := have[rel]; !ok || old != string(v) {
			changes = append(changes, change{rel: rel, value: v})
			wrote++
		}
	}
	for rel := range have {
		if _, ok := want[rel]; !ok {
			changes = append(changes, change{rel: rel})
			deleted++
		}
	}
	sort.Slice(changes, func(i, j int) bool { return changes[i].rel < changes[j].rel })
	txns, err := m.store.apply(ctx, changes)
	if err != nil {
		return fmt.Errorf("resync after %d transactions: %w", txns, err)
	}
	m.known = make(map[string]string, len(want))
	for rel, v := range want {
		m.known[rel] = string(v)
	}
	log.Printf("resync: %d namespaces, %d masq pods, %d networkpolicies; %d keys written, %d deleted "+
		"below %s (%d transactions) in %s", counts[0], counts[1], counts[2], wrote, deleted, m.store.root, txns,
		time.Since(started).Round(time.Millisecond))
	return nil
}

// sync writes one key as the caches say it now, if etcd does not hold
// that already.
func (m *mirror) sync(ctx context.Context, rel string) error {
	v, err := m.desired(rel)
	if err != nil {
		return fmt.Errorf("%s: the cache: %w", rel, err)
	}
	old, had := m.known[rel]
	if (v == nil && !had) || (v != nil && had && old == string(v)) {
		return nil
	}
	if err := m.store.write(ctx, change{rel: rel, value: v}); err != nil {
		return err
	}
	if v == nil {
		delete(m.known, rel)
	} else {
		m.known[rel] = string(v)
	}
	return nil
}

// waitForCaches waits for every informer's first list, saying every 30 s
// which it still waits for. False when ctx ends first.
func (m *mirror) waitForCaches(ctx context.Context) bool {
	started := time.Now()
	for {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ok := cache.WaitForCacheSync(wctx.Done(), m.synced...)
		cancel()
		if ok {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		var missing []string
		for i, name := range []string{"namespaces", "pods", "networkpolicies",
			"network-attachment-definitions (is Multus' CRD installed?)"} {
			if !m.synced[i]() {
				missing = append(missing, name)
			}
		}
		log.Printf("waiting %s for the API's first list of %s", time.Since(started).Round(time.Second),
			strings.Join(missing, ", "))
	}
}

// run: the caches' first list, a full resync, then each change as it
// comes, a resync every m.resync and after a watch gap, until ctx ends.
func (m *mirror) run(ctx context.Context, start func(<-chan struct{})) error {
	start(ctx.Done())
	if !m.waitForCaches(ctx) {
		return ctx.Err()
	}
	go func() {
		<-ctx.Done()
		m.queue.ShutDown()
	}()
	// The first resync before any single key: until etcd answers, keys
	// wait in the queue (coalesced), and then the resync writes them.
	for backoff := time.Second; ; backoff = min(2*backoff, time.Minute) {
		err := m.fullResync(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Printf("resync: %v (again in %s)", err, backoff)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
	}
	if m.resync > 0 {
		go func() {
			t := time.NewTicker(m.resync)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					m.queue.Add(resyncItem)
				}
			}
		}()
	}
	for m.next(ctx) {
	}
	return ctx.Err()
}

// next handles one queued key or resync; false once the queue is shut.
func (m *mirror) next(ctx context.Context) bool {
	item, quit := m.queue.Get()
	if quit {
		return false
	}
	defer m.queue.Done(item)
	what, err := item, error(nil)
	if item == resyncItem {
		what, err = "resync", m.fullResync(ctx)
	} else {
		err = m.sync(ctx, item)
	}
	if err == nil || ctx.Err() != nil {
		m.queue.Forget(item)
		return true
	}
	log.Printf("%s: %v (failure %d, retried with backoff)", what, err, m.queue.NumRequeues(item)+1)
	m.queue.AddRateLimited(item)
	// etcd may have lost or gained keys meanwhile: a resync once it
	// answers again.
	if item != resyncItem {
		m.queue.AddRateLimited(resyncItem)
	}
	return true
}
