package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
)

// ErrConfig marks an invalid Config; the message names the field.
var ErrConfig = errors.New("invalid conformance config")

// Config says which driver to check and how to reach it.
type Config struct {
	// DriverName is the DRA driver's name (spec.driver of its
	// ResourceSlices, the name it registers with). Required.
	DriverName string
	// NodeName is the node the driver serves; its ResourceSlices name
	// it and claims are allocated for it. Required. The Node object
	// should exist (a fake node without kubelet is enough).
	NodeName string
	// Client talks to the API server as a cluster admin. Required.
	Client kubernetes.Interface
	// RegistrationPath is the driver's registration socket, or a folder
	// (the kubelet's plugin registry) in which the suite looks for it
	// the way the kubelet does. Required.
	RegistrationPath string
	// PathMappings translate paths the driver reports in GetInfo (its
	// endpoint) when it runs in its own mount namespace. The first
	// mapping whose From prefixes a path applies.
	PathMappings []PathMapping
	// CDIDirs are the folders the container runtime reads CDI specs
	// from. Without them the CDI resolve, inject and cleanup checks skip.
	CDIDirs []string
	// StartCommand, when set, starts the driver: the suite runs it before
	// the checks (and the driver must not already be running), kills it
	// with SIGKILL and starts it again for the restart checks, and stops
	// it by PID at the end. Without it the restart checks skip.
	StartCommand []string
	// StartEnv is added to the environment of StartCommand.
	StartEnv []string
	// RestartDriver, for a driver the suite did not start (e.g. a
	// DaemonSet pod), kills it without a chance to clean up and returns
	// once it is gone (e.g. deletes the pod with grace period 0; the
	// DaemonSet starts a new one). The suite then waits for it to
	// register again. With it (or RestartCommand, or StartCommand) the
	// restart checks run, and a driver that dies during a check is
	// brought back for the next one.
	RestartDriver func(ctx context.Context) error
	// RestartCommand is RestartDriver as a command, run without a shell
	// (e.g. kubectl delete pod -n NS -l app=DRIVER --grace-period=0
	// --force --wait).
	RestartCommand []string
	// ReadCDI, when set, returns the node's CDI spec files by name (e.g.
	// their path), as the container runtime sees them: for a driver
	// that writes them in another mount namespace. It replaces CDIDirs
	// for the CDI resolve, inject and cleanup checks.
	ReadCDI func(ctx context.Context) (map[string][]byte, error)
	// ReadCDICommand is ReadCDI as a command, run without a shell, that
	// writes a tar archive of the node's CDI folder to its standard
	// output (e.g. kubectl exec -n NS POD -- tar -C /var/run/cdi -cf - .).
	ReadCDICommand []string
	// DriverLog is the file that keeps the started driver's stdout and
	// stderr (default: a new file drakit-conformance-driver-*.log in the
	// temporary folder, kept after the run; Report.DriverLog names it).
	// Its last lines are shown when the driver exits unexpectedly.
	DriverLog string
	// DriverOutput, when set, receives the driver's output as well.
	DriverOutput io.Writer
	// DeviceClassName, when set, names an existing DeviceClass which
	// selects the driver's devices; the suite's claims use it. By default
	// the suite creates a class that selects every device of the driver
	// and deletes it at the end.
	DeviceClassName string
	// ExtraClaims are claim specs (e.g. from the vendor's claim
	// templates) which the check prepare.extra-claims allocates,
	// prepares and unprepares. Requests naming no class get the suite's
	// class.
	ExtraClaims []resourceapi.ResourceClaimSpec
	// Skip lists check IDs or categories ("restart") not to run.
	Skip []string
	// Only, when set, lists the check IDs or categories to run; the
	// others are absent from the report. What they need is set up all
	// the same (see the package doc).
	Only []string
	// Namespace for the suite's claims; created if missing, and deleted
	// at the end when the suite created it. Default: a generated name.
	Namespace string
	// Repeat is how many times idempotency checks repeat a call
	// (default 3).
	Repeat int
	// Concurrency is how many claims are prepared at the same time in
	// prepare.concurrent (default 4, fewer when the driver has fewer
	// free devices).
	Concurrency int
	// PublishTimeout bounds the wait for the driver's registration
	// socket and complete ResourceSlices (default 60 s).
	PublishTimeout time.Duration
	// CallTimeout bounds each NodePrepareResources and
	// NodeUnprepareResources call (default 45 s, as the kubelet). A call
	// to a driver the suite started ends as soon as the process exits.
	CallTimeout time.Duration
	// HealthWait bounds how long health.refresh waits for a repeated
	// report (default: the devices' health check timeout plus 5 s, at
	// most 2 minutes).
	HealthWait time.Duration
	// Progress receives one line per check as it finishes (nil: none):
	// the first line of its message (ProgressLine), or all of it with
	// Verbose (ProgressText).
	Progress io.Writer
	// Verbose makes Progress carry whole messages.
	Verbose bool
	// FeatureGates are the Kubernetes feature gates the cluster has on
	// (true) or off (false), where they change what a driver may
	// publish: DRAListTypeAttributes (alpha in 1.37, off unless named)
	// lets a standard attribute such as pcieRoot be a list. A gate not
	// named has its 1.37 default.
	FeatureGates map[string]bool
}

