package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/drivertest"
	"github.com/drakit/drakit/internal/cluster"
)

func init() {
	register(command{
		name:    "bench",
		summary: "benchmark a DRA driver's prepare/unprepare against a no-op floor (bench prepare); kube-scheduler's DRA throughput on fake nodes (bench sched)",
		run:     runBench,
	})
}

type benchConfig struct {
	kubeconfig, driverName, socket, exec, pool, node string
	devicePrefix                                     string
	devices                                          int
	iterations, batch, callers, held, repeat         int
	duration                                         time.Duration
	rssCycles                                        int
	// qps and burst are the client limits of the driver under test:
	// given to the built-in driver, only printed for another one.
	qps   float64
	burst int
	// limitsGiven says whether -qps or -burst was on the command line.
	limitsGiven bool
	// baseline, when its exec or socket is set, is a second driver
	// measured in place of the no-op floor (the first column), with the
	// same parameters: another driver to compare with in one run.
	baseline benchBaseline
	// device, when set, is every claim's device (-device: shares of one
	// device); share, when set, makes each claim's allocation a share
	// with a fresh share ID and this consumed capacity (-share).
	device string
	share  map[string]string
}

// benchBaseline is the -baseline-* flags: the driver in the first column
// instead of the floor.
type benchBaseline struct {
	exec, socket, driverName, pool, devicePrefix, node string
	devices                                            int
}

