package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/partition/ledger"
)

// LayoutGuard admits an allocation of a layout device (a device of a
// pool named by package ledger's convention, "<node>/layout") only by
// moving it from Open to Held in its node's layout ledger
// (ledger.Ledger.Admit, by compare-and-swap: ledger.Store.Update), and
// refuses it when the device is not Open or the node has no seeded
// ledger. Serve it through [LayoutWebhook] at [LayoutPath] (a [Server]
// given [WithLayoutGuard]). Its decision is the ledger's in the API
// server, never its cache's, so any number of replicas, and the node's
// agents, may run at once. Devices of other pools, other drivers' and
// admin-access results are not checked. It is safe for concurrent use.
type LayoutGuard struct {
	driver string
	store  *ledger.Store

	synced chan struct{}
	once   sync.Once
}

// NewLayoutGuard returns the LayoutGuard of driverName's layout devices,
// whose ledgers are ConfigMaps in namespace (ledger.NewStore), read and
// written with client (which needs get, list, watch and update on
// configmaps there). It watches nothing until [LayoutGuard.Run] (a
// [Server] given [WithLayoutGuard] runs it).
func NewLayoutGuard(
	client kubernetes.Interface,
	driverName, namespace string,
) (*LayoutGuard, error) {
	store, err := ledger.NewStore(client, namespace, driverName)
	if err != nil {
		return nil, fmt.Errorf("new layout guard: %w", err)
	}
	return &LayoutGuard{driver: driverName, store: store, synced: make(chan struct{})}, nil
}

// Driver is the driver whose allocations are checked.
func (g *LayoutGuard) Driver() string { return g.driver }

// Run watches the driver's ledgers (a cache that saves a read per
// admission) until ctx is done, then returns nil; it returns an error at
// once when the guard runs already. [LayoutGuard.Synced] is closed once
// the first list is in.
func (g *LayoutGuard) Run(ctx context.Context) error {
	first := false
	g.once.Do(func() { first = true })
	if !first {
		return errors.New("run layout guard: running already")
	}
	err := g.store.Watch(ctx, "", nil, g.synced)
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("run layout guard: %w", err)
}

// Synced is closed once the guard has listed the ledgers: from then on
// it answers.
func (g *LayoutGuard) Synced() <-chan struct{} { return g.synced }

// HasSynced says whether [LayoutGuard.Synced] is closed.
func (g *LayoutGuard) HasSynced() bool {
	select {
	case <-g.synced:
		return true
	default:
		return false
	}
}

// StaleAllocationError is the refusal of an allocation of layout devices
// that are not Open in their node's ledger.
type StaleAllocationError struct {
	Claim   string // namespace/name
	Driver  string
	Node    string
	Devices []string // pool/device, sorted
	// Reason says why: not open (an older publication), or no seeded
	// ledger for the node.
	Reason string
}

func (e *StaleAllocationError) Error() string {
	return fmt.Sprintf(
		"claim %s: device %s (driver %s) on node %s: %s; the scheduler will try again",
		e.Claim,
		strings.Join(e.Devices, ", "),
		e.Driver,
		e.Node,
		e.Reason,
	)
}

// Admit decides the update of a claim's status from old to claim: when it
// allocates the claim (old has no status.allocation, claim has one), the
// driver's results in layout pools (ledger.NodeOfPool), other than admin
// access, are admitted per node by ledger.Ledger.Admit against old's
// resourceVersion, in the node's ledger. It returns a
// [*StaleAllocationError] when a node's ledger refuses them (the first
// such node; the nodes before it keep the devices held until the planner
// sees that the write did not commit), or another error when a ledger
// cannot be read or written (the write should be refused: the scheduler
// tries again). Everything else returns nil without a request: writes
// that do not allocate, other drivers' and other pools' devices.
func (g *LayoutGuard) Admit(ctx context.Context, old, claim *resourceapi.ResourceClaim) error {
	if claim == nil || claim.Status.Allocation == nil ||
		(old != nil && old.Status.Allocation != nil) {
		return nil
	}
	byNode := map[string][]ledger.Device{}
	var nodes []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != g.driver || r.AdminAccess != nil && *r.AdminAccess {
			continue
		}
		node, ok := ledger.NodeOfPool(r.Pool)
		if !ok {
			continue
		}
		if _, seen := byNode[node]; !seen {
			nodes = append(nodes, node)
		}
		byNode[node] = append(byNode[node], ledger.Device{Pool: r.Pool, Name: r.Device})
	}
	if len(nodes) == 0 {
		return nil
	}
	ref := ledger.ClaimRef{UID: claim.UID, Namespace: claim.Namespace, Name: claim.Name}
	rv := claim.ResourceVersion
	if old != nil && old.ResourceVersion != "" {
		rv = old.ResourceVersion
	}
	slices.Sort(nodes)
	for _, node := range nodes {
		devs := byNode[node]
		_, err := g.store.Update(
			ctx,
			node,
			false,
			func(l *ledger.Ledger) error { return l.Admit(ref, rv, devs) },
		)
		var notOpen *ledger.NotOpenError
		switch {
		case err == nil:
			continue
		case errors.As(err, &notOpen):
			return g.stale(
				ref,
				node,
				notOpen.Devices,
				"not open for allocation in the node's layout ledger:"+
					" it was allocated from an older publication of the layout",
			)
		case errors.Is(err, ledger.ErrNoLedger), errors.Is(err, ledger.ErrNotSeeded):
			return g.stale(
				ref,
				node,
				devs,
				"the node's layout ledger is not seeded yet: nothing is open",
			)
		default:
			return fmt.Errorf("claim %s: admit its allocation on node %s: %w", ref, node, err)
		}
	}
	return nil
}

