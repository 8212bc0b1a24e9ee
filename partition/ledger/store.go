package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Keys of the ledger's ConfigMap.
const (
	// LabelLedger labels every ledger ConfigMap with its driver's name.
	LabelLedger = "partition.drakit.dev/layout-ledger"
	// AnnotationNode is the ledger's node, in an annotation (a label
	// value cannot hold every node name).
	AnnotationNode = "partition.drakit.dev/node"
	// DataKey is the data key holding the ledger as JSON.
	DataKey = "ledger.json"
)

// ErrNoLedger is wrapped by Update when the node has no ledger and the
// caller may not create one.
var ErrNoLedger = errors.New("the node has no layout ledger")

// Store keeps the layout ledgers of one driver's nodes as ConfigMaps in
// one namespace (one per node, named Store.Name). It is safe for
// concurrent use.
type Store struct {
	client    kubernetes.Interface
	namespace string
	driver    string

	mu     sync.Mutex
	latest map[string]*corev1.ConfigMap // by ConfigMap name, from Watch
}

// NewStore returns the Store of driver's ledgers in namespace. The
// client needs get, create and update on configmaps there, and list and
// watch for Watch.
func NewStore(client kubernetes.Interface, namespace, driver string) (*Store, error) {
	switch {
	case client == nil:
		return nil, errors.New("new ledger store: no client")
	case namespace == "":
		return nil, errors.New("new ledger store: no namespace")
	case driver == "":
		return nil, errors.New("new ledger store: no driver name")
	}
	return &Store{
		client:    client,
		namespace: namespace,
		driver:    driver,
		latest:    map[string]*corev1.ConfigMap{},
	}, nil
}

// Namespace is the namespace of the ledgers.
func (s *Store) Namespace() string { return s.namespace }

// Name is the name of node's ledger ConfigMap: "layout-<node>", or for a
// node name too long for that, its first 200 characters and a hash.
func (s *Store) Name(node string) string {
	n := "layout-" + node
	if len(n) <= 253 {
		return n
	}
	h := sha256.Sum256([]byte(node))
	return n[:200] + "-" + hex.EncodeToString(h[:8])
}

// decode reads a ledger ConfigMap; it must be node's.
func (s *Store) decode(cm *corev1.ConfigMap, node string) (*Ledger, error) {
	var l Ledger
	if err := json.Unmarshal([]byte(cm.Data[DataKey]), &l); err != nil {
		return nil, fmt.Errorf("decode the layout ledger %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	if l.Node != node {
		return nil, fmt.Errorf(
			"decode the layout ledger %s/%s: it is node %q's, not %q",
			cm.Namespace,
			cm.Name,
			l.Node,
			node,
		)
	}
	return &l, nil
}

// Get reads node's ledger from the API server (not from Watch's cache)
// and returns it with its ConfigMap's resourceVersion; the error wraps
// ErrNoLedger when there is none.
func (s *Store) Get(ctx context.Context, node string) (*Ledger, string, error) {
	cm, err := s.client.CoreV1().ConfigMaps(s.namespace).Get(ctx, s.Name(node), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, "", fmt.Errorf("get the layout ledger of node %s: %w", node, ErrNoLedger)
	}
	if err != nil {
		return nil, "", fmt.Errorf("get the layout ledger of node %s: %w", node, err)
	}
	l, err := s.decode(cm, node)
	if err != nil {
		return nil, "", err
	}
	s.remember(cm)
	return l, cm.ResourceVersion, nil
}

// remember keeps cm as the latest known version of its ledger, unless a
// newer one is known.
func (s *Store) remember(cm *corev1.ConfigMap) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.latest[cm.Name]; ok && compareRV(old.ResourceVersion, cm.ResourceVersion) > 0 {
		return
	}
	s.latest[cm.Name] = cm
}

func (s *Store) forget(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.latest, name)
}

// cached returns the latest known version of a ledger ConfigMap.
func (s *Store) cached(name string) *corev1.ConfigMap {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.latest[name]
}

