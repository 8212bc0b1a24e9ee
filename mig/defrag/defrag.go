package defrag

import (
	"io"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition"
	pdefrag "github.com/drakit/drakit/partition/defrag"
)

// Domain is the subdomain of the MIG defragmenter's names in the cluster
// (Vendor's Domain). Deployed clusters and the NVIDIA chart's admission
// policy rely on the names below: they never change.
const Domain = "mig.drakit.dev"

// NVIDIA's names the controller uses in the cluster, derived from Domain
// as package partition/defrag documents.
const (
	// AnnotationDefrag on a pod, set to AllowValue, lets the controller
	// evict the pod to make room for a larger MIG device. Any other value,
	// or none, and the pod is never evicted.
	AnnotationDefrag = Domain + "/defrag"
	// TaintKey is the key of the NoSchedule taint the controller puts on
	// the devices of a region it frees; the value is the operation's ID.
	TaintKey = Domain + "/defrag"
	// LabelOperation labels the DeviceTaintRules of an operation with its
	// ID (the waiting claim's UID).
	LabelOperation = Domain + "/defrag-operation"
	// AnnotationOperation on each DeviceTaintRule of an operation holds
	// the operation as JSON, so that a restarted controller carries on.
	AnnotationOperation = Domain + "/defrag-operation"
	// Component is the controller's name in Events (source component and
	// reporting controller).
	Component = Domain + "/defrag"
)

// Vendor is NVIDIA MIG for package partition/defrag: names under Domain,
// a GPU's scheme from its product attribute (mig.AttrProduct, read by
// mig.Lookup), mig.DefaultProfiles advertised, "GPU" in messages.
func Vendor() pdefrag.Vendor {
	return pdefrag.Vendor{
		Domain: Domain,
		Scheme: func(model string) (*partition.Scheme, error) {
			p, err := mig.Lookup(model)
			if err != nil {
				return nil, err
			}
			return p.Scheme(), nil
		},
		ModelAttribute: mig.AttrProduct,
		Card:           "GPU",
	}
}

// New returns partition/defrag's controller for the dynamic MIG devices
// of DRA driver driver (for example gpu.nvidia.drakit.dev), whose slices
// follow mig's counter model, with NVIDIA's names (Vendor). It reaches
// the API server through client.
func New(
	client kubernetes.Interface, driver string, opts ...pdefrag.Option,
) (*pdefrag.Controller, error) {
	return pdefrag.New(client, driver, Vendor(), opts...)
}

// Types of package partition/defrag, under their old names.
type (
	// Controller is partition/defrag's controller.
	//
	// Deprecated: use defrag.Controller of package partition/defrag.
	Controller = pdefrag.Controller
	// Option configures a Controller.
	//
	// Deprecated: use defrag.Option of package partition/defrag.
	Option = pdefrag.Option
	// Operation is one defragmentation.
	//
	// Deprecated: use defrag.Operation of package partition/defrag.
	Operation = pdefrag.Operation
	// Eviction is one pod an operation evicts.
	//
	// Deprecated: use defrag.Eviction of package partition/defrag.
	Eviction = pdefrag.Eviction
	// ObjectRef names an object of an operation.
	//
	// Deprecated: use defrag.ObjectRef of package partition/defrag.
	ObjectRef = pdefrag.ObjectRef
)

// Constants of package partition/defrag, under their old names.
//
// Deprecated: use the names of package partition/defrag.
const (
	AllowValue                     = pdefrag.AllowValue
	ReasonDefragmenting            = pdefrag.ReasonDefragmenting
	ReasonEvicted                  = pdefrag.ReasonEvicted
	ReasonAllocated                = pdefrag.ReasonAllocated
	ReasonPlaced                   = pdefrag.ReasonPlaced
	ReasonAbandoned                = pdefrag.ReasonAbandoned
	ReasonRolledBack               = pdefrag.ReasonRolledBack
	ReasonReplacementAllocated     = pdefrag.ReasonReplacementAllocated
	DefaultMinCompute              = pdefrag.DefaultMinCompute
	DefaultInterval                = pdefrag.DefaultInterval
	DefaultTimeout                 = pdefrag.DefaultTimeout
	DefaultEvictionsPerHour        = pdefrag.DefaultEvictionsPerHour
	DefaultEvictionsPerNodePerHour = pdefrag.DefaultEvictionsPerNodePerHour
	DefaultBackoff                 = pdefrag.DefaultBackoff
)

// WithMaxMoves is partition/defrag's WithMaxMoves.
//
// Deprecated: use defrag.WithMaxMoves of package partition/defrag.
func WithMaxMoves(k int) Option { return pdefrag.WithMaxMoves(k) }

// WithMinCompute is partition/defrag's WithMinCompute.
//
// Deprecated: use defrag.WithMinCompute of package partition/defrag.
func WithMinCompute(n int) Option { return pdefrag.WithMinCompute(n) }

// WithInterval is partition/defrag's WithInterval.
//
// Deprecated: use defrag.WithInterval of package partition/defrag.
func WithInterval(d time.Duration) Option { return pdefrag.WithInterval(d) }

// WithTimeout is partition/defrag's WithTimeout.
//
// Deprecated: use defrag.WithTimeout of package partition/defrag.
func WithTimeout(d time.Duration) Option { return pdefrag.WithTimeout(d) }

// WithDryRun is partition/defrag's WithDryRun.
//
// Deprecated: use defrag.WithDryRun of package partition/defrag.
func WithDryRun(w io.Writer) Option { return pdefrag.WithDryRun(w) }

// WithFeatures is partition/defrag's WithFeatures.
//
// Deprecated: use defrag.WithFeatures of package partition/defrag.
func WithFeatures(f structured.Features) Option { return pdefrag.WithFeatures(f) }

// WithNamespaces is partition/defrag's WithNamespaces.
//
// Deprecated: use defrag.WithNamespaces of package partition/defrag.
func WithNamespaces(namespaces ...string) Option { return pdefrag.WithNamespaces(namespaces...) }

// WithEvictionBudget is partition/defrag's WithEvictionBudget.
//
// Deprecated: use defrag.WithEvictionBudget of package partition/defrag.
func WithEvictionBudget(perHour, perNode int) Option {
	return pdefrag.WithEvictionBudget(perHour, perNode)
}

// WithBackoff is partition/defrag's WithBackoff.
//
// Deprecated: use defrag.WithBackoff of package partition/defrag.
func WithBackoff(d time.Duration) Option { return pdefrag.WithBackoff(d) }

// WithLeaderElection is partition/defrag's WithLeaderElection.
//
// Deprecated: use defrag.WithLeaderElection of package partition/defrag.
func WithLeaderElection(namespace, name string) Option {
	return pdefrag.WithLeaderElection(namespace, name)
}

// WithOwner is partition/defrag's WithOwner.
//
// Deprecated: use defrag.WithOwner of package partition/defrag.
func WithOwner(clusterRole string) Option { return pdefrag.WithOwner(clusterRole) }

// WithLayoutLedgers is partition/defrag's WithLayoutLedgers.
//
// Deprecated: use defrag.WithLayoutLedgers of package partition/defrag.
func WithLayoutLedgers(namespace string, classProfile func(class string) (string, bool)) Option {
	return pdefrag.WithLayoutLedgers(namespace, classProfile)
}