func (g *LayoutGuard) stale(
	ref ledger.ClaimRef,
	node string,
	devs []ledger.Device,
	reason string,
) *StaleAllocationError {
	e := &StaleAllocationError{Claim: ref.String(), Driver: g.driver, Node: node, Reason: reason}
	for _, d := range devs {
		e.Devices = append(e.Devices, d.String())
	}
	slices.Sort(e.Devices)
	return e
}

// ErrLayoutNotSynced is the refusal of a review that comes before the
// guard has listed the ledgers.
var ErrLayoutNotSynced = errors.New("layout guard: the layout ledgers are not read yet")

// Review answers one admission request: an UPDATE of the status of a
// resource.k8s.io/v1 ResourceClaim is refused (403 Forbidden, the
// [StaleAllocationError]'s message) when [LayoutGuard.Admit] refuses
// it, refused as unavailable (503, with the error) when a ledger cannot
// be read or written, and refused as unavailable ([ErrLayoutNotSynced])
// before the guard has synced. Anything else is allowed, with a warning
// when it is not a claim status update.
func (g *LayoutGuard) Review(
	ctx context.Context,
	req *admissionv1.AdmissionRequest,
) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	logger := klog.FromContext(ctx).
		WithValues("operation", req.Operation, "resource", req.Resource.Resource, "object", klog.KRef(req.Namespace, req.Name))
	if req.Resource.Group != resourceapi.GroupName || req.Resource.Version != "v1" ||
		req.Resource.Resource != ResourceClaims ||
		req.SubResource != "status" ||
		req.Operation != admissionv1.Update {
		resp.Warnings = []string{
			fmt.Sprintf(
				"%s layout admission: %s %s %s not checked: only UPDATE of resource.k8s.io/v1 %s/status is",
				g.driver,
				req.Operation,
				req.Resource.String(),
				req.SubResource,
				ResourceClaims,
			),
		}
		return resp
	}
	if !g.HasSynced() {
		resp.Allowed = false
		resp.Result = &metav1.Status{
			Status:  metav1.StatusFailure,
			Message: ErrLayoutNotSynced.Error(),
			Reason:  metav1.StatusReasonServiceUnavailable,
			Code:    http.StatusServiceUnavailable,
		}
		return resp
	}
	var claim, old resourceapi.ResourceClaim
	if err := json.Unmarshal(req.Object.Raw, &claim); err != nil {
		logger.Error(err, "Cannot decode the claim; allowed unchecked")
		resp.Warnings = []string{
			fmt.Sprintf(
				"%s layout admission: not checked: decode ResourceClaim: %v",
				g.driver,
				err,
			),
		}
		return resp
	}
	if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
		logger.Error(err, "Cannot decode the old claim; allowed unchecked")
		resp.Warnings = []string{
			fmt.Sprintf(
				"%s layout admission: not checked: decode the old ResourceClaim: %v",
				g.driver,
				err,
			),
		}
		return resp
	}
	if claim.Namespace == "" {
		claim.Namespace = req.Namespace
	}
	if claim.Name == "" {
		claim.Name = req.Name
	}
	if old.ResourceVersion == "" {
		// The claim's resourceVersion the write compares: the API server
		// sends it in oldObject.
		logger.V(2).Info("The old claim has no resourceVersion; admitting against the new one's")
	}
	if err := g.Admit(ctx, &old, &claim); err != nil {
		logger.V(2).Info("Refused", "reason", err.Error())
		resp.Allowed = false
		var stale *StaleAllocationError
		if errors.As(err, &stale) {
			resp.Result = &metav1.Status{Status: metav1.StatusFailure, Message: err.Error(),
				Reason: metav1.StatusReasonForbidden, Code: http.StatusForbidden}
		} else {
			resp.Result = &metav1.Status{Status: metav1.StatusFailure, Message: err.Error(),
				Reason: metav1.StatusReasonServiceUnavailable, Code: http.StatusServiceUnavailable}
		}
		return resp
	}
	logger.V(5).Info("Allowed")
	return resp
}

// ServeHTTP answers a POSTed AdmissionReview (admission.k8s.io/v1) with
// [LayoutGuard.Review]'s response. Before the guard has synced it
// answers 503 and no review, so that the API server applies the
// webhook's failure policy; a body that is not a review gets 400.
func (g *LayoutGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.HasSynced() {
		http.Error(w, ErrLayoutNotSynced.Error(), http.StatusServiceUnavailable)
		return
	}
	serveReview(w, r, g.Review)
}

// serveReview decodes a POSTed AdmissionReview, answers it with review
// and writes the answer.
func serveReview(
	w http.ResponseWriter,
	r *http.Request,
	review func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse,
) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxReview))
	if err != nil {
		http.Error(w, "read AdmissionReview: "+err.Error(), http.StatusBadRequest)
		return
	}
	var in admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &in); err != nil || in.Request == nil {
		if err == nil {
			err = errors.New("no request")
		}
		http.Error(w, "decode AdmissionReview: "+err.Error(), http.StatusBadRequest)
		return
	}
	out := admissionv1.AdmissionReview{
		TypeMeta: in.TypeMeta,
		Response: review(r.Context(), in.Request),
	}
	if out.APIVersion == "" {
		out.APIVersion, out.Kind = admissionv1.SchemeGroupVersion.String(), "AdmissionReview"
	}
	b, err := json.Marshal(out)
	if err != nil {
		http.Error(w, "encode AdmissionReview: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
