package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// ErrNodeBusy is returned by [RunCluster] when pods the suite did not
// create use the driver on the node and ClusterConfig.AllowOtherPods is
// not set: the suite's pods would compete with them for devices, and its
// restart check would disturb them.
var ErrNodeBusy = errors.New("other pods use the driver on the node")

// ClusterLabel is on every object cluster mode creates (namespace,
// DeviceClass, pods, claims); its value is the node under test. A run
// deletes what an earlier, interrupted run left for the same node.
const ClusterLabel = "conformance.drakit.dev/cluster-node"

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
	// env and sleep (busybox). Required. Pods never pull it unless
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
	// devices once the DaemonSet's next pod serves. Without them that
	// check skips.
	DriverNamespace, DriverPodSelector string
	// CDIDirs, ReadCDI and ReadCDICommand say where the node's CDI specs
	// can be read, as in Config. With them the suite knows exactly which
	// environment variables each device's CDI edits set, and checks that
	// unprepare removed them; without them it recognizes a device in a
	// container's environment by its name or attribute values.
	CDIDirs        []string
	ReadCDI        func(ctx context.Context) (map[string][]byte, error)
	ReadCDICommand []string
	// PodTimeout bounds the wait for a pod to run, or to be gone
	// (default 2 minutes).
	PodTimeout time.Duration
	// Skip names checks or categories not to run; Only, when set, the
	// only ones to run (the pods a check uses are started all the same
	// when an earlier check would have started them).
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
	return nil
}

// RunCluster checks an installed driver through the cluster's own
// scheduler, kubelet and container runtime, with nothing but a client:
// it creates pods with claims on cfg.NodeName (see [ClusterChecks]),
// checks what their containers see, and deletes everything it created
// (a namespace, a DeviceClass, all labeled [ClusterLabel]) before it
// returns, also when ctx is canceled (e.g. by SIGINT). It returns an
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
	for _, e := range clusterCatalogue {
		if c.skipped(e.Check) {
			continue
		}
		t0 := time.Now()
		var o outcome
		if ctx.Err() != nil {
			o = skip("run canceled")
		} else {
			o = e.run(c, ctx)
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
	// pods started so far, by name.
	pods map[string]*podRun
	// freed is the device that pod.unprepare saw freed.
	freed string
	// stoppedMade are the CDI devices of pods deleted so far.
	stoppedMade []string
}

// podRun is one of the suite's pods, once it runs.
type podRun struct {
	name    string
	pod     *corev1.Pod
	env     map[string]string
	claims  []*resourceapi.ResourceClaim
	devices []string                     // allocated devices of the driver, pool/name
	made    cdiMade                      // CDI devices defined while it started
	edits   map[string]map[string]string // env each new CDI device of its claims sets, by CDI ID
}

func (c *clusterRun) removeLeftovers(ctx context.Context) error {
	sel := ClusterLabel + "=" + c.cfg.NodeName
	nss, err := c.cfg.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return fmt.Errorf("list namespaces of earlier runs: %w", err)
	}
	for _, ns := range nss.Items {
		c.logger.Info("Deleting what an earlier run left", "namespace", ns.Name)
		if err := c.cfg.Client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete namespace %s of an earlier run: %w", ns.Name, err)
		}
		if err := c.waitGone(ctx, func(ctx context.Context) error {
			_, err := c.cfg.Client.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{})
			return err
		}); err != nil {
			return fmt.Errorf("namespace %s of an earlier run: %w", ns.Name, err)
		}
	}
	if err := c.cfg.Client.ResourceV1().DeviceClasses().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete DeviceClasses of earlier runs: %w", err)
	}
	return nil
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
		for _, s := range p.Status.ResourceClaimStatuses {
			if s.ResourceClaimName == nil {
				continue
			}
			claim, err := c.cfg.Client.ResourceV1().ResourceClaims(p.Namespace).Get(ctx, *s.ResourceClaimName, metav1.GetOptions{})
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
	labels := map[string]string{ClusterLabel: c.cfg.NodeName, adminAccessLabel: "true"}
	ns, err := c.cfg.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "drakit-conformance-cluster-", Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create namespace: %w", err)
	}
	c.ns = ns.Name
	c.pods = map[string]*podRun{}
	c.class = c.cfg.DeviceClassName
	if c.class == "" {
		cl, err := c.cfg.Client.ResourceV1().DeviceClasses().Create(ctx, &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "drakit-conformance-", Labels: map[string]string{ClusterLabel: c.cfg.NodeName}},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf("device.driver == %q", c.cfg.DriverName)}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create DeviceClass: %w", err)
		}
		c.class = cl.Name
	}
	slices, err := c.cfg.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.driver", c.cfg.DriverName).String()})
	if err != nil {
		return fmt.Errorf("list ResourceSlices: %w", err)
	}
	c.devices, c.pool = map[string]*resourceapi.Device{}, map[string]string{}
	for i := range slices.Items {
		sl := &slices.Items[i]
		if sl.Spec.NodeName == nil || *sl.Spec.NodeName != c.cfg.NodeName {
			continue
		}
		for j := range sl.Spec.Devices {
			d := &sl.Spec.Devices[j]
			c.devices[d.Name] = d
			c.pool[d.Name] = sl.Spec.Pool.Name
		}
	}
	return nil
}

