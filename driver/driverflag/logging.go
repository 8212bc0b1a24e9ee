package driverflag

import (
	"errors"
	"flag"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"

	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
)

// RegisterLogging adds only --feature-gates and the logging flags of
// [Register] to fs, for a program that runs beside a driver (an
// admission webhook, a controller) and logs like it. Its Flags have
// Logging and FeatureGate; [Flags.ApplyLogging] applies them.
func RegisterLogging(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	f.registerLogging(fs)
	return f
}

// registerLogging adds component-base's logging flags (--logging-format,
// -v, --vmodule, --log-flush-frequency and the formats' options) and
// --feature-gates to fs. A fs that already has "v" keeps it and gets no
// logging flags: the program configures logging itself.
func (f *Flags) registerLogging(fs *flag.FlagSet) {
	f.fs = fs
	f.FeatureGate = featuregate.NewFeatureGate()
	if err := logsapi.AddFeatureGates(f.FeatureGate); err != nil {
		panic(err) // a fresh gate with component-base's own constant gates
	}
	if fs.Lookup("v") == nil {
		f.Logging = logsapi.NewLoggingConfiguration()
		logsapi.AddGoFlags(f.Logging, fs)
	}
	fs.Var(gatesValue{f.FeatureGate}, "feature-gates", "")
	f.gatesUsage()
}

// gatesValue is a feature gate as a flag.Value: "A=true,B=false".
type gatesValue struct {
	g featuregate.MutableFeatureGate
}

func (v gatesValue) String() string {
	if s, ok := v.g.(fmt.Stringer); ok {
		return s.String()
	}
	return ""
}

func (v gatesValue) Set(s string) error { return v.g.Set(s) }

// AddFeatureGates adds the driver's own feature gates to FeatureGate,
// before the command line is parsed, and lists them in --feature-gates'
// help. Stages follow Kubernetes': an Alpha gate is off by default, a
// Beta gate on; GA gates stay on and are locked.
func (f *Flags) AddFeatureGates(gates map[featuregate.Feature]featuregate.FeatureSpec) error {
	if f.FeatureGate == nil {
		return errors.New("driver flags: AddFeatureGates before Register")
	}
	if err := f.FeatureGate.Add(gates); err != nil {
		return fmt.Errorf("driver flags: add feature gates: %w", err)
	}
	f.gatesUsage()
	return nil
}

// gatesUsage writes the known gates into --feature-gates' help, as
// Kubernetes components list theirs.
func (f *Flags) gatesUsage() {
	fl := f.fs.Lookup("feature-gates")
	if fl == nil {
		return
	}
	var known []string
	for name, spec := range f.FeatureGate.GetAll() {
		if spec.PreRelease == featuregate.GA || spec.PreRelease == featuregate.Deprecated || name == "AllAlpha" || name == "AllBeta" {
			continue
		}
		known = append(known, fmt.Sprintf("%s=true|false (%s - default=%t)", name, strings.ToUpper(string(spec.PreRelease)), spec.Default))
	}
	sort.Strings(known)
	fl.Usage = "A set of key=value pairs that describe feature gates for alpha/experimental features. Options are:\n" + strings.Join(known, "\n")
}

// The logging configuration applied to this process: klog's settings
// are global, so a second, different configuration is refused.
var (
	appliedMu sync.Mutex
	applied   *logsapi.LoggingConfiguration
)

// ErrLoggingApplied is returned (wrapped) by [Flags.ApplyLogging] for a
// second, different logging configuration in one process.
var ErrLoggingApplied = errors.New("logging already configured differently in this process")

// ApplyLogging validates the logging flags and applies them to klog (and
// the contextual logger) with the logging feature gates: text or JSON
// lines on stderr, -v, --vmodule. [Flags.Options] calls it; a program
// that does not call Options calls it after parsing its flags. Applying
// the same configuration again does nothing; a different one is
// refused (klog's settings are the process's). Flags whose flag set had
// its own "v" flag have no logging configuration and apply nothing.
func (f *Flags) ApplyLogging() error {
	if f.Logging == nil {
		return nil
	}
	if errs := logsapi.Validate(f.Logging, f.FeatureGate, nil); len(errs) > 0 {
		return fmt.Errorf("driver flags: logging: %w", errs.ToAggregate())
	}
	appliedMu.Lock()
	defer appliedMu.Unlock()
	if applied != nil {
		if !reflect.DeepEqual(applied, f.Logging) {
			return fmt.Errorf("driver flags: --logging-format, -v, --vmodule: %w", ErrLoggingApplied)
		}
		return nil
	}
	if err := logsapi.ValidateAndApply(f.Logging, f.FeatureGate); err != nil {
		return fmt.Errorf("driver flags: logging: %w", err)
	}
	applied = f.Logging.DeepCopy()
	return nil
}
