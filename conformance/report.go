package conformance

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Level says how binding a check's rule is.
type Level string

const (
	// Must marks a rule the kubelet or the API depends on: a failure fails
	// the run.
	Must Level = "MUST"
	// Should marks advice from the kubeletplugin contract: a violation is
	// reported as a warning and never fails the run.
	Should Level = "SHOULD"
)

// Status is the outcome of one check.
type Status string

const (
	// Pass means the driver follows the rule.
	Pass Status = "pass"
	// Fail means a MUST rule is broken; the run fails.
	Fail Status = "fail"
	// Warn means a SHOULD rule is broken; the run does not fail.
	Warn Status = "warn"
	// Skip means the check did not run (not selected, not applicable, or
	// something it needs is missing); the message says why.
	Skip Status = "skip"
)

// Check describes one conformance check.
type Check struct {
	// ID is stable and unique, "category.name"; use it in Config.Skip.
	ID string `json:"id"`
	// Category is the part of the protocol the check covers (the part of
	// ID before the dot).
	Category string `json:"category"`
	// Description is one line saying what is checked.
	Description string `json:"description"`
	// Rule is the protocol or API rule the check enforces, and where it
	// comes from.
	Rule string `json:"rule"`
	// Level is Must or Should.
	Level Level `json:"level"`
	// Needs names what the check needs (the driver registered, its
	// slices published, the main claims prepared, ...); the runner sets
	// that up first, and the check skips when it cannot. In cluster mode
	// ([ClusterChecks]) it names the earlier checks whose pods or driver
	// restart the check uses.
	Needs []string `json:"needs,omitempty"`
}

// Result is the outcome of one check in a run.
type Result struct {
	Check
	// Status is the outcome.
	Status Status `json:"status"`
	// Message tells a driver author what went wrong and what to fix (or,
	// for a pass, what was verified).
	Message string `json:"message,omitempty"`
	// Duration is how long the check took.
	Duration time.Duration `json:"durationNanoseconds"`
}

