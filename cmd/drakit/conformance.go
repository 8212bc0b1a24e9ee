package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/drakit/drakit/conformance"
	"github.com/drakit/drakit/internal/cluster"
)

func init() {
	register(command{
		name:    "conformance",
		summary: "check a DRA driver against the kubelet and scheduler protocols",
		run:     runConformance,
	})
}

const conformanceUsage = `Usage: drakit conformance --driver NAME --registration PATH [flags] [-- DRIVER COMMAND ...]
       drakit conformance --cluster --kubeconfig FILE --driver NAME --node NODE --image IMAGE [flags]

Socket mode (the default) plays the kubelet and the scheduler against a
DRA driver and a real API server: without --kubeconfig, a local control
plane with a fake node (--node), started with --feature-gates.

  The driver: arguments after -- (or --start) start it; the suite kills
  it with SIGKILL and starts it again for the restart checks, and keeps
  its output in --driver-log. Without them the driver must already be
  running, and --restart-command (e.g. for a DaemonSet pod) enables the
  restart checks; with neither they skip, and the verdict says so. A
  started driver gets these environment variables:
    KUBECONFIG, DRAKIT_KUBECONFIG  the admin kubeconfig of the cluster
    NODE_NAME                      the node it serves (--node)
  Drivers that read their flags through package driverflag pick both up
  with no flags. The command runs without a shell; to put them into
  flags, run one:
    -- sh -c 'exec ./driver --node-name="$NODE_NAME" --kubeconfig="$KUBECONFIG"'.

  The claims: the suite creates a namespace, a DeviceClass selecting the
  driver's devices (unless --device-class) and one Pod bound to --node
  that never starts (image conformance.drakit.invalid/never-started:0, no
  claims in its spec); it allocates claims with the scheduler's allocator
  and reserves them for that Pod, as the scheduler would, then calls the
  driver. Everything is removed at the end. After every restart of the
  driver it reads the driver's ResourceSlices again and allocates from
  what the new process publishes.

  Registration: --registration is the driver's registration socket or
  the kubelet's plugin registry folder (created if missing, as the
  kubelet does).

  A driver deployed as a DaemonSet pod: run the suite on the node (or give
  --path-map), without a driver command, with --restart-command (so that
  the restart checks run) and --read-cdi-command (so that the CDI checks
  see the node's CDI folder, not the suite's mount namespace).

  --path-map FROM=TO translates the paths the driver reports about itself:
  the DRA service endpoint in its GetInfo answer, as the driver sees it in
  its own mount namespace (e.g. /var/lib/kubelet=/mnt/node-kubelet when
  the suite sees the node's /var/lib/kubelet there). The first FROM that
  prefixes a path applies. It does not translate --registration,
  --cdi-dir or paths in CDI specs.

  Health: the suite waits up to 10 s for the first health report (and
  1 s more for the rest of it), then health.refresh waits for a repeated
  report up to the largest health_check_timeout_seconds the driver
  reports (30 s when it reports none) plus 5 s, at most 2 minutes
  (--health-wait sets it).

  After every check the suite sends a liveness probe (NodeUnprepareResources
  for a claim never prepared); one that ends the driver is reported by
  robust.liveness-probe, and the driver is started again.

Cluster mode (--cluster) needs nothing but a kubeconfig: it checks a
driver installed on the cluster through the cluster's own scheduler,
kubelet and container runtime, with real pods on --node (image --image,
which must be on the node unless --image-pull-policy lets it be pulled:
busybox or any image with sh, env and sleep): claims from templates, a
claim shared by two pods, two devices in one claim (with a
matchAttribute constraint where two devices share an attribute), a claim
with two requests whose containers each name one, a pod with two claims,
firstAvailable, admin access; what each container sees, unprepare on pod
deletion, health in the pod status. With --cdi-dir or --read-cdi-command
it compares the containers' environment with the CDI specs the driver
wrote; without, with the devices' names and attributes. It refuses a
node where other pods use the driver (--allow-other-pods), labels
everything it creates (conformance.drakit.dev/cluster-node=NODE,
conformance.drakit.dev/cluster-driver=DRIVER), deletes it at the end, on
SIGINT and SIGTERM too, and removes what an interrupted run for the same
node and driver left. "drakit conformance --cluster --help" lists its
checks.

  The driver's restart (pods keep running, a claim prepared before the
  restart injects the same after it and is unprepared by the new driver,
  allocated device names stay published): a driver that runs as a pod
  is restarted by deleting its pod (--driver-namespace and
  --driver-pod-selector); one that does not (a host process, a systemd
  unit) by --restart-command, which must kill it with SIGKILL and start
  it again. With neither the restart checks skip, and the verdict says
  so. Cluster mode takes no driver command after --: it checks the
  driver the cluster runs.

Feature gates: --feature-gates names the gates the cluster has on or off.
Without --kubeconfig the local control plane runs with them (its API
server then accepts what they allow); with one, they tell the suite what
the cluster allows where that changes what a driver may publish:
DRAListTypeAttributes=true lets resource.kubernetes.io/pcieRoot be a
list. Others have their 1.37 default. An API server that refuses a
started driver's ResourceSlices is reported with its message.

Exit status: 0 when every MUST check passed (warnings, which are SHOULD
checks that did not pass, and skips do not count); 1 when a MUST check
failed or the run could not be set up; 2 for a usage error. The summary
says which checks are MUST.

Flags:
`

