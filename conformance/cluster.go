package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/internal/podstatus"
	"github.com/drakit/drakit/internal/slicepool"
)

// ErrNodeBusy is returned by [RunCluster] when pods the suite did not
// create use the driver on the node and ClusterConfig.AllowOtherPods is
// not set: the suite's pods would compete with them for devices, and its
// restart check would disturb them.
var ErrNodeBusy = errors.New("other pods use the driver on the node")

// ClusterLabel is on every object cluster mode creates (namespace,
// DeviceClass, pods, claims); its value is the node under test. A run
// deletes what an earlier, interrupted run left for the same node and
// driver ([ClusterDriverLabel]), so runs for different drivers on one
// node may run at the same time.
const ClusterLabel = "conformance.drakit.dev/cluster-node"

// ClusterDriverLabel is on every object cluster mode creates, next to
// [ClusterLabel]; its value is the driver under test.
const ClusterDriverLabel = "conformance.drakit.dev/cluster-driver"

// ClusterConfig says which installed driver to check, and where, for
// [RunCluster]. Cluster mode needs only a client: it runs real pods with
// claims on the node, so that the real scheduler allocates, the real
// kubelet has the driver prepare, and the real container runtime applies
// the CDI edits, and checks what the containers see.
type ClusterConfig struct {
	// DriverName is the DRA driver's name. Required.
	DriverName string
	// NodeName is a node with a kubelet where the driver runs. Required.
	NodeName string
	// Client talks to the API server as a cluster admin. Required.
	Client kubernetes.Interface
	// Image is the containers' image: any image on the node with sh,
	// env, od and sleep (busybox). Required. Pods never pull it unless
	// ImagePullPolicy says so.
	Image string
	// ImagePullPolicy is the containers' pull policy (default Never:
	// the suite needs no registry).
	ImagePullPolicy corev1.PullPolicy
	// DeviceClassName names an existing DeviceClass that selects the
	// driver's devices; by default the suite creates one that selects
	// every device of the driver and deletes it at the end.
	DeviceClassName string
	// AllowOtherPods runs the suite even when pods it did not create use
	// the driver on the node (by default RunCluster refuses with
	// ErrNodeBusy). The driver restart check disturbs them too.
	AllowOtherPods bool
	// DriverNamespace and DriverPodSelector find the driver's pod on the
	// node (e.g. a DaemonSet's); with them pod.driver-restart deletes it
	// with grace period 0 and checks that running pods keep their
	// devices once the DaemonSet's next pod serves. Without them, or
	// RestartDriver or RestartCommand, the restart checks skip (and the
	// verdict says so).
	DriverNamespace, DriverPodSelector string
	// RestartDriver, for a driver that does not run as a pod (a host
	// process, a systemd unit), kills it without a chance to clean up
	// (kill -9) and starts it again; it returns once the new process
	// runs. pod.driver-restart calls it where it would delete the
	// driver's pod. The kubelet registers the new process when its
	// registration socket appears.
	RestartDriver func(ctx context.Context) error
	// RestartCommand is RestartDriver as a command, run without a shell
	// (e.g. sh -c 'kill -9 $(pidof my-driver); systemctl start my-driver').
	RestartCommand []string
	// CDIDirs, ReadCDI and ReadCDICommand say where the node's CDI specs
	// can be read, as in Config. With them the suite knows exactly which
	// environment variables each device's CDI edits set, and checks that
	// unprepare removed them; without them it recognizes a device in a
	// container's environment by its name or attribute values.
	CDIDirs        []string
	ReadCDI        func(ctx context.Context) (map[string][]byte, error)
	ReadCDICommand []string
	// PodTimeout bounds the wait for a pod to run, or to be gone, and
	// for RestartDriver or RestartCommand to return (default 2
	// minutes).
	PodTimeout time.Duration
	// PublishTimeout bounds the wait for the driver's ResourceSlices on
	// the node to be complete when the run starts, and, after
	// pod.driver-restart restarted the driver, for the new process to
	// write them (default 30 s). A driver that publishes the same
	// slices again may write nothing: pod.restart-device-names then
	// judges the slices as they are after this time, and says so.
	PublishTimeout time.Duration
	// Skip names checks or categories not to run; a check that uses
	// what a skipped one sets up skips too. Only, when set, names the
	// only ones to report: an earlier check whose pods or restart a
	// reported one uses still runs, unreported (pod.unprepare runs
	// pod.starts first, for instance).
	Skip, Only []string
	// Progress receives one line per check as it finishes (nil: none).
	Progress io.Writer
}