// Report is the outcome of a run.
type Report struct {
	// Driver and Node are what the run checked.
	Driver string `json:"driver"`
	Node   string `json:"node"`
	// Started is when the run began; Duration how long it took.
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"durationNanoseconds"`
	// Results holds one entry per check run, in catalogue order: every
	// check, unless Config.Only (or a go test -run filter with Test)
	// selects some.
	Results []Result `json:"results"`
	// DriverLog is the file that holds the output of the driver the
	// suite started (empty when it started none).
	DriverLog string `json:"driverLog,omitempty"`
	// Aborted says why the run ended before its last check (the driver
	// stopped serving and could not be brought back), with the last
	// lines of its output; empty when every check ran.
	Aborted string `json:"aborted,omitempty"`
}

// Failed reports whether any MUST check failed.
func (r *Report) Failed() bool {
	for _, res := range r.Results {
		if res.Status == Fail {
			return true
		}
	}
	return false
}

// Result returns the result of the check with the given id.
func (r *Report) Result(id string) (Result, bool) {
	for _, res := range r.Results {
		if res.ID == id {
			return res, true
		}
	}
	return Result{}, false
}

// Counts returns how many results have each status.
func (r *Report) Counts() map[Status]int {
	c := map[Status]int{}
	for _, res := range r.Results {
		c[res.Status]++
	}
	return c
}

// ProgressLine formats one result as the one-line progress output: the
// first line of its message, marked with " [...]" when there is more
// (see ProgressText).
func ProgressLine(res Result) string {
	msg := res.Message
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i] + " [...]"
	}
	return fmt.Sprintf("%-4s %-6s %-36s %6.2fs  %s", strings.ToUpper(string(res.Status)), res.Level, res.ID, res.Duration.Seconds(), msg)
}

// ProgressText formats one result with its whole message, continuation
// lines indented.
func ProgressText(res Result) string {
	head, rest, _ := strings.Cut(res.Message, "\n")
	line := fmt.Sprintf("%-4s %-6s %-36s %6.2fs  %s", strings.ToUpper(string(res.Status)), res.Level, res.ID, res.Duration.Seconds(), head)
	if rest == "" {
		return line
	}
	return line + "\n" + indent(rest, "      ")
}

func indent(s, prefix string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n")
}

// WriteDetails writes the whole message and the rule of each result that
// did not pass (all results with all set), so that nothing the table
// shortens is lost.
func (r *Report) WriteDetails(w io.Writer, all bool) error {
	for _, res := range r.Results {
		if res.Status == Pass && !all {
			continue
		}
		level := string(res.Level)
		if res.Level == Should {
			level += ", advice: never fails a run"
		}
		_, err := fmt.Fprintf(w, "\n%s %s (%s): %s\n%s\n  rule: %s\n", strings.ToUpper(string(res.Status)), res.ID, level, res.Description, indent(res.Message, "  "), res.Rule)
		if err != nil {
			return fmt.Errorf("write details: %w", err)
		}
	}
	if r.Aborted != "" {
		if _, err := fmt.Fprintf(w, "\nRUN ENDED EARLY: %s\n", r.Aborted); err != nil {
			return fmt.Errorf("write details: %w", err)
		}
	}
	if r.DriverLog != "" {
		if _, err := fmt.Fprintf(w, "\nThe driver's output is in %s\n", r.DriverLog); err != nil {
			return fmt.Errorf("write details: %w", err)
		}
	}
	return nil
}

// WriteSummary writes a table of all results followed by the totals and
// the verdict. Messages are cut to their first line (marked "[...]");
// WriteDetails writes them whole.
func (r *Report) WriteSummary(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "CHECK\tLEVEL\tSTATUS\tMESSAGE\n")
	for _, res := range r.Results {
		msg := res.Message
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i] + " [...]"
		}
		if len(msg) > 110 {
			msg = msg[:104] + " [...]"
		}
		status := string(res.Status)
		if res.Status == Warn {
			status = "warn (advice)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", res.ID, res.Level, status, msg)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	c := r.Counts()
	verdict := "PASSED"
	if r.Failed() {
		verdict = "FAILED"
	}
	if skipped := r.restartsSkipped(); len(skipped) > 0 {
		verdict += " " + restartsSkippedNote(skipped)
	}
	if r.Aborted != "" {
		verdict += " (run ended early: " + firstLine(r.Aborted) + ")"
	}
	_, err := fmt.Fprintf(w, "\n%s: driver %s on node %s: %d passed, %d failed, %d warnings, %d skipped in %.1fs\n",
		verdict, r.Driver, r.Node, c[Pass], c[Fail], c[Warn], c[Skip], r.Duration.Seconds())
	if err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	return nil
}

// restartChecks are the checks of either mode that judge what a driver
// does when it restarts; a verdict without them says so.
var restartChecks = map[string]bool{
	"restart.reregister": true, "restart.still-prepared": true, "restart.device-names": true, "restart.unprepare": true,
	"pod.driver-restart": true, "pod.restart-same-edits": true, "pod.restart-device-names": true,
}

// restartsSkipped returns the results of the restart checks that were
// skipped.
func (r *Report) restartsSkipped() []Result {
	var out []Result
	for _, res := range r.Results {
		if restartChecks[res.ID] && res.Status == Skip {
			out = append(out, res)
		}
	}
	return out
}

// restartsSkippedNote says, for the verdict, which restart checks were
// skipped and why the first one was.
func restartsSkippedNote(skipped []Result) string {
	ids := make([]string, 0, len(skipped))
	for _, res := range skipped {
		ids = append(ids, res.ID)
	}
	return fmt.Sprintf("(restarts not judged: %s skipped: %s)", strings.Join(ids, ", "), firstLine(skipped[0].Message))
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write JSON report: %w", err)
	}
	return nil
}

type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name      string      `xml:"name,attr"`
	Tests     int         `xml:"tests,attr"`
	Failures  int         `xml:"failures,attr"`
	Skipped   int         `xml:"skipped,attr"`
	Time      string      `xml:"time,attr"`
	Timestamp string      `xml:"timestamp,attr"`
	Cases     []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Body    string `xml:",chardata"`
}

// WriteJUnit writes the report as JUnit XML: one test suite per category,
// one test case per check. A failed MUST check is a failure; a warning is
// a passing case whose system-out starts with "WARNING"; a skip is skipped.
func (r *Report) WriteJUnit(w io.Writer) error {
	var suites junitSuites
	index := map[string]int{}
	for _, res := range r.Results {
		i, ok := index[res.Category]
		if !ok {
			i = len(suites.Suites)
			index[res.Category] = i
			suites.Suites = append(suites.Suites, junitSuite{
				Name:      "conformance." + res.Category,
				Timestamp: r.Started.UTC().Format(time.RFC3339),
			})
		}
		s := &suites.Suites[i]
		c := junitCase{
			Name:      fmt.Sprintf("[%s] %s: %s", res.Level, res.ID, res.Description),
			Classname: "conformance." + res.Category,
			Time:      fmt.Sprintf("%.3f", res.Duration.Seconds()),
		}
		switch res.Status {
		case Fail:
			c.Failure = &junitMessage{Message: firstLine(res.Message), Type: string(res.Level), Body: res.Message + "\nRule: " + res.Rule}
			s.Failures++
		case Skip:
			c.Skipped = &junitMessage{Message: res.Message}
			s.Skipped++
		case Warn:
			c.SystemOut = "WARNING (SHOULD): " + res.Message + "\nRule: " + res.Rule
		default:
			c.SystemOut = res.Message
		}
		s.Tests++
		s.Cases = append(s.Cases, c)
	}
	for i := range suites.Suites {
		var d time.Duration
		for _, res := range r.Results {
			if "conformance."+res.Category == suites.Suites[i].Name {
				d += res.Duration
			}
		}
		suites.Suites[i].Time = fmt.Sprintf("%.3f", d.Seconds())
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return fmt.Errorf("write JUnit report: %w", err)
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(suites); err != nil {
		return fmt.Errorf("write JUnit report: %w", err)
	}
	if _, err := io.WriteString(w, "\n"); err != nil {
		return fmt.Errorf("write JUnit report: %w", err)
	}
	return nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