// csvFlag collects a repeatable, comma-separated flag.
type csvFlag []string

func (l *csvFlag) String() string { return strings.Join(*l, ",") }
func (l *csvFlag) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// clusterPublishTimeout is --publish-timeout's default with --cluster
// (ClusterConfig.PublishTimeout's).
const clusterPublishTimeout = 30 * time.Second

// conformanceFlags are the parsed flags of "drakit conformance".
type conformanceFlags struct {
	kubeconfig, driver, node, registration string
	cdiDirs, pathMaps, skip, only          csvFlag
	restartCmd, readCDICmd                 string
	start                                  []string
	deviceClass, objects                   string
	junit, jsonOut, driverLog              string
	repeat, concurrency                    int
	publishTimeout, callTimeout            time.Duration
	healthWait                             time.Duration
	featureGates                           map[string]bool
	cluster, allowOtherPods                bool
	image, pullPolicy                      string
	driverNS, driverSelector               string
	list, verbose                          bool
}

func parseConformanceFlags(args []string, stderr io.Writer) (*conformanceFlags, error) {
	f := &conformanceFlags{}
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, conformanceUsage)
		fs.PrintDefaults()
		if f.cluster {
			fmt.Fprint(stderr, "\nCluster mode's checks, in run order (MUST fails the run, SHOULD warns; --only and --skip take IDs;\na check reported with --only still runs the earlier ones it needs, unreported):\n")
			listChecks(stderr, conformance.ClusterChecks())
		} else {
			fmt.Fprint(stderr, "\n--list prints the checks (with --cluster, cluster mode's); --cluster --help lists cluster mode's here.\n")
		}
	}
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "admin kubeconfig of the cluster (default: start a local control plane and a fake node)")
	fs.StringVar(&f.driver, "driver", "", "DRA driver name (required)")
	fs.StringVar(&f.node, "node", "drakit-conformance-node", "node the driver serves")
	fs.StringVar(&f.registration, "registration", "", "the driver's registration socket, or the plugin registry folder (required)")
	fs.Var(&f.cdiDirs, "cdi-dir", "CDI spec folder (repeatable or comma-separated)")
	fs.Var(&f.pathMaps, "path-map", "FROM=TO: translate paths the driver reports (own mount namespace); repeatable")
	fs.Var(&f.skip, "skip", "check IDs or categories to skip (repeatable or comma-separated)")
	fs.Var(&f.only, "only", "check IDs or categories to run, the others left out (repeatable or comma-separated); what they need is set up all the same")
	fs.StringVar(&f.restartCmd, "restart-command", "", "shell command that kills a driver the suite did not start (SIGKILL, no chance to clean up) and has it started again, e.g. kubectl delete pod -n NS -l app=DRIVER --grace-period=0 --force --wait, or with --cluster for a host process: kill -9 $(pidof DRIVER); systemctl start DRIVER; enables the restart checks. It must return within --publish-timeout (--cluster: 2m); its output goes to a file, named if it fails, so a driver it starts in the background (DRIVER &) does not hold it")
	fs.StringVar(&f.readCDICmd, "read-cdi-command", "", "shell command that writes a tar archive of the node's CDI folder to stdout (e.g. kubectl exec -n NS POD -- tar -C /var/run/cdi -cf - .); replaces --cdi-dir")
	startCmd := fs.String("start", "", "command that starts the driver, split at spaces (alternative to arguments after --)")
	fs.StringVar(&f.deviceClass, "device-class", "", "existing DeviceClass selecting the driver's devices (default: the suite creates one)")
	fs.StringVar(&f.objects, "objects", "", "YAML file with DeviceClasses (created for the run; the first is used unless --device-class) and ResourceClaimTemplates (their claims are checked)")
	fs.StringVar(&f.junit, "junit", "", "write a JUnit XML report to FILE")
	fs.StringVar(&f.jsonOut, "json", "", "write a JSON report to FILE")
	fs.StringVar(&f.driverLog, "driver-log", "", "keep the started driver's output in FILE (default: a new drakit-conformance-driver-*.log in $TMPDIR, named at the end)")
	fs.IntVar(&f.repeat, "repeat", 3, "repeats in idempotency checks")
	fs.IntVar(&f.concurrency, "concurrency", 4, "claims prepared at once in prepare.concurrent")
	fs.DurationVar(&f.publishTimeout, "publish-timeout", 60*time.Second, "wait for the registration socket and complete ResourceSlices, and after a restart for the new process to write its slices (a driver that writes none is judged on the slices from before, and the report says so); with --cluster 30s unless given")
	fs.DurationVar(&f.callTimeout, "call-timeout", 45*time.Second, "bound of each NodePrepareResources and NodeUnprepareResources call (the kubelet's is 45s)")
	fs.DurationVar(&f.healthWait, "health-wait", 0, "how long health.refresh waits for a repeated health report (default: the devices' largest health check timeout plus 5s, at most 2m)")
	var gates csvFlag
	fs.Var(&gates, "feature-gates", "NAME=true|false,...: feature gates the cluster has on or off, where they change what a driver may publish (DRAListTypeAttributes: list-valued pcieRoot); repeatable")
	fs.BoolVar(&f.verbose, "verbose", false, "print whole messages as checks finish, and the details of every check at the end (default: details of checks that did not pass)")
	fs.BoolVar(&f.list, "list", false, "list the checks and exit")
	fs.BoolVar(&f.cluster, "cluster", false, "cluster mode: check the driver installed on the cluster (--kubeconfig) with real pods on --node")
	fs.StringVar(&f.image, "image", "", "cluster mode: the containers' image (busybox or any with sh, env, od and sleep), on the node")
	fs.StringVar(&f.pullPolicy, "image-pull-policy", string(corev1.PullNever), "cluster mode: the containers' image pull policy (Never, IfNotPresent, Always)")
	fs.BoolVar(&f.allowOtherPods, "allow-other-pods", false, "cluster mode: run even when other pods use the driver on the node")
	fs.StringVar(&f.driverNS, "driver-namespace", "", "cluster mode: namespace of the driver's pods (with --driver-pod-selector: pod.driver-restart deletes the node's driver pod)")
	fs.StringVar(&f.driverSelector, "driver-pod-selector", "", "cluster mode: label selector of the driver's pods (e.g. app=my-driver)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	f.start = fs.Args()
	if *startCmd != "" {
		if len(f.start) > 0 {
			return nil, fmt.Errorf("%w: give the driver command either with --start or after --, not both", errUsage)
		}
		f.start = strings.Fields(*startCmd)
	}
	if f.list {
		return f, nil
	}
	if f.driver == "" {
		return nil, fmt.Errorf("%w: --driver is required", errUsage)
	}
	if f.cluster {
		switch {
		case f.kubeconfig == "":
			return nil, fmt.Errorf("%w: --cluster needs --kubeconfig (the cluster the driver is installed on)", errUsage)
		case !flagSet(fs, "node"):
			return nil, fmt.Errorf("%w: --cluster needs --node (the node whose driver is checked; the suite's pods run there)", errUsage)
		case f.image == "":
			return nil, fmt.Errorf("%w: --cluster needs --image (e.g. busybox, present on the node)", errUsage)
		case len(f.start) > 0:
			return nil, fmt.Errorf("%w: --cluster checks an installed driver: give no driver command (to restart a driver that does not run as a pod, give --restart-command)", errUsage)
		case (f.driverNS == "") != (f.driverSelector == ""):
			return nil, fmt.Errorf("%w: give --driver-namespace and --driver-pod-selector together", errUsage)
		case f.driverSelector != "" && f.restartCmd != "":
			return nil, fmt.Errorf("%w: give --driver-pod-selector (a driver that runs as a pod) or --restart-command (one that does not), not both", errUsage)
		}
		if !flagSet(fs, "publish-timeout") {
			f.publishTimeout = clusterPublishTimeout
		}
		switch corev1.PullPolicy(f.pullPolicy) {
		case corev1.PullNever, corev1.PullIfNotPresent, corev1.PullAlways:
		default:
			return nil, fmt.Errorf("%w: --image-pull-policy %q: want Never, IfNotPresent or Always", errUsage, f.pullPolicy)
		}
		gateMap, err := parseFeatureGates(gates)
		f.featureGates = gateMap
		return f, err
	}
	if f.registration == "" {
		return nil, fmt.Errorf("%w: --registration is required", errUsage)
	}
	for _, m := range f.pathMaps {
		if from, to, ok := strings.Cut(m, "="); !ok || from == "" || to == "" {
			return nil, fmt.Errorf("%w: --path-map %q: want FROM=TO", errUsage, m)
		}
	}
	gateMap, err := parseFeatureGates(gates)
	if err != nil {
		return nil, err
	}
	f.featureGates = gateMap
	return f, nil
}