func (c *ClusterConfig) validate() error {
	var errs []string
	for name, v := range map[string]string{"DriverName": c.DriverName, "NodeName": c.NodeName, "Image": c.Image} {
		if v == "" {
			errs = append(errs, name+": required")
		}
	}
	if c.Client == nil {
		errs = append(errs, "Client: required")
	}
	if (c.DriverNamespace == "") != (c.DriverPodSelector == "") {
		errs = append(errs, "DriverNamespace and DriverPodSelector: give both or neither")
	}
	if c.RestartDriver != nil && len(c.RestartCommand) > 0 {
		errs = append(errs, "RestartDriver and RestartCommand: give one")
	}
	if c.DriverPodSelector != "" && (c.RestartDriver != nil || len(c.RestartCommand) > 0) {
		errs = append(errs, "DriverPodSelector and RestartDriver or RestartCommand: give one way to restart the driver")
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return fmt.Errorf("%w: %s", ErrConfig, strings.Join(errs, "; "))
	}
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = corev1.PullNever
	}
	if c.PodTimeout <= 0 {
		c.PodTimeout = 2 * time.Minute
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = 30 * time.Second
	}
	return nil
}

// RunCluster checks an installed driver through the cluster's own
// scheduler, kubelet and container runtime, with nothing but a client:
// it creates pods with claims on cfg.NodeName (see [ClusterChecks]),
// checks what their containers see, and deletes everything it created
// (a namespace, a DeviceClass, all labeled [ClusterLabel] and
// [ClusterDriverLabel]) before it returns, also when ctx is canceled
// (e.g. by SIGINT): its pods are gone by then, so the driver has
// unprepared their claims, and the namespace controller finishes
// deleting the namespace's claims and templates. It returns an
// error only when it could not start (bad config, no API server, a busy
// node: [ErrNodeBusy]).
func RunCluster(ctx context.Context, cfg ClusterConfig) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &clusterRun{cfg: cfg, logger: klog.FromContext(ctx).WithName("conformance-cluster"),
		report: &Report{Driver: cfg.DriverName, Node: cfg.NodeName, Started: time.Now()}}
	c.socket = &runner{cfg: Config{CDIDirs: cfg.CDIDirs, ReadCDI: cfg.ReadCDI, ReadCDICommand: cfg.ReadCDICommand}, logger: c.logger}
	if err := c.removeLeftovers(ctx); err != nil {
		return nil, err
	}
	if err := c.refuseBusyNode(ctx); err != nil {
		return nil, err
	}
	defer func() {
		// Not ctx: it may be canceled, and the cleanup must run all the
		// same.
		cctx, cancel := context.WithTimeout(context.Background(), c.cfg.PodTimeout+30*time.Second)
		defer cancel()
		c.cleanup(cctx)
		for _, f := range c.socket.cleanups { // copies of CDI specs
			f(cctx)
		}
		c.report.Duration = time.Since(c.report.Started)
	}()
	if err := c.begin(ctx); err != nil {
		return nil, err
	}
	run, reported := c.plan()
	c.planned = run
	setup := map[string]outcome{} // outcomes of the unreported checks
	for _, e := range clusterCatalogue {
		if !run[e.ID] {
			continue
		}
		t0 := time.Now()
		var o outcome
		var missing []string
		for _, n := range e.Needs {
			if !run[n] {
				missing = append(missing, n)
			}
		}
		switch {
		case ctx.Err() != nil:
			o = skip("run canceled")
		case len(missing) > 0:
			o = skip("needs %s, which is skipped", strings.Join(missing, ", "))
		default:
			o = e.run(c, ctx)
		}
		if o.status == Skip {
			// Say what happened in the unreported checks it needs.
			for _, n := range e.Needs {
				if so, ok := setup[n]; ok && so.status != Pass {
					o.msg += fmt.Sprintf("; %s (run for it, not reported): %s: %s", n, so.status, so.msg)
				}
			}
		}
		if !reported[e.ID] {
			c.logger.V(2).Info("Set up for a later check", "check", e.ID, "status", o.status, "message", o.msg)
			setup[e.ID] = o
			continue
		}
		if o.status == Fail && e.Level == Should {
			o.status = Warn
		}
		res := Result{Check: e.Check, Status: o.status, Message: o.msg, Duration: time.Since(t0)}
		c.report.Results = append(c.report.Results, res)
		if c.cfg.Progress != nil {
			fmt.Fprintln(c.cfg.Progress, ProgressLine(res))
		}
	}
	return c.report, nil
}