// Update changes node's ledger by compare-and-swap: it reads the latest
// version it knows (Watch's, else the API server's), applies change to
// a copy and writes it back only if the ConfigMap has not changed since
// (its resourceVersion); on a conflict it reads the API server's version
// and applies change again. change must be a function of the ledger it is
// given (it may run several times); its error stops Update, which
// returns it. A change that changes nothing writes nothing. Without a
// ledger, Update creates one (Node set, nothing else) when create is
// true, and fails with an error wrapping ErrNoLedger otherwise. It
// returns the ledger as written (or as found, when unchanged).
func (s *Store) Update(
	ctx context.Context,
	node string,
	create bool,
	change func(*Ledger) error,
) (*Ledger, error) {
	name := s.Name(node)
	cm := s.cached(name)
	fromCache := cm != nil
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("update the layout ledger of node %s: %w", node, err)
		}
		if cm == nil || attempt > 0 {
			fromCache = false
			got, err := s.client.CoreV1().
				ConfigMaps(s.namespace).
				Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				cm = nil
			case err != nil:
				return nil, fmt.Errorf("update the layout ledger of node %s: %w", node, err)
			default:
				cm = got
				s.remember(cm)
			}
		}
		var cur *Ledger
		if cm == nil {
			if !create {
				return nil, fmt.Errorf("update the layout ledger of node %s: %w", node, ErrNoLedger)
			}
			cur = &Ledger{Node: node}
		} else {
			var err error
			if cur, err = s.decode(cm, node); err != nil {
				return nil, err
			}
		}
		next := cur.Clone()
		if err := change(next); err != nil {
			if fromCache {
				// Decided on the cached version: decide again on the
				// API server's before failing (a device opened since).
				continue
			}
			return nil, err
		}
		if cm != nil && reflect.DeepEqual(cur, next) {
			return next, nil
		}
		b, err := json.Marshal(next)
		if err != nil {
			return nil, fmt.Errorf("update the layout ledger of node %s: %w", node, err)
		}
		var out *corev1.ConfigMap
		if cm == nil {
			out, err = s.client.CoreV1().ConfigMaps(s.namespace).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.namespace,
					Labels:      map[string]string{LabelLedger: s.driver},
					Annotations: map[string]string{AnnotationNode: node}},
				Data: map[string]string{DataKey: string(b)},
			}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
		} else {
			w := cm.DeepCopy()
			w.Data = map[string]string{DataKey: string(b)}
			out, err = s.client.CoreV1().ConfigMaps(s.namespace).Update(ctx, w, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				continue
			}
		}
		if err != nil {
			return nil, fmt.Errorf("update the layout ledger of node %s: %w", node, err)
		}
		s.remember(out)
		return next, nil
	}
}

// Watch watches the driver's ledgers, node's only when node is set (a
// field selector on its name: what a node agent needs) or every node's
// (a label selector: the planner and the webhook), and calls onChange
// with each version seen (nil when deleted), from one goroutine, until
// ctx is done. Update then starts from the versions seen. synced, when
// not nil, is closed once the first list is in. It returns ctx's error
// when done, or the informer's setup error.
func (s *Store) Watch(
	ctx context.Context,
	node string,
	onChange func(node string, l *Ledger),
	synced chan<- struct{},
) error {
	tweak := func(o *metav1.ListOptions) {
		o.LabelSelector = labels.SelectorFromSet(labels.Set{LabelLedger: s.driver}).String()
		if node != "" {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.Name(node)).String()
		}
	}
	f := informers.NewSharedInformerFactoryWithOptions(
		s.client,
		0,
		informers.WithNamespace(s.namespace),
		informers.WithTweakListOptions(tweak),
	)
	inf := f.Core().V1().ConfigMaps().Informer()
	handle := func(obj any, gone bool) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj, gone = t.Obj, true
		}
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			return
		}
		n := cm.Annotations[AnnotationNode]
		if gone {
			s.forget(cm.Name)
			if onChange != nil {
				onChange(n, nil)
			}
			return
		}
		s.remember(cm)
		l, err := s.decode(cm, n)
		if err != nil {
			return
		}
		if onChange != nil {
			onChange(n, l)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { handle(obj, false) },
		UpdateFunc: func(_, obj any) { handle(obj, false) },
		DeleteFunc: func(obj any) { handle(obj, true) },
	}); err != nil {
		return fmt.Errorf("watch layout ledgers: %w", err)
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) && synced != nil {
		close(synced)
	}
	<-ctx.Done()
	return ctx.Err()
}

// List reads every ledger of the driver from the API server, by node; a
// ledger that does not decode is left out.
func (s *Store) List(ctx context.Context) (map[string]*Ledger, error) {
	l, err := s.client.CoreV1().ConfigMaps(s.namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{LabelLedger: s.driver}).String()})
	if err != nil {
		return nil, fmt.Errorf("list the layout ledgers: %w", err)
	}
	out := make(map[string]*Ledger, len(l.Items))
	for i := range l.Items {
		cm := &l.Items[i]
		n := cm.Annotations[AnnotationNode]
		if led, err := s.decode(cm, n); err == nil {
			out[n] = led
		}
	}
	return out, nil
}

// CachedAll returns every ledger Watch has seen (or Update written), by
// node; a ledger that does not decode is left out.
func (s *Store) CachedAll() map[string]*Ledger {
	s.mu.Lock()
	cms := make([]*corev1.ConfigMap, 0, len(s.latest))
	for _, cm := range s.latest {
		cms = append(cms, cm)
	}
	s.mu.Unlock()
	out := make(map[string]*Ledger, len(cms))
	for _, cm := range cms {
		n := cm.Annotations[AnnotationNode]
		if l, err := s.decode(cm, n); err == nil {
			out[n] = l
		}
	}
	return out
}

// Cached returns node's ledger as last seen by Watch or written by
// Update (nil when none), with its resourceVersion.
func (s *Store) Cached(node string) (*Ledger, string) {
	cm := s.cached(s.Name(node))
	if cm == nil {
		return nil, ""
	}
	l, err := s.decode(cm, node)
	if err != nil {
		return nil, ""
	}
	return l, cm.ResourceVersion
}