// flagSet reports whether the flag name was given.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// parseFeatureGates parses NAME=true|false entries, as the Kubernetes
// components' --feature-gates flag does.
func parseFeatureGates(entries []string) (map[string]bool, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	out := map[string]bool{}
	for _, e := range entries {
		name, val, ok := strings.Cut(e, "=")
		on, err := strconv.ParseBool(strings.TrimSpace(val))
		if !ok || strings.TrimSpace(name) == "" || err != nil {
			return nil, fmt.Errorf("%w: --feature-gates %q: want NAME=true or NAME=false", errUsage, e)
		}
		out[strings.TrimSpace(name)] = on
	}
	return out, nil
}

// readObjects reads DeviceClasses and ResourceClaimTemplates from a
// multi-document YAML file.
func readObjects(path string) ([]*resourceapi.DeviceClass, []resourceapi.ResourceClaimSpec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read objects: %w", err)
	}
	var classes []*resourceapi.DeviceClass
	var claims []resourceapi.ResourceClaimSpec
	dec := utilyaml.NewDocumentDecoder(io.NopCloser(bytes.NewReader(data)))
	buf := make([]byte, len(data)+1)
	for i := 0; ; i++ {
		n, err := dec.Read(buf)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read objects: document %d of %s: %w", i, path, err)
		}
		doc := buf[:n]
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, nil, fmt.Errorf("read objects: document %d of %s: %w", i, path, err)
		}
		switch meta.Kind {
		case "":
			continue
		case "DeviceClass":
			var c resourceapi.DeviceClass
			if err := yaml.UnmarshalStrict(doc, &c); err != nil {
				return nil, nil, fmt.Errorf("read objects: DeviceClass in document %d of %s: %w", i, path, err)
			}
			classes = append(classes, &c)
		case "ResourceClaimTemplate":
			var t resourceapi.ResourceClaimTemplate
			if err := yaml.UnmarshalStrict(doc, &t); err != nil {
				return nil, nil, fmt.Errorf("read objects: ResourceClaimTemplate in document %d of %s: %w", i, path, err)
			}
			claims = append(claims, t.Spec.Spec)
		default:
			return nil, nil, fmt.Errorf("read objects: document %d of %s: kind %q is neither DeviceClass nor ResourceClaimTemplate", i, path, meta.Kind)
		}
	}
	return classes, claims, nil
}