// plan returns the checks to run and those to report: the checks that
// Only and Skip select, and, unreported, the earlier checks they need
// that Only left out (a check named in Skip never runs).
func (c *clusterRun) plan() (run, reported map[string]bool) {
	run, reported = map[string]bool{}, map[string]bool{}
	skipped := func(ch Check) bool {
		for _, s := range c.cfg.Skip {
			if s == ch.ID || s == ch.Category {
				return true
			}
		}
		return false
	}
	// Backwards: a check needs only earlier ones.
	for i := len(clusterCatalogue) - 1; i >= 0; i-- {
		e := clusterCatalogue[i]
		if skipped(e.Check) {
			continue
		}
		if !c.skipped(e.Check) {
			reported[e.ID] = true
			run[e.ID] = true
		}
		if run[e.ID] {
			for _, n := range e.Needs {
				run[n] = true
			}
		}
	}
	for _, e := range clusterCatalogue {
		if skipped(e.Check) {
			delete(run, e.ID)
		}
	}
	return run, reported
}

// skipped reports whether Only or Skip leave ch out of the report.
func (c *clusterRun) skipped(ch Check) bool {
	if len(c.cfg.Only) > 0 {
		only := false
		for _, s := range c.cfg.Only {
			only = only || s == ch.ID || s == ch.Category
		}
		if !only {
			return true
		}
	}
	for _, s := range c.cfg.Skip {
		if s == ch.ID || s == ch.Category {
			return true
		}
	}
	return false
}

// clusterRun is the state of one cluster-mode run.
type clusterRun struct {
	cfg    ClusterConfig
	logger klog.Logger
	report *Report
	// socket reads CDI specs with the socket mode's code.
	socket *runner
	ns     string
	class  string
	// devices are the driver's devices on the node, by name.
	devices map[string]*resourceapi.Device
	pool    map[string]string // device name -> pool
	// published says how the slices were found at the start: "" when
	// complete, else what was missing after PublishTimeout.
	published string
	// oddNames are the variables whose names are no shell identifiers
	// that containers got, with the pods that showed them; shellDropped
	// those the containers' shell did not pass on.
	oddNames     map[string][]string
	shellDropped map[string]bool
	// shellEnvOnly is set once a container's environment could only be
	// read from its shell (an image without od).
	shellEnvOnly bool
	// pods started so far, by name.
	pods map[string]*podRun
	// freed is the device that pod.unprepare saw freed.
	freed string
	// stoppedMade are the CDI devices of pods deleted so far.
	stoppedMade []string
	// restart is what pod.driver-restart saw, for the checks after it.
	restart *restartSeen
	// claimCollisions are the variables that pod.two-claims saw set to
	// two values by the two claims' devices (nil: not judged).
	claimCollisions []string
	// namesDevices is set once a container's environment named its
	// device by name or attribute value.
	namesDevices bool
	// planned are the checks the run runs (reported or not).
	planned map[string]bool
}

// restartSeen is what pod.driver-restart saw.
type restartSeen struct {
	// keep runs since before the restart with claim "keep" (nil when it
	// did not start: keepErr).
	keep    *podRun
	keepErr error
	// allocated are the devices (pool/name) of the claims of pods that
	// ran through the restart.
	allocated []string
	// marks are the driver's slices for the node before the restart.
	marks sliceMarks
	// next is the new driver pod (or how the driver was restarted) and
	// started when it started.
	next    string
	started time.Time
}