func (b benchBaseline) set() bool { return b.exec != "" || b.socket != "" }

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: usage: drakit bench prepare|sched [flags]", errUsage)
	}
	switch args[0] {
	case "sched":
		return runBenchSched(ctx, args[1:], stdout, stderr)
	case "prepare":
	case benchFloorCmd, benchDriverCmd:
		// The processes bench prepare starts: not for people.
		return runBenchChild(ctx, args[0], args[1:], stderr)
	default:
		return fmt.Errorf("%w: usage: drakit bench prepare|sched [flags]", errUsage)
	}
	fs := flag.NewFlagSet("bench prepare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c benchConfig
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster the driver uses; empty: start a control-plane cluster (needs hack/setup.sh)")
	fs.StringVar(&c.socket, "socket", "", "DRA socket of the driver under test (with -exec, \"{dir}\" stands for the folder given to it); empty: drakit's runtime with a preparer that sets one env var, in a child process")
	fs.StringVar(&c.exec, "exec", "", "command line that starts the driver under test (split at spaces; \"{dir}\" is replaced by a fresh folder; $KUBECONFIG and $NODE_NAME are set); needs -socket")
	fs.StringVar(&c.driverName, "driver", "bench.drakit.dev", "name of the driver under test (claims are allocated for it)")
	fs.StringVar(&c.node, "node", "bench-node", "node name the drivers publish for (created as a fake node when bench starts the cluster)")
	fs.StringVar(&c.pool, "pool", "", "pool of the allocated devices (default: the node name)")
	fs.StringVar(&c.devicePrefix, "device-prefix", "dev-", "allocated devices are <prefix>0, <prefix>1, ...; the driver under test must accept them")
	fs.IntVar(&c.devices, "devices", 0, "with N > 0, devices are named <prefix>0 .. <prefix>N-1 (N must exceed -held + -batch); 0: every claim gets a new device")
	fs.IntVar(&c.iterations, "n", 300, "iterations of each latency measurement")
	fs.IntVar(&c.batch, "batch", 8, "claims per call in the batch measurement")
	fs.IntVar(&c.callers, "callers", 8, "concurrent callers in the throughput measurement")
	fs.DurationVar(&c.duration, "duration", 3*time.Second, "length of the throughput measurement")
	fs.IntVar(&c.held, "held", 256, "claims held prepared in the 'held' measurement")
	fs.IntVar(&c.repeat, "repeat", 3, "runs of each measurement (the table shows the median and the range)")
	fs.IntVar(&c.rssCycles, "rss-cycles", 0, "also run this many prepare+unprepare cycles and report the driver process's RSS before and after (0: skip)")
	fs.Float64Var(&c.qps, "qps", driver.DefaultQPS, "client rate limit of the driver under test: given to the built-in driver; for -socket or -exec, what that driver was given (only printed, as the throughput ceiling); negative: none")
	fs.IntVar(&c.burst, "burst", driver.DefaultBurst, "client burst of the driver under test (see -qps)")
	fs.StringVar(&c.baseline.exec, "baseline-exec", "", "command line of a second driver measured in the first column instead of the no-op floor, with the same parameters (as -exec; needs -baseline-socket)")
	fs.StringVar(&c.baseline.socket, "baseline-socket", "", "DRA socket of the baseline driver (as -socket)")
	fs.StringVar(&c.baseline.driverName, "baseline-driver", "minimal.drakit.dev", "name of the baseline driver")
	fs.StringVar(&c.baseline.pool, "baseline-pool", "", "pool of the baseline driver's devices (default: the node name)")
	fs.StringVar(&c.baseline.devicePrefix, "baseline-device-prefix", "dev-", "the baseline driver's devices are <prefix>0, <prefix>1, ...")
	fs.IntVar(&c.baseline.devices, "baseline-devices", -1, "the baseline driver's device count, as -devices (default: -devices)")
	fs.StringVar(&c.baseline.node, "baseline-node", "",
		"node the baseline driver publishes for (NODE_NAME; a fake node when bench starts "+
			"the cluster), for a baseline of the same driver name as the driver under test "+
			"(default: -node)")
	fs.StringVar(&c.device, "device", "",
		"every claim of the driver under test gets this device (with -share: shares of one "+
			"device; -devices is then not used)")
	share := fs.String("share", "",
		"claims of the driver under test are shares (consumable capacity) of their device, "+
			"each with a fresh share ID and this consumed capacity, e.g. memory=12Gi,compute=10")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *share != "" {
		c.share = map[string]string{}
		for _, kv := range strings.Split(*share, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return fmt.Errorf("%w: -share: %q is not name=amount", errUsage, kv)
			}
			c.share[k] = v
		}
	}
	if c.device != "" && c.share == nil {
		return fmt.Errorf("%w: -device needs -share (one device for every claim only as shares)",
			errUsage)
	}
	if c.baseline.node == "" {
		c.baseline.node = c.node
	}
	if c.baseline.exec != "" && c.baseline.socket == "" {
		return fmt.Errorf("%w: -baseline-exec needs -baseline-socket", errUsage)
	}
	if c.baseline.devices < 0 {
		c.baseline.devices = c.devices
	}
	if c.baseline.devices > 0 && c.baseline.devices <= c.held+max(c.batch, c.callers) {
		return fmt.Errorf("%w: -baseline-devices must exceed -held plus -batch and -callers", errUsage)
	}
	if c.baseline.pool == "" {
		c.baseline.pool = c.node
	}
	fs.Visit(func(f *flag.Flag) { c.limitsGiven = c.limitsGiven || f.Name == "qps" || f.Name == "burst" })
	if c.iterations < 10 || c.batch < 1 || c.callers < 1 || c.held < 0 || c.repeat < 1 || c.rssCycles < 0 {
		return fmt.Errorf("%w: -n must be >= 10, -batch, -callers and -repeat >= 1, -held and -rss-cycles >= 0", errUsage)
	}
	if c.exec != "" && c.socket == "" {
		return fmt.Errorf("%w: -exec needs -socket", errUsage)
	}
	if c.device == "" && c.devices > 0 && c.devices <= c.held+max(c.batch, c.callers) {
		return fmt.Errorf("%w: -devices must exceed -held plus -batch and -callers", errUsage)
	}
	if c.qps == 0 {
		return fmt.Errorf("%w: -qps 0 means client-go's 5/s; give a rate or a negative value for none", errUsage)
	}
	if c.pool == "" {
		c.pool = c.node
	}
	ctx = klog.NewContext(ctx, klog.Background())
	return benchPrepare(ctx, c, stdout, stderr)
}

// external says whether the driver under test is someone else's (not
// the built-in one), whose client limits bench only knows when told.
func (c benchConfig) external() bool { return c.socket != "" }

// limited says whether the driver under test has a client rate limit
// that bench knows of.
func (c benchConfig) limited() bool {
	return c.qps > 0 && (!c.external() || c.limitsGiven)
}

