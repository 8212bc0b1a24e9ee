package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/klog/v2"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/drakit/drakit/internal/kubeletclient"
)

// adminAccessLabel must be on a namespace for claims in it to ask for
// admin access.
const adminAccessLabel = "resource.kubernetes.io/admin-access"

// Test runs the suite from a vendor's own go test, each check as a
// subtest named by its ID, run when it is reached: a failed MUST check
// fails its subtest, a warning is logged, a skip skips. A check runs on
// its own ("go test -run TestConformance/prepare.idempotent" runs that
// check, after setting up what it needs: registration, slices, the main
// claims); checks not selected are absent from the report. Setup errors
// (bad Config, no API server) fail t.
func Test(t *testing.T, cfg Config) *Report {
	t.Helper()
	r, err := begin(t.Context(), cfg)
	if err != nil {
		t.Fatalf("conformance: %v", err)
	}
	defer r.end()
	for _, e := range catalogue {
		if !r.reported(e) {
			continue
		}
		t.Run(e.ID, func(t *testing.T) {
			n := len(r.report.Results)
			var before Status
			if n > 0 {
				before = r.report.Results[n-1].Status
			}
			res := r.exec(t.Context(), e)
			if n > 0 && before != Fail && r.report.Results[n-1].Status == Fail {
				prev := r.report.Results[n-1]
				t.Errorf("the previous check %s is failed: %s", prev.ID, prev.Message)
			}
			switch res.Status {
			case Fail:
				t.Errorf("[%s] %s\n%s\nrule: %s", res.Level, res.Description, res.Message, res.Rule)
			case Warn:
				t.Logf("WARNING [%s] %s\n%s\nrule: %s", res.Level, res.Description, res.Message, res.Rule)
			case Skip:
				t.Skip(res.Message)
			default:
				t.Log(res.Message)
			}
		})
	}
	if r.report.Aborted != "" {
		t.Errorf("conformance run ended early: %s", r.report.Aborted)
	}
	if skipped := r.report.restartsSkipped(); len(skipped) > 0 {
		t.Logf("%s", restartsSkippedNote(skipped))
	}
	return r.report
}

// Run runs every check of the catalogue against the driver and returns
// the report. It returns an error only when the run cannot start (invalid
// Config, namespace or class cannot be created, driver cannot be
// started); failures of the driver are results in the report. Everything
// the run creates in the API server and every process it starts is
// removed or stopped before it returns.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	r, err := begin(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer r.end()
	for _, e := range catalogue {
		if r.reported(e) {
			r.exec(ctx, e)
		}
	}
	return r.report, nil
}

// reported says whether check e runs and is reported: Only selects it,
// or it is robust.liveness-probe (last in the catalogue) and a liveness
// probe ended the driver during the run (see crashForced).
func (r *runner) reported(e entry) bool {
	return r.cfg.selected(e.Check) || r.crashForced(e)
}

// crashForced reports whether check e is robust.liveness-probe and a
// liveness probe ended the driver during the run: a liveness probe
// follows every check, whichever Only and Skip select, and a crash it
// caused is reported whatever they say.
func (r *runner) crashForced(e entry) bool {
	return e.ID == livenessProbeCheck && len(r.probeCrashes) > 0
}

// begin validates cfg and prepares a run: namespace, class, consumer pod,
// the driver started.
func begin(ctx context.Context, cfg Config) (*runner, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, logger: klog.FromContext(ctx)}
	r.report = &Report{Driver: cfg.DriverName, Node: cfg.NodeName, Started: time.Now()}
	if err := r.start(ctx); err != nil {
		r.cleanup()
		return nil, err
	}
	return r, nil
}

// end undoes what the run set up and completes the report.
func (r *runner) end() {
	r.cleanup()
	r.report.Duration = time.Since(r.report.Started)
}