// podRun is one of the suite's pods, once it runs.
type podRun struct {
	name    string
	pod     *corev1.Pod
	env     map[string]string            // the first container's environment
	envs    map[string]map[string]string // every container's, by name
	claims  []*resourceapi.ResourceClaim
	devices []string                     // allocated devices of the driver, pool/name
	made    cdiMade                      // CDI devices defined while it started
	edits   map[string]map[string]string // env each new CDI device of its claims sets, by CDI ID
}

func (c *clusterRun) removeLeftovers(ctx context.Context) error {
	sel := labels.SelectorFromSet(c.labels()).String()
	nss, err := c.cfg.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return fmt.Errorf("list namespaces of earlier runs: %w", err)
	}
	for _, ns := range nss.Items {
		c.logger.Info("Deleting what an earlier run left", "namespace", ns.Name)
		// Its pods must be gone (their devices free); the namespace
		// itself may take its time.
		if err := c.deleteNamespace(ctx, ns.Name); err != nil {
			return fmt.Errorf("namespace %s of an earlier run: %w", ns.Name, err)
		}
	}
	if err := c.cfg.Client.ResourceV1().DeviceClasses().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete DeviceClasses of earlier runs: %w", err)
	}
	return nil
}

// labels returns the labels of every object the run creates.
func (c *clusterRun) labels() map[string]string {
	return map[string]string{ClusterLabel: c.cfg.NodeName, ClusterDriverLabel: c.cfg.DriverName}
}

// refuseBusyNode fails with ErrNodeBusy when a pod on the node has a
// claim with devices of the driver.
func (c *clusterRun) refuseBusyNode(ctx context.Context) error {
	pods, err := c.cfg.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", c.cfg.NodeName).String()})
	if err != nil {
		return fmt.Errorf("list pods on node %s: %w", c.cfg.NodeName, err)
	}
	var busy []string
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, name := range podClaimNames(&p) {
			claim, err := c.cfg.Client.ResourceV1().ResourceClaims(p.Namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			if len(ownResults(c.cfg.DriverName, claim)) > 0 {
				busy = append(busy, p.Namespace+"/"+p.Name)
				break
			}
		}
	}
	if len(busy) > 0 && !c.cfg.AllowOtherPods {
		sort.Strings(busy)
		return fmt.Errorf("%w: %s (drain them, or allow them: ClusterConfig.AllowOtherPods, --allow-other-pods)", ErrNodeBusy, strings.Join(limit(busy, 10), ", "))
	}
	return nil
}

// begin creates the namespace and the class and reads the driver's
// devices on the node.
func (c *clusterRun) begin(ctx context.Context) error {
	nsLabels := c.labels()
	nsLabels[adminAccessLabel] = "true"
	ns, err := c.cfg.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "drakit-conformance-cluster-", Labels: nsLabels}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create namespace: %w", err)
	}
	c.ns = ns.Name
	c.pods = map[string]*podRun{}
	c.class = c.cfg.DeviceClassName
	if c.class == "" {
		cl, err := c.cfg.Client.ResourceV1().DeviceClasses().Create(ctx, &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "drakit-conformance-", Labels: c.labels()},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf("device.driver == %q", c.cfg.DriverName)}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create DeviceClass: %w", err)
		}
		c.class = cl.Name
	}
	return c.waitForSlices(ctx)
}

// nodeSlices returns the driver's ResourceSlices for the node.
func (c *clusterRun) nodeSlices(ctx context.Context) ([]*resourceapi.ResourceSlice, error) {
	list, err := c.cfg.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.driver", c.cfg.DriverName).String()})
	if err != nil {
		return nil, fmt.Errorf("list ResourceSlices: %w", err)
	}
	var out []*resourceapi.ResourceSlice
	for i := range list.Items {
		if sl := &list.Items[i]; sl.Spec.NodeName != nil && *sl.Spec.NodeName == c.cfg.NodeName {
			out = append(out, sl)
		}
	}
	return out, nil
}