func benchPrepare(ctx context.Context, c benchConfig, stdout, stderr io.Writer) error {
	tmp, err := os.MkdirTemp("", "drkb")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	var rc *rest.Config
	kubeconfig := c.kubeconfig
	if kubeconfig == "" {
		fmt.Fprintln(stderr, "starting a control-plane cluster ...")
		cl, err := cluster.Start(ctx, cluster.WithDieWithParent())
		if err != nil {
			return fmt.Errorf("start cluster: %w", err)
		}
		defer cl.Stop()
		if err := cl.AddFakeNode(ctx, c.node, nil, nil); err != nil {
			return err
		}
		if c.baseline.node != c.node {
			if err := cl.AddFakeNode(ctx, c.baseline.node, nil, nil); err != nil {
				return err
			}
		}
		rc, kubeconfig = cl.RESTConfig, cl.Kubeconfig
	} else if rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	rc = rest.CopyConfig(rc)
	rc.QPS = -1 // bench's own client (the kubelet's side and claim setup) is never the bottleneck
	admin, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	ns := fmt.Sprintf("drakit-bench-%d", time.Now().Unix())
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace: %w", err)
	}
	defer func() {
		_ = admin.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), ns, metav1.DeleteOptions{})
	}()

	// The floor: a silent no-op driver on the same helper and API server,
	// in its own process, with no client limit; or the baseline driver.
	floorName := "floor.bench.drakit.dev"
	floorDir := filepath.Join(tmp, "floor")
	floorSocket := filepath.Join(floorDir, "dra.sock")
	floorCfg := c
	var floorProc *benchProc
	switch b := c.baseline; {
	case b.exec != "":
		floorName, floorCfg.pool, floorCfg.devicePrefix, floorCfg.devices = b.driverName, b.pool, b.devicePrefix, b.devices
		floorCfg.device, floorCfg.share = "", nil
		if err := os.MkdirAll(floorDir, 0o755); err != nil {
			return err
		}
		floorSocket = strings.ReplaceAll(b.socket, "{dir}", floorDir)
		argv := strings.Fields(strings.ReplaceAll(b.exec, "{dir}", floorDir))
		floorProc, err = startProc(ctx, filepath.Join(tmp, "baseline.log"), argv,
			"KUBECONFIG="+kubeconfig, "NODE_NAME="+b.node)
	case b.socket != "":
		floorName, floorCfg.pool, floorCfg.devicePrefix, floorCfg.devices = b.driverName, b.pool, b.devicePrefix, b.devices
		floorCfg.device, floorCfg.share = "", nil
		floorSocket = b.socket
	default:
		floorProc, err = startBenchChild(ctx, filepath.Join(tmp, "floor.log"), benchFloorCmd,
			"-kubeconfig", kubeconfig, "-node", c.node, "-dir", floorDir, "-driver", floorName)
	}
	if err != nil {
		return fmt.Errorf("start %s: %w", floorName, err)
	}
	if floorProc != nil {
		defer floorProc.stop()
	}

	targetSocket := c.socket
	var targetProc *benchProc
	switch {
	case c.exec != "":
		dir := filepath.Join(tmp, "exec")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		argv := strings.Fields(strings.ReplaceAll(c.exec, "{dir}", dir))
		targetSocket = strings.ReplaceAll(c.socket, "{dir}", dir)
		targetProc, err = startProc(ctx, filepath.Join(tmp, "driver.log"), argv, "KUBECONFIG="+kubeconfig, "NODE_NAME="+c.node)
	case c.socket == "":
		dir := filepath.Join(tmp, "t")
		targetSocket = filepath.Join(dir, "dra.sock")
		targetProc, err = startBenchChild(ctx, filepath.Join(tmp, "driver.log"), benchDriverCmd,
			"-kubeconfig", kubeconfig, "-node", c.node, "-dir", dir, "-driver", c.driverName, "-pool", c.pool,
			"-qps", fmt.Sprint(c.qps), "-burst", fmt.Sprint(c.burst))
	}
	if err != nil {
		return fmt.Errorf("start driver under test: %w", err)
	}
	if targetProc != nil {
		defer targetProc.stop()
	}

	floor := &benchTarget{name: floorName, socket: floorSocket, cfg: floorCfg, client: admin,
		ns: ns, role: "floor"}
	target := &benchTarget{name: c.driverName, socket: targetSocket, cfg: c, client: admin, ns: ns,
		role: "target"}
	if c.limited() {
		// Before each measurement the driver's token bucket refills, so
		// that no measurement pays for the one before it.
		target.settle = time.Duration(float64(c.burst) / c.qps * float64(time.Second))
	}
	for _, t := range []*benchTarget{floor, target} {
		var p *benchProc
		if t == floor {
			p = floorProc
		} else {
			p = targetProc
		}
		if t.pid, err = waitSocket(ctx, t.socket, p); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		if t.k, err = drivertest.Dial(t.socket); err != nil {
			return err
		}
		defer t.k.Close()
	}
	metricsOK := true
	if _, err := apiRequests(ctx, admin); err != nil {
		fmt.Fprintf(stderr, "API request counts unavailable (%v): that row is skipped\n", err)
		metricsOK = false
	}

	fmt.Fprintf(stderr, "measuring (%d runs of each measurement) ...\n", c.repeat)
	rows := newBenchTable(c)
	for r := range c.repeat {
		fmt.Fprintf(stderr, "run %d of %d\n", r+1, c.repeat)
		if err := rows.measure(ctx, floor, target, metricsOK); err != nil {
			return err
		}
	}
	if c.rssCycles > 0 {
		if err := rows.measureRSS(ctx, target); err != nil {
			return err
		}
	}
	printBenchHeader(stdout, c, target)
	return rows.print(stdout)
}