// runner holds the state of one run: connections, the driver process,
// and the fixtures that checks need (set up once, on first need).
type runner struct {
	cfg    Config
	logger klog.Logger
	report *Report

	ns         string
	createdNS  bool
	consumer   *corev1.Pod
	class      string
	createdCls bool
	sched      *scheduler
	proc       *exec.Cmd
	procDone   chan struct{}
	procMu     sync.Mutex
	procErr    error
	procExit   time.Time // when the started driver exited
	logFile    *os.File
	logTail    *tailBuffer
	gone       error // set when the driver stopped serving for good
	// probes counts the liveness probes sent; probeCrashes says which
	// of them ended the driver (robust.liveness-probe reports them).
	probes       int
	probeCrashes []string
	// registered is when the driver last registered (NotifyRegistrationStatus accepted).
	registered time.Time
	// repub is the publication of the driver after its last restart,
	// awaited before the suite allocates from its slices again.
	repub    *republication
	cleanups []func(context.Context) // run at the end, last first

	fixtures [numFixtures]fixtureState
	// fxRegistration, fxEndpoint, fxNode
	regSocket   string
	info        *registerapi.PluginInfo
	endpoint    string
	conn        *grpc.ClientConn
	node        drapbv1.DRAPluginClient
	nodeService string
	// fxSlices
	slices    []*resourceapi.ResourceSlice
	devices   []devRef
	deviceObj map[devRef]*resourceapi.Device
	// fxEveryDevice, fxMain, fxShared, fxHealth, fxRestart
	every   everyDevice
	main    mainClaims
	shared  sharedClaims
	health  healthReports
	restart restarted
}

// outcome is what a check function returns.
type outcome struct {
	status Status
	msg    string
}

func pass(format string, args ...any) outcome {
	return outcome{Pass, fmt.Sprintf(format, args...)}
}
func fail(format string, args ...any) outcome {
	return outcome{Fail, fmt.Sprintf(format, args...)}
}
func skip(format string, args ...any) outcome {
	return outcome{Skip, fmt.Sprintf(format, args...)}
}

// failures collects problems of one check; empty means pass.
type failures []string

func (f *failures) add(format string, args ...any) { *f = append(*f, fmt.Sprintf(format, args...)) }

func (f failures) outcome(passMsg string, args ...any) outcome {
	if len(f) == 0 {
		return pass(passMsg, args...)
	}
	const max = 8
	msgs := []string(f)
	more := ""
	if len(msgs) > max {
		more = fmt.Sprintf("\n(and %d more)", len(msgs)-max)
		msgs = msgs[:max]
	}
	return fail("%s%s", strings.Join(msgs, "\n"), more)
}

// exec runs one check (after what it needs) and records its result.
func (r *runner) exec(ctx context.Context, e entry) Result {
	start := time.Now()
	var out outcome
	switch {
	case r.cfg.skipped(e.Check) && !r.crashForced(e):
		out = skip("skipped by configuration")
	case ctx.Err() != nil:
		out = skip("run canceled: %v", ctx.Err())
	case r.gone != nil:
		out = skip("not run: %s", firstLine(r.gone.Error()))
	default:
		// A driver that exited after the last check answered its calls
		// is blamed on that check, not on this one.
		r.blameExit(ctx)
		if r.gone != nil {
			out = skip("not run: %s", firstLine(r.gone.Error()))
			break
		}
		// After a crash's restart: the new process's slices, once it
		// wrote them.
		r.freshSlices(ctx, false)
		out = r.safe(ctx, func(ctx context.Context) outcome {
			if o := r.needsSkip(ctx, e.needs); o != nil {
				return *o
			}
			return e.run(r, ctx)
		})
		if out.status == Fail && e.Level == Should {
			out.status = Warn
		}
		// A driver that stopped serving during the check fails it
		// (whatever its level: the kubelet cannot use a dead driver),
		// and is brought back for the next check, or the run ends. One
		// that the liveness probe after the check ended is reported by
		// robust.liveness-probe: the check passed what it judged.
		if r.node != nil && ctx.Err() == nil && e.ID != livenessProbeCheck {
			if ok, why, byProbe := r.alive(ctx); !ok {
				if !byProbe {
					msg := fmt.Sprintf("the driver stopped serving during this check: %s%s", why, r.logLines())
					if out.msg != "" {
						msg += "\n" + out.msg
					}
					out = outcome{Fail, msg}
				}
				r.probeCrash(ctx, byProbe, "the liveness probe after check "+e.ID, why)
			}
		}
	}
	res := Result{Check: e.Check, Status: out.status, Message: out.msg, Duration: time.Since(start)}
	r.report.Results = append(r.report.Results, res)
	if r.cfg.Progress != nil {
		if r.cfg.Verbose {
			fmt.Fprintln(r.cfg.Progress, ProgressText(res))
		} else {
			fmt.Fprintln(r.cfg.Progress, ProgressLine(res))
		}
	}
	return res
}