func runConformance(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseConformanceFlags(args, stderr)
	if err != nil {
		return err
	}
	if f.list {
		checks := conformance.Checks()
		if f.cluster {
			checks = conformance.ClusterChecks()
		}
		listChecks(stdout, checks)
		return nil
	}
	if f.cluster {
		return runClusterConformance(ctx, f, stdout, stderr)
	}
	cfg := conformance.Config{
		DriverName: f.driver, NodeName: f.node, RegistrationPath: f.registration,
		CDIDirs: f.cdiDirs, StartCommand: f.start, Skip: f.skip,
		DeviceClassName: f.deviceClass, Repeat: f.repeat, Concurrency: f.concurrency,
		PublishTimeout: f.publishTimeout, CallTimeout: f.callTimeout, Progress: stderr, Verbose: f.verbose,
		DriverLog: f.driverLog, Only: f.only, HealthWait: f.healthWait, FeatureGates: f.featureGates,
	}
	if f.restartCmd != "" {
		cfg.RestartCommand = []string{"sh", "-c", f.restartCmd}
	}
	if f.readCDICmd != "" {
		cfg.ReadCDICommand = []string{"sh", "-c", f.readCDICmd}
	}
	for _, m := range f.pathMaps {
		from, to, _ := strings.Cut(m, "=")
		cfg.PathMappings = append(cfg.PathMappings, conformance.PathMapping{From: from, To: to})
	}
	var classes []*resourceapi.DeviceClass
	if f.objects != "" {
		classes, cfg.ExtraClaims, err = readObjects(f.objects)
		if err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
	}
	kubeconfig := f.kubeconfig
	var client kubernetes.Interface
	if kubeconfig == "" {
		fmt.Fprintln(stderr, "starting a local control plane (use --kubeconfig for an existing cluster)")
		c, err := cluster.Start(ctx, cluster.WithLogWriter(stderr), cluster.WithFeatureGates(f.featureGates))
		if err != nil {
			return fmt.Errorf("start local cluster: %w", err)
		}
		defer func() {
			if err := c.Stop(); err != nil {
				fmt.Fprintf(stderr, "stop local cluster: %v\n", err)
			}
		}()
		if err := c.AddFakeNode(ctx, f.node, nil, nil); err != nil {
			return fmt.Errorf("add fake node %s: %w", f.node, err)
		}
		kubeconfig, client = c.Kubeconfig, c.Client
		fmt.Fprintf(stderr, "local cluster up; kubeconfig %s, fake node %s\n", kubeconfig, f.node)
	} else {
		rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return fmt.Errorf("load kubeconfig: %w", err)
		}
		rc.QPS, rc.Burst = 50, 100
		client, err = kubernetes.NewForConfig(rc)
		if err != nil {
			return fmt.Errorf("create client: %w", err)
		}
	}
	cfg.Client = client
	cfg.StartEnv = []string{"KUBECONFIG=" + kubeconfig, "DRAKIT_KUBECONFIG=" + kubeconfig, "NODE_NAME=" + f.node}

	for _, c := range classes {
		if _, err := client.ResourceV1().DeviceClasses().Create(ctx, c, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create DeviceClass %s: %w", c.Name, err)
		}
		defer func() {
			_ = client.ResourceV1().DeviceClasses().Delete(context.Background(), c.Name, metav1.DeleteOptions{})
		}()
		if cfg.DeviceClassName == "" {
			cfg.DeviceClassName = c.Name
		}
	}

	rep, err := conformance.Run(ctx, cfg)
	if err != nil {
		return err
	}
	return writeReports(rep, f, stdout)
}