// waitForSlices waits until the driver's pools on the node are complete,
// as socket mode does (a run may start right after the driver's pod is
// ready, before it published), up to PublishTimeout, and indexes their
// devices; after that it indexes what there is and says what is
// missing.
func (c *clusterRun) waitForSlices(ctx context.Context) error {
	deadline := time.Now().Add(c.cfg.PublishTimeout)
	for {
		slices, err := c.nodeSlices(ctx)
		if err != nil {
			return err
		}
		ps := slicepool.Group(slices)
		incomplete := slicepool.Incomplete(ps)
		done := len(slices) > 0 && len(incomplete) == 0
		if done || time.Now().After(deadline) {
			if !done {
				c.published = fmt.Sprintf("no complete pool within %s", c.cfg.PublishTimeout)
				if len(incomplete) > 0 {
					c.published = fmt.Sprintf("pools incomplete after %s: %s", c.cfg.PublishTimeout, strings.Join(incomplete, "; "))
				}
			}
			c.devices, c.pool = map[string]*resourceapi.Device{}, map[string]string{}
			for _, p := range ps {
				for _, sl := range p.Slices {
					for j := range sl.Spec.Devices {
						d := &sl.Spec.Devices[j]
						c.devices[d.Name] = d
						c.pool[d.Name] = sl.Spec.Pool.Name
					}
				}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// cleanup deletes the suite's pods and waits until they are gone, so
// that the driver has unprepared their claims when RunCluster returns,
// then the namespace (claims, templates: the namespace controller
// finishes that) and the class.
func (c *clusterRun) cleanup(ctx context.Context) {
	if c.ns != "" {
		if err := c.deleteNamespace(ctx, c.ns); err != nil {
			c.logger.Error(err, "Delete namespace", "namespace", c.ns)
		}
	}
	if c.cfg.DeviceClassName == "" && c.class != "" {
		if err := c.cfg.Client.ResourceV1().DeviceClasses().Delete(ctx, c.class, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			c.logger.Error(err, "Delete DeviceClass", "class", c.class)
		}
	}
}

// deleteNamespace deletes the pods in ns, waits until they are gone (up
// to PodTimeout), and deletes ns.
func (c *clusterRun) deleteNamespace(ctx context.Context, ns string) error {
	// Gracefully (the pods' 1 s), not forced: the kubelet keeps a
	// deleted pod's object until it has had its claims unprepared
	// (pkg/kubelet/kubelet_pods.go PodCouldHaveRunningContainers); a
	// forced deletion removes it at once.
	pods := c.cfg.Client.CoreV1().Pods(ns)
	var errs []error
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete pods: %w", err))
	}
	if err := c.waitGone(ctx, func(ctx context.Context) error {
		l, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(l.Items) > 0 {
			return fmt.Errorf("%d pods left", len(l.Items))
		}
		return apierrors.NewNotFound(corev1.Resource("pods"), "")
	}); err != nil {
		errs = append(errs, fmt.Errorf("pods: %w", err))
	}
	if err := c.cfg.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete namespace: %w", err))
	}
	return errors.Join(errs...)
}

// waitGone polls get until it reports NotFound, up to PodTimeout.
func (c *clusterRun) waitGone(ctx context.Context, get func(context.Context) error) error {
	deadline := time.Now().Add(c.cfg.PodTimeout)
	for {
		err := get(ctx)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still there after %s", c.cfg.PodTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// envScript prints the container's environment once, then waits: the
// environment its shell passes on (env), then, hex-encoded, the one its
// first process got from the container runtime (/proc/$$/environ: the
// shell is that process; NUL-separated, values with newlines intact,
// and names a shell drops, such as those with '-', kept).
const envScript = `env; echo ` + environMark + `; od -An -v -tx1 /proc/$$/environ; echo ` + envEndMark + `; exec sleep 3600`

// kubeEscape escapes s for a container's command: the kubelet expands
// $(VAR) there and reads $$ as one $.
func kubeEscape(s string) string { return strings.ReplaceAll(s, "$", "$$") }

// The lines that delimit the parts of envScript's output.
const (
	environMark = "---drakit-environ---"
	envEndMark  = "---drakit-env-end---"
)

// container is one container of a suite pod and the claim references
// it names (corev1.ResourceClaim: a pod claim's name, and a request of
// it or none for all).
type container struct {
	name   string
	claims []corev1.ResourceClaim
}

// podSpec is one of the suite's pods: bound to the node by node affinity
// (the scheduler allocates its claims), tolerating every taint, on the
// host's network (a node needs no CNI for it), with the claims given and
// containers that print their environment: by default one, "c", that
// names every claim.
func (c *clusterRun) podSpec(name string, claims []corev1.PodResourceClaim, containers []container) *corev1.Pod {
	if len(containers) == 0 {
		var refs []corev1.ResourceClaim
		for _, pc := range claims {
			refs = append(refs, corev1.ResourceClaim{Name: pc.Name})
		}
		containers = []container{{name: "c", claims: refs}}
	}
	var cs []corev1.Container
	for _, ct := range containers {
		cs = append(cs, corev1.Container{
			Name: ct.name, Image: c.cfg.Image, ImagePullPolicy: c.cfg.ImagePullPolicy,
			Command:   []string{"sh", "-c", kubeEscape(envScript)},
			Resources: corev1.ResourceRequirements{Claims: ct.claims},
		})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.ns, Labels: c.labels()},
		Spec: corev1.PodSpec{
			// The scheduler must place the pod (it allocates the claims),
			// so no spec.nodeName: node affinity to the node's name.
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
					Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{c.cfg.NodeName}}}}}}}},
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			HostNetwork:                   true,
			ResourceClaims:                claims,
			Containers:                    cs,
		},
	}
}