func printBenchHeader(w io.Writer, c benchConfig, target *benchTarget) {
	what := "drakit's runtime with a one-env-var preparer (built in)"
	switch {
	case c.exec != "":
		what = c.exec
	case c.socket != "":
		what = "external driver"
	}
	devs := c.devicePrefix + "<n>"
	if c.device != "" {
		devs = c.device
	}
	fmt.Fprintf(w, "drakit bench prepare: %s = %s, socket %s, pid %d, pool %s, devices %s\n",
		target.name, what, target.socket, target.pid, c.pool, devs)
	if c.share != nil {
		fmt.Fprintf(w, "claims of %s are shares, a fresh share ID each, consuming %v\n",
			target.name, c.share)
	}
	if b := c.baseline; b.set() {
		what := b.exec
		if what == "" {
			what = "a running driver, socket " + b.socket
		}
		fmt.Fprintf(w, "first column: baseline %s = %s, pool %s, devices %s<n>, with the same parameters\n", b.driverName, what, b.pool, b.devicePrefix)
	} else {
		fmt.Fprintf(w, "floor: a no-op driver on the same kubeletplugin helper and API server, in its own process, no client limit, no logging; it writes, fsyncs and renames one 1 KiB file per prepare call\n")
	}
	limits := "none known (give -qps and -burst)"
	switch {
	case c.limited():
		limits = fmt.Sprintf("QPS %g, burst %d", c.qps, c.burst)
	case c.qps < 0 && (!c.external() || c.limitsGiven):
		limits = "none"
	}
	fmt.Fprintf(w, "driver's client limits: %s; %d runs of each row: median [min-max]; ratios are per run (floor and driver measured back to back)\n\n", limits, c.repeat)
}

// benchRow is one line of the table: a value for the floor (or the
// baseline) and one for the driver, per run.
type benchRow struct {
	name, unit, goal string
	floor, target    []float64
	// note is printed under the table (e.g. the limiter's ceiling).
	note string
	// skipped says why the row could not be measured.
	skipped string
}

func (r *benchRow) add(floor, target float64) {
	r.floor = append(r.floor, floor)
	r.target = append(r.target, target)
}

type benchTable struct {
	c    benchConfig
	rows []*benchRow
	// by name
	idx map[string]*benchRow
}

func newBenchTable(c benchConfig) *benchTable {
	return &benchTable{c: c, idx: map[string]*benchRow{}}
}

// row returns the row called name, adding it the first time.
func (t *benchTable) row(name, unit, goal string) *benchRow {
	if r := t.idx[name]; r != nil {
		return r
	}
	r := &benchRow{name: name, unit: unit, goal: goal}
	t.rows = append(t.rows, r)
	t.idx[name] = r
	return r
}