// livenessProbeCheck is the check that reports liveness probes that
// ended the driver.
const livenessProbeCheck = "robust.liveness-probe"

// probeCrash records a liveness probe (named by which) that ended the
// driver, when byProbe, and brings the driver back, or ends the run.
func (r *runner) probeCrash(ctx context.Context, byProbe bool, which, why string) {
	if byProbe {
		since := ""
		if !r.registered.IsZero() {
			since = fmt.Sprintf(", %.1f s after the driver last registered", time.Since(r.registered).Seconds())
		}
		lines := r.logLines() // the first crash's; the others' are in the log
		if len(r.probeCrashes) > 0 {
			lines = ""
		}
		r.probeCrashes = append(r.probeCrashes, fmt.Sprintf("%s (NodeUnprepareResources for claim %s, never prepared) ended the driver%s: %s%s", which, probeClaim, since, why, lines))
	}
	if err := r.recover(ctx, why); err != nil {
		r.gone = err
		r.report.Aborted = err.Error()
	}
}

// blameExit fails the previous check when the driver the suite started
// has exited since (it died after answering, or shortly after the check
// ended) and brings the driver back.
func (r *runner) blameExit(ctx context.Context) {
	exited, why := r.driverExited()
	if !exited || len(r.report.Results) == 0 {
		return
	}
	last := &r.report.Results[len(r.report.Results)-1]
	last.Status = Fail
	last.Message = fmt.Sprintf("the driver exited right after this check: %s%s\n%s", why, r.logLines(), last.Message)
	if err := r.recover(ctx, why); err != nil {
		r.gone = err
		r.report.Aborted = err.Error()
	}
}

func (r *runner) safe(ctx context.Context, fn func(ctx context.Context) outcome) (out outcome) {
	defer func() {
		if p := recover(); p != nil {
			out = fail("internal error in the conformance suite (please report): %v\n%s", p, debug.Stack())
		}
	}()
	return fn(ctx)
}

// start creates the namespace, class and consumer pod and starts the
// driver.
func (r *runner) start(ctx context.Context) error {
	cfg := r.cfg
	client := cfg.Client
	suffix := rand.String(5)
	r.ns = cfg.Namespace
	if r.ns == "" {
		r.ns = "drakit-conformance-" + suffix
	}
	ns, err := client.CoreV1().Namespaces().Get(ctx, r.ns, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns, Labels: map[string]string{adminAccessLabel: "true"}}}
		if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create namespace %s: %w", r.ns, err)
		}
		r.createdNS = true
	case err != nil:
		return fmt.Errorf("get namespace %s: %w", r.ns, err)
	}
	r.class = cfg.DeviceClassName
	if r.class == "" {
		r.class = "drakit-conformance-" + suffix
		cls := &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: r.class},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
				CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", cfg.DriverName)},
			}}},
		}
		if _, err := client.ResourceV1().DeviceClasses().Create(ctx, cls, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create device class %s: %w", r.class, err)
		}
		r.createdCls = true
	}
	var classes []*resourceapi.DeviceClass
	list, err := client.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list device classes: %w", err)
	}
	for i := range list.Items {
		classes = append(classes, &list.Items[i])
	}
	node, err := client.CoreV1().Nodes().Get(ctx, cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("get node %s: %w", cfg.NodeName, err)
		}
		node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: cfg.NodeName}}
	}
	r.consumer, err = createConsumer(ctx, client, r.ns, cfg.NodeName, "drakit-conformance-consumer-"+suffix)
	if err != nil {
		return err
	}
	r.sched = &scheduler{
		client: client, driver: cfg.DriverName, ns: r.ns, node: node,
		classes:  classLister{classes: classes},
		consumer: consumerRef(r.consumer),
		celCache: cel.NewCache(100, cel.Features{EnableConsumableCapacity: true}),
		inUse:    map[types.UID]*resourceapi.ResourceClaim{},
		prefix:   "c" + suffix,
	}
	r.sched.refresh = func(ctx context.Context) { r.freshSlices(ctx, true) }
	r.sched.relist = r.relist
	// The kubelet creates its plugin registry when it starts; a driver
	// may expect it to exist.
	if err := ensureRegistry(cfg.RegistrationPath); err != nil && len(cfg.StartCommand) > 0 {
		return err
	}
	if len(cfg.StartCommand) > 0 {
		if err := r.openDriverLog(); err != nil {
			return err
		}
		if err := r.startDriver(); err != nil {
			return err
		}
	}
	return nil
}