// template creates a ResourceClaimTemplate with spec, for a pod claim
// named "claim".
func (c *clusterRun) template(ctx context.Context, name string, spec resourceapi.ResourceClaimSpec) (corev1.PodResourceClaim, error) {
	t, err := c.cfg.Client.ResourceV1().ResourceClaimTemplates(c.ns).Create(ctx, &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.ns, Labels: c.labels()},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: spec},
	}, metav1.CreateOptions{})
	if err != nil {
		return corev1.PodResourceClaim{}, fmt.Errorf("create ResourceClaimTemplate %s: %w", name, err)
	}
	return corev1.PodResourceClaim{Name: "claim", ResourceClaimTemplateName: &t.Name}, nil
}

// claim creates a ResourceClaim with spec, for pods to share.
func (c *clusterRun) claim(ctx context.Context, name string, spec resourceapi.ResourceClaimSpec) (corev1.PodResourceClaim, error) {
	cl, err := c.cfg.Client.ResourceV1().ResourceClaims(c.ns).Create(ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.ns, Labels: c.labels()},
		Spec:       spec,
	}, metav1.CreateOptions{})
	if err != nil {
		return corev1.PodResourceClaim{}, fmt.Errorf("create ResourceClaim %s: %w", name, err)
	}
	return corev1.PodResourceClaim{Name: "claim", ResourceClaimName: &cl.Name}, nil
}

// start creates a pod with claims and one container that names them
// all; see startWith.
func (c *clusterRun) start(ctx context.Context, name string, claims ...corev1.PodResourceClaim) (*podRun, error) {
	return c.startWith(ctx, name, claims, nil)
}