// measure runs every row once.
func (t *benchTable) measure(ctx context.Context, floor, target *benchTarget, metricsOK bool) error {
	c := t.c
	var res [2]latencies
	for i, b := range []*benchTarget{floor, target} {
		var err error
		if res[i], err = b.cycles(ctx, 1, c.iterations, 0); err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
	}
	t.row("prepare p50, 1 claim 1 device", "ms", "<= 1.3x").add(ms(res[0].prepare.p(50)), ms(res[1].prepare.p(50)))
	t.row("prepare p99, 1 claim 1 device", "ms", "<= 2x").add(ms(res[0].prepare.p(99)), ms(res[1].prepare.p(99)))
	t.row("unprepare p50", "ms", "").add(ms(res[0].unprepare.p(50)), ms(res[1].unprepare.p(50)))
	t.row("unprepare p99", "ms", "").add(ms(res[0].unprepare.p(99)), ms(res[1].unprepare.p(99)))

	for i, b := range []*benchTarget{floor, target} {
		var err error
		if res[i], err = b.cycles(ctx, c.batch, max(c.iterations/8, 10), 0); err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
	}
	t.row(fmt.Sprintf("prepare p50, batch of %d claims", c.batch), "ms", "").add(ms(res[0].prepare.p(50)), ms(res[1].prepare.p(50)))
	t.row(fmt.Sprintf("prepare p99, batch of %d claims", c.batch), "ms", "").add(ms(res[0].prepare.p(99)), ms(res[1].prepare.p(99)))

	var tp [2]throughput
	for i, b := range []*benchTarget{floor, target} {
		var err error
		if tp[i], err = b.throughput(ctx, c.callers, c.duration, metricsOK); err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
	}
	tr := t.row(fmt.Sprintf("prepare+unprepare cycles/s, %d callers", c.callers), "/s", ">= 0.8x")
	tr.add(tp[0].perSecond(), tp[1].perSecond())
	cpu := t.row("driver process CPU per cycle", "ms", "<= 2x")
	if tp[0].cpu >= 0 && tp[1].cpu >= 0 {
		cpu.add(tp[0].cpuPerCycle(), tp[1].cpuPerCycle())
	} else {
		cpu.skipped = "the driver's process is not known (its socket's peer is in another PID namespace)"
	}
	api := t.row("API requests per prepare", "", "")
	if metricsOK {
		api.add(tp[0].apiPerPrepare(), tp[1].apiPerPrepare())
	} else {
		api.skipped = "the API server's /metrics could not be read"
	}
	if c.limited() {
		req := max(tp[1].apiPerPrepare(), 1)
		secs := tp[1].elapsed.Seconds()
		ceiling := (float64(c.burst) + c.qps*secs) / secs / req
		tr.note = fmt.Sprintf("the driver's client limit (QPS %g, burst %d) allows at most %.0f cycles/s over a %.1f s window at %.2f API requests per prepare (%.0f/s sustained)",
			c.qps, c.burst, ceiling, secs, req, c.qps/req)
	}

	var held0, heldN latencies
	var err error
	if held0, err = target.cycles(ctx, 1, c.iterations, 0); err != nil {
		return err
	}
	if heldN, err = target.cycles(ctx, 1, c.iterations, c.held); err != nil {
		return err
	}
	t.row(fmt.Sprintf("driver prepare p50: 0 vs %d claims held", c.held), "ms", "~1x").add(ms(held0.prepare.p(50)), ms(heldN.prepare.p(50)))
	return nil
}

// measureRSS runs the RSS row once (it is long).
func (t *benchTable) measureRSS(ctx context.Context, target *benchTarget) error {
	r := t.row(fmt.Sprintf("driver process RSS: before vs after %d cycles", t.c.rssCycles), "MiB", "~1x")
	if target.pid <= 0 {
		r.skipped = "the driver's process is not known"
		return nil
	}
	// Warm up first: the first thousand cycles grow caches and pools
	// that then stay.
	if err := target.calls(ctx, t.c.callers, 1000); err != nil {
		return err
	}
	before, err := procRSS(target.pid)
	if err != nil {
		return err
	}
	if err := target.calls(ctx, t.c.callers, t.c.rssCycles); err != nil {
		return err
	}
	after, err := procRSS(target.pid)
	if err != nil {
		return err
	}
	r.add(float64(before)/(1<<20), float64(after)/(1<<20))
	return nil
}

func (t *benchTable) print(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "measure\tfloor / first\tdriver / second\tratio\ttarget\t")
	var notes []string
	for _, r := range t.rows {
		if r.skipped != "" {
			fmt.Fprintf(tw, "%s\tskipped\t\t\t%s\t\n", r.name, r.goal)
			notes = append(notes, r.name+": skipped: "+r.skipped)
			continue
		}
		ratios := make([]float64, len(r.floor))
		for i := range r.floor {
			ratios[i] = r.target[i] / r.floor[i]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", r.name, spread(r.floor, r.unit), spread(r.target, r.unit), spread(ratios, "x"), r.goal)
		if r.note != "" {
			notes = append(notes, r.name+": "+r.note)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(w, "  *", n)
	}
	return nil
}

// spread prints the median of v and, with more than one value, its
// range.
func spread(v []float64, unit string) string {
	s := slices.Clone(v)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	sep := " "
	if unit == "x" || unit == "" {
		sep = ""
	}
	if len(s) == 1 {
		return fmt.Sprintf("%s%s%s", num(med), sep, unit)
	}
	return fmt.Sprintf("%s%s%s [%s-%s]", num(med), sep, unit, num(s[0]), num(s[len(s)-1]))
}

// num prints a value with three significant digits at most.
func num(v float64) string {
	switch a := max(v, -v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}