// GateListTypeAttributes is the feature gate that allows list-valued
// device attributes (resource.k8s.io DeviceAttribute ints, strings, ...).
const GateListTypeAttributes = "DRAListTypeAttributes"

// gate reports whether the feature gate name is on: as Config.FeatureGates
// says, else its default in Kubernetes 1.37 (off for the alpha gates the
// suite asks about).
func (c *Config) gate(name string) bool {
	return c.FeatureGates[name]
}

// validate checks required fields and fills in defaults.
func (c *Config) validate() error {
	var errs []string
	if c.DriverName == "" {
		errs = append(errs, "DriverName: required")
	} else if msgs := validation.IsDNS1123Subdomain(c.DriverName); len(msgs) > 0 {
		errs = append(errs, fmt.Sprintf("DriverName: %q is not a DNS subdomain: %s", c.DriverName, strings.Join(msgs, "; ")))
	}
	if c.NodeName == "" {
		errs = append(errs, "NodeName: required")
	}
	if c.Client == nil {
		errs = append(errs, "Client: required")
	}
	if c.RegistrationPath == "" {
		errs = append(errs, "RegistrationPath: required")
	}
	if c.Repeat < 0 {
		errs = append(errs, fmt.Sprintf("Repeat: %d is negative", c.Repeat))
	}
	if c.Concurrency < 0 {
		errs = append(errs, fmt.Sprintf("Concurrency: %d is negative", c.Concurrency))
	}
	for _, s := range c.Skip {
		if !knownSkip(s) {
			errs = append(errs, fmt.Sprintf("Skip: %q is neither a check ID nor a category (see Checks)", s))
		}
	}
	for _, s := range c.Only {
		if !knownSkip(s) {
			errs = append(errs, fmt.Sprintf("Only: %q is neither a check ID nor a category (see Checks)", s))
		}
	}
	if c.RestartDriver != nil && len(c.RestartCommand) > 0 {
		errs = append(errs, "RestartDriver and RestartCommand: give one")
	}
	if c.ReadCDI != nil && len(c.ReadCDICommand) > 0 {
		errs = append(errs, "ReadCDI and ReadCDICommand: give one")
	}
	for i, m := range c.PathMappings {
		if m.From == "" || m.To == "" {
			errs = append(errs, fmt.Sprintf("PathMappings[%d]: From and To are required", i))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrConfig, strings.Join(errs, "; "))
	}
	if c.Repeat == 0 {
		c.Repeat = 3
	}
	if c.Concurrency == 0 {
		c.Concurrency = 4
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = 60 * time.Second
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = 45 * time.Second
	}
	return nil
}

func knownSkip(s string) bool {
	for _, c := range catalogue {
		if c.ID == s || c.Category == s {
			return true
		}
	}
	return false
}

// selected reports whether Only selects ch (everything when Only is
// empty).
func (c *Config) selected(ch Check) bool {
	if len(c.Only) == 0 {
		return true
	}
	for _, s := range c.Only {
		if s == ch.ID || s == ch.Category {
			return true
		}
	}
	return false
}

func (c *Config) skipped(ch Check) bool {
	for _, s := range c.Skip {
		if s == ch.ID || s == ch.Category {
			return true
		}
	}
	return false
}