// startWith creates a pod with claims and containers, waits until every
// container has printed its environment, and records what it got. The
// CDI devices that appear on the node meanwhile are the pod's (pods of
// a run start one at a time), except those that carry another claim's
// UID (see ownMade), so that runs for other drivers on the node are not
// blamed on this one.
func (c *clusterRun) startWith(ctx context.Context, name string, claims []corev1.PodResourceClaim, containers []container) (*podRun, error) {
	before := c.socket.snapshotCDI(ctx)
	spec := c.podSpec(name, claims, containers)
	pod, err := c.cfg.Client.CoreV1().Pods(c.ns).Create(ctx, spec, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod %s: %w", name, err)
	}
	pr := &podRun{name: name, envs: map[string]map[string]string{}}
	deadline := time.Now().Add(c.cfg.PodTimeout)
	for {
		pod, err = c.cfg.Client.CoreV1().Pods(c.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get pod %s: %w", name, err)
		}
		if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
			return nil, fmt.Errorf("pod %s ended (%s): %s", name, pod.Status.Phase, podstatus.Why(pod))
		}
		if why := createFailed(pod); why != "" {
			return nil, fmt.Errorf("pod %s: the container runtime cannot create its container (the kubelet prepared its claims; CDI IDs the runtime cannot resolve or apply?): %s", name, why)
		}
		if pod.Status.Phase == corev1.PodRunning {
			for _, ct := range spec.Spec.Containers {
				if pr.envs[ct.Name] != nil {
					continue
				}
				data, err := c.cfg.Client.CoreV1().Pods(c.ns).GetLogs(name, &corev1.PodLogOptions{Container: ct.Name}).DoRaw(ctx)
				if err == nil && strings.Contains(string(data), envEndMark) {
					env, shell, environ := parseEnv(string(data))
					pr.envs[ct.Name] = env
					c.shellEnvOnly = c.shellEnvOnly || !environ
					c.noteDropped(name, env, shell)
				}
			}
			if len(pr.envs) == len(spec.Spec.Containers) {
				break
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("pod %s not running after %s: phase %s; %s%s", name, c.cfg.PodTimeout, pod.Status.Phase, podstatus.Why(pod), c.podEvents(ctx, name))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	pr.pod = pod
	pr.env = pr.envs[spec.Spec.Containers[0].Name]
	for _, claimName := range podClaimNames(pod) {
		cl, err := c.cfg.Client.ResourceV1().ResourceClaims(c.ns).Get(ctx, claimName, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get claim %s of pod %s: %w", claimName, name, err)
		}
		pr.claims = append(pr.claims, cl)
		for _, a := range ownResults(c.cfg.DriverName, cl) {
			pr.devices = append(pr.devices, a.Device)
		}
	}
	if before != nil {
		after := c.socket.snapshotCDI(ctx)
		pr.made = ownMade(created(before, after), after, pr.claims)
		if len(pr.made.devices) > 0 {
			cache, _, err := c.socket.cdiCache(ctx)
			if err == nil {
				pr.edits = map[string]map[string]string{}
				for _, id := range pr.made.devices {
					if spec, err := injectInto(cache, []string{id}); err == nil {
						pr.edits[id] = envMap(spec)
					}
				}
			}
		}
	}
	for _, d := range pr.devices {
		c.namesDevices = c.namesDevices || c.seen(pr.env, d)
	}
	c.pods[name] = pr
	return pr, nil
}

// podClaimNames returns the names of a pod's ResourceClaims: those it
// names, and those generated from its templates (pod status).
func podClaimNames(pod *corev1.Pod) []string {
	var out []string
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.ResourceClaimName != nil {
			out = append(out, *pc.ResourceClaimName)
		}
	}
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			out = append(out, *s.ResourceClaimName)
		}
	}
	return out
}

// parseEnv reads what envScript printed: the environment the container
// got (from /proc/$$/environ, environ true; from the shell's env where
// that part is missing, e.g. an image without od) and the one its shell
// passes on.
func parseEnv(logs string) (env, shell map[string]string, environ bool) {
	shell = map[string]string{}
	head, rest, _ := strings.Cut(logs, environMark)
	for _, l := range strings.Split(head, "\n") {
		if l == envEndMark {
			break
		}
		if k, v, ok := strings.Cut(l, "="); ok {
			shell[k] = v
		}
	}
	hexPart, _, _ := strings.Cut(rest, envEndMark)
	var raw []byte
	for _, tok := range strings.Fields(hexPart) {
		b, err := strconv.ParseUint(tok, 16, 8)
		if err != nil || len(tok) != 2 {
			raw = nil
			break
		}
		raw = append(raw, byte(b))
	}
	if len(raw) == 0 {
		return shell, shell, false
	}
	env = map[string]string{}
	for _, kv := range strings.Split(string(raw), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			env[k] = v
		}
	}
	return env, shell, true
}