// cleanup deletes the namespace (pods, claims, templates) and the class,
// and waits until the pods are gone, so that the driver has unprepared
// their claims when RunCluster returns.
func (c *clusterRun) cleanup(ctx context.Context) {
	if c.ns != "" {
		if err := c.cfg.Client.CoreV1().Namespaces().Delete(ctx, c.ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			c.logger.Error(err, "Delete namespace", "namespace", c.ns)
		}
		_ = c.cfg.Client.CoreV1().Pods(c.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
		_ = c.waitGone(ctx, func(ctx context.Context) error {
			_, err := c.cfg.Client.CoreV1().Namespaces().Get(ctx, c.ns, metav1.GetOptions{})
			return err
		})
	}
	if c.cfg.DeviceClassName == "" && c.class != "" {
		if err := c.cfg.Client.ResourceV1().DeviceClasses().Delete(ctx, c.class, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			c.logger.Error(err, "Delete DeviceClass", "class", c.class)
		}
	}
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

// envScript prints the container's environment once, then waits.
const envScript = `env; echo ---drakit-env-end---; exec sleep 3600`

// podSpec is one of the suite's pods: bound to the node by node affinity
// (the scheduler allocates its claims), tolerating every taint, on the
// host's network (a node needs no CNI for it), one container that prints
// its environment, and the claims given.
func (c *clusterRun) podSpec(name string, claims []corev1.PodResourceClaim) *corev1.Pod {
	var refs []corev1.ResourceClaim
	for _, pc := range claims {
		refs = append(refs, corev1.ResourceClaim{Name: pc.Name})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.ns, Labels: map[string]string{ClusterLabel: c.cfg.NodeName}},
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
			Containers: []corev1.Container{{
				Name: "c", Image: c.cfg.Image, ImagePullPolicy: c.cfg.ImagePullPolicy,
				Command:   []string{"sh", "-c", envScript},
				Resources: corev1.ResourceRequirements{Claims: refs},
			}},
		},
	}
}

// template creates a ResourceClaimTemplate with spec.
func (c *clusterRun) template(ctx context.Context, name string, spec resourceapi.ResourceClaimSpec) (corev1.PodResourceClaim, error) {
	t, err := c.cfg.Client.ResourceV1().ResourceClaimTemplates(c.ns).Create(ctx, &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.ns, Labels: map[string]string{ClusterLabel: c.cfg.NodeName}},
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
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.ns, Labels: map[string]string{ClusterLabel: c.cfg.NodeName}},
		Spec:       spec,
	}, metav1.CreateOptions{})
	if err != nil {
		return corev1.PodResourceClaim{}, fmt.Errorf("create ResourceClaim %s: %w", name, err)
	}
	return corev1.PodResourceClaim{Name: "claim", ResourceClaimName: &cl.Name}, nil
}

// start creates a pod with claims, waits until its container has
// printed its environment, and records what it got. The CDI devices
// that appear on the node meanwhile are the pod's (pods start one at a
// time).
func (c *clusterRun) start(ctx context.Context, name string, claims ...corev1.PodResourceClaim) (*podRun, error) {
	before := c.socket.snapshotCDI(ctx)
	pod, err := c.cfg.Client.CoreV1().Pods(c.ns).Create(ctx, c.podSpec(name, claims), metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod %s: %w", name, err)
	}
	pr := &podRun{name: name}
	deadline := time.Now().Add(c.cfg.PodTimeout)
	var logs string
	for {
		pod, err = c.cfg.Client.CoreV1().Pods(c.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get pod %s: %w", name, err)
		}
		if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
			return nil, fmt.Errorf("pod %s ended (%s): %s", name, pod.Status.Phase, podWhy(pod))
		}
		if pod.Status.Phase == corev1.PodRunning {
			data, err := c.cfg.Client.CoreV1().Pods(c.ns).GetLogs(name, &corev1.PodLogOptions{Container: "c"}).DoRaw(ctx)
			if err == nil && strings.Contains(string(data), "---drakit-env-end---") {
				logs = string(data)
				break
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("pod %s not running after %s: phase %s; %s%s", name, c.cfg.PodTimeout, pod.Status.Phase, podWhy(pod), c.podEvents(ctx, name))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	pr.pod = pod
	pr.env = map[string]string{}
	for _, l := range strings.Split(logs, "\n") {
		if l == "---drakit-env-end---" {
			break
		}
		if k, v, ok := strings.Cut(l, "="); ok {
			pr.env[k] = v
		}
	}
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName == nil {
			continue
		}
		cl, err := c.cfg.Client.ResourceV1().ResourceClaims(c.ns).Get(ctx, *s.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get claim %s of pod %s: %w", *s.ResourceClaimName, name, err)
		}
		pr.claims = append(pr.claims, cl)
		for _, a := range ownResults(c.cfg.DriverName, cl) {
			pr.devices = append(pr.devices, a.Device)
		}
	}
	if before != nil {
		pr.made = created(before, c.socket.snapshotCDI(ctx))
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
	c.pods[name] = pr
	return pr, nil
}

// podWhy summarizes why a pod does not run.
func podWhy(p *corev1.Pod) string {
	var out []string
	for _, cond := range p.Status.Conditions {
		if cond.Status != corev1.ConditionTrue && cond.Message != "" {
			out = append(out, fmt.Sprintf("%s: %s", cond.Type, cond.Message))
		}
	}
	for _, s := range p.Status.ContainerStatuses {
		if w := s.State.Waiting; w != nil {
			out = append(out, fmt.Sprintf("container %s waiting: %s %s", s.Name, w.Reason, w.Message))
		}
		if t := s.State.Terminated; t != nil {
			out = append(out, fmt.Sprintf("container %s terminated: %s %s (exit %d)", s.Name, t.Reason, t.Message, t.ExitCode))
		}
	}
	if len(out) == 0 {
		return "no condition says why"
	}
	return strings.Join(out, "; ")
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