// ensureRegistry creates the registration folder (or, for a socket path,
// the folder it is in) if it is missing.
func ensureRegistry(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	dir := path
	if strings.HasSuffix(path, ".sock") {
		dir = filepath.Dir(path)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("create registration folder: %w", err)
	}
	return nil
}

// cleanup stops the driver and deletes what setup created.
func (r *runner) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i](ctx)
	}
	if r.conn != nil {
		_ = r.conn.Close()
	}
	r.stopDriver(syscall.SIGTERM)
	if r.logFile != nil {
		_ = r.logFile.Close()
	}
	client := r.cfg.Client
	deleteConsumer(ctx, client, r.consumer)
	if r.createdCls {
		_ = client.ResourceV1().DeviceClasses().Delete(ctx, r.class, metav1.DeleteOptions{})
	}
	if r.createdNS {
		_ = client.CoreV1().Namespaces().Delete(ctx, r.ns, metav1.DeleteOptions{})
	} else if r.sched != nil {
		_ = client.ResourceV1().ResourceClaims(r.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(managedBy).String()})
	}
}

// find finds the registration socket, giving up early when the driver
// the suite started exits.
func (r *runner) find(ctx context.Context) (string, *registerapi.PluginInfo, error) {
	wctx, cancel := r.whileRunning(ctx)
	defer cancel()
	socket, info, err := kubeletclient.FindRegistration(wctx, r.cfg.RegistrationPath, r.cfg.DriverName, r.cfg.PublishTimeout)
	if err != nil {
		if exited, why := r.driverExited(); exited {
			return "", nil, fmt.Errorf("%s; %w", why, err)
		}
		return "", nil, err
	}
	return socket, info, nil
}

// connect (re)finds the registration socket and dials the endpoint.
func (r *runner) connect(ctx context.Context) error {
	socket, info, err := r.find(ctx)
	if err != nil {
		return err
	}
	r.regSocket, r.info = socket, info
	endpoint := info.Endpoint
	if endpoint == "" {
		endpoint = socket
	}
	r.endpoint = translate(endpoint, r.cfg.PathMappings)
	conn, err := kubeletclient.Dial(ctx, r.endpoint, kubeletclient.DialTimeout)
	if err != nil {
		return err
	}
	if r.conn != nil {
		_ = r.conn.Close()
	}
	r.conn = conn
	r.nodeService = kubeletclient.FirstKnown(info.SupportedVersions, kubeletclient.NodeServices)
	if r.nodeService == "" {
		r.nodeService = kubeletclient.NodeServices[0]
	}
	r.node = kubeletclient.NodeClient(conn, r.nodeService)
	return nil
}

// prepare calls NodePrepareResources for claims.
func (r *runner) prepare(ctx context.Context, claims ...*resourceapi.ResourceClaim) (*drapbv1.NodePrepareResourcesResponse, error) {
	return r.prepareWith(ctx, r.node, claims...)
}

func (r *runner) prepareWith(ctx context.Context, node drapbv1.DRAPluginClient, claims ...*resourceapi.ResourceClaim) (*drapbv1.NodePrepareResourcesResponse, error) {
	if node == nil {
		return nil, errors.New("no connection to the node service (see registration.endpoint)")
	}
	ctx, cancel := r.callContext(ctx, r.cfg.CallTimeout)
	defer cancel()
	return node.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: kubeletclient.Claims(claims...)})
}

// unprepare calls NodeUnprepareResources for claims.
func (r *runner) unprepare(ctx context.Context, claims ...*resourceapi.ResourceClaim) (*drapbv1.NodeUnprepareResourcesResponse, error) {
	return r.unprepareWith(ctx, r.node, claims...)
}

func (r *runner) unprepareWith(ctx context.Context, node drapbv1.DRAPluginClient, claims ...*resourceapi.ResourceClaim) (*drapbv1.NodeUnprepareResourcesResponse, error) {
	if node == nil {
		return nil, errors.New("no connection to the node service (see registration.endpoint)")
	}
	ctx, cancel := r.callContext(ctx, r.cfg.CallTimeout)
	defer cancel()
	return node.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: kubeletclient.Claims(claims...)})
}