// noteDropped records the variables of env, which pod's container got,
// whose names are no shell identifiers; shell is what its shell passed
// on.
func (c *clusterRun) noteDropped(pod string, env, shell map[string]string) {
	for k := range env {
		if shellName.MatchString(k) {
			continue
		}
		if c.oddNames == nil {
			c.oddNames, c.shellDropped = map[string][]string{}, map[string]bool{}
		}
		if !slices.Contains(c.oddNames[k], pod) {
			c.oddNames[k] = append(c.oddNames[k], pod)
		}
		if _, passed := shell[k]; !passed {
			c.shellDropped[k] = true
		}
	}
}

// uidPattern matches an object UID (a UUID) inside a CDI device or file
// name.
var uidPattern = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// ownMade keeps of made the CDI devices that belong to claims: those
// whose names, or the names of the spec files in after that define them,
// carry the UID of one of claims; when there are none, those that carry
// no UID at all. A device that carries only other UIDs belongs to
// another claim (a run for another driver on the node, say).
func ownMade(made cdiMade, after *cdiState, claims []*resourceapi.ResourceClaim) cdiMade {
	if after == nil {
		return made
	}
	ours := func(s string) bool {
		for _, cl := range claims {
			if cl.UID != "" && strings.Contains(s, string(cl.UID)) {
				return true
			}
		}
		return false
	}
	var own, anonymous []string
	for _, d := range made.devices {
		switch {
		case ours(d) || ours(after.devices[d]):
			own = append(own, d)
		case !uidPattern.MatchString(d) && !uidPattern.MatchString(after.devices[d]):
			anonymous = append(anonymous, d)
		}
	}
	if len(own) == 0 {
		own = anonymous
	}
	var files []string
	for _, f := range made.files {
		if ours(f) || !uidPattern.MatchString(f) {
			files = append(files, f)
		}
	}
	return cdiMade{devices: own, files: files}
}

// createFailed returns why the container runtime refused to create a
// container of the pod for its CDI devices (waiting reason
// CreateContainerError, naming CDI), or "". That comes after the kubelet
// prepared the pod's claims, and retries fail the same way, so the suite
// does not wait for the pod any longer. Other create errors can be
// passing (containerd's "name is reserved" under load): those it waits
// out.
func createFailed(p *corev1.Pod) string {
	for _, s := range p.Status.ContainerStatuses {
		if w := s.State.Waiting; w != nil && w.Reason == "CreateContainerError" && strings.Contains(strings.ToLower(w.Message), "cdi") {
			return fmt.Sprintf("container %s waiting: %s %s", s.Name, w.Reason, w.Message)
		}
	}
	return ""
}

// podEvents returns the pod's warning events, for a pod that does not
// start (FailedPrepareDynamicResources and the like).
func (c *clusterRun) podEvents(ctx context.Context, name string) string {
	evs, err := c.cfg.Client.CoreV1().Events(c.ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String()})
	if err != nil {
		return ""
	}
	var out []string
	for _, e := range evs.Items {
		if e.Type == corev1.EventTypeWarning {
			out = append(out, e.Reason+": "+e.Message)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "; events: " + strings.Join(limit(out, 5), "; ")
}

// stop deletes pods gracefully (1 s) and waits until they are gone: the
// kubelet has stopped their containers then, and unprepares their claims
// when it cleans the pods up.
func (c *clusterRun) stop(ctx context.Context, names ...string) error {
	for _, n := range names {
		if err := c.cfg.Client.CoreV1().Pods(c.ns).Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete pod %s: %w", n, err)
		}
	}
	for _, n := range names {
		if err := c.waitGone(ctx, func(ctx context.Context) error {
			_, err := c.cfg.Client.CoreV1().Pods(c.ns).Get(ctx, n, metav1.GetOptions{})
			return err
		}); err != nil {
			return fmt.Errorf("pod %s: %w", n, err)
		}
		if pr := c.pods[n]; pr != nil {
			c.stoppedMade = append(c.stoppedMade, pr.made.devices...)
		}
		delete(c.pods, n)
	}
	return nil
}

// newName returns a fresh object name with prefix.
func newName(prefix string) string { return prefix + "-" + rand.String(5) }