// listChecks prints one line per check: ID, level, description and
// what it needs.
func listChecks(w io.Writer, checks []conformance.Check) {
	for _, c := range checks {
		needs := ""
		if len(c.Needs) > 0 {
			needs = " (needs " + strings.Join(c.Needs, ", ") + ")"
		}
		fmt.Fprintf(w, "  %-28s %-6s %s%s\n", c.ID, c.Level, c.Description, needs)
	}
}

// runClusterConformance is --cluster: RunCluster with the flags.
func runClusterConformance(ctx context.Context, f *conformanceFlags, stdout, stderr io.Writer) error {
	rc, err := clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	rc.QPS, rc.Burst = 50, 100
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	cfg := conformance.ClusterConfig{
		DriverName: f.driver, NodeName: f.node, Client: client,
		Image: f.image, ImagePullPolicy: corev1.PullPolicy(f.pullPolicy),
		DeviceClassName: f.deviceClass, AllowOtherPods: f.allowOtherPods,
		DriverNamespace: f.driverNS, DriverPodSelector: f.driverSelector,
		CDIDirs: f.cdiDirs, Skip: f.skip, Only: f.only, Progress: stderr,
		PublishTimeout: f.publishTimeout,
	}
	if f.readCDICmd != "" {
		cfg.ReadCDICommand = []string{"sh", "-c", f.readCDICmd}
	}
	if f.restartCmd != "" {
		cfg.RestartCommand = []string{"sh", "-c", f.restartCmd}
	}
	rep, err := conformance.RunCluster(ctx, cfg)
	if err != nil {
		return err
	}
	return writeReports(rep, f, stdout)
}

// writeReports writes the summary and details to stdout and the report
// files the flags name, and fails when a MUST check failed.
func writeReports(rep *conformance.Report, f *conformanceFlags, stdout io.Writer) error {
	fmt.Fprintln(stdout)
	if err := rep.WriteSummary(stdout); err != nil {
		return err
	}
	if err := rep.WriteDetails(stdout, f.verbose); err != nil {
		return err
	}
	for _, out := range []struct {
		path  string
		write func(io.Writer) error
	}{{f.junit, rep.WriteJUnit}, {f.jsonOut, rep.WriteJSON}} {
		if out.path == "" {
			continue
		}
		if err := writeFile(out.path, out.write); err != nil {
			return err
		}
	}
	if rep.Failed() {
		return fmt.Errorf("%d required (MUST) checks failed", rep.Counts()[conformance.Fail])
	}
	return nil
}

func writeFile(path string, write func(io.Writer) error) error {
	file, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create report: %w", err)
	}
	if err := write(file); err != nil {
		_ = file.Close()
		return err
	}
	if err := file.Close(); err != nil {
		return fmt.Errorf("write report %s: %w", path, err)
	}
	return nil
}
