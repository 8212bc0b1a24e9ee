package conformance_test

import (
	"fmt"
	"os"
	"time"

	"github.com/drakit/drakit/conformance"
)

// The catalogue names every check with its level; Config.Skip takes IDs
// or categories.
func ExampleChecks() {
	n := map[conformance.Level]int{}
	for _, c := range conformance.Checks() {
		n[c.Level]++
		if c.Category == "restart" {
			fmt.Printf("%-24s %-6s %s\n", c.ID, c.Level, c.Description)
		}
	}
	fmt.Printf("%d MUST and %d SHOULD checks\n", n[conformance.Must], n[conformance.Should])
	// Output:
	// restart.reregister       MUST   after kill -9 and restart the driver registers again
	// restart.still-prepared   MUST   a claim prepared before the crash prepares to the same answer after it
	// restart.device-names     MUST   the devices published before the crash keep their names after it
	// restart.unprepare        MUST   a claim prepared before the crash is unprepared and cleaned up after it
	// restart.shares           MUST   claims for shares of one device, prepared before the crash, are each prepared again and unprepared on their own after it
	// 45 MUST and 7 SHOULD checks
}

// Cluster mode's checks run real pods on a node of a cluster where the
// driver is installed; it needs only a client (RunCluster).
func ExampleClusterChecks() {
	for _, c := range conformance.ClusterChecks() {
		fmt.Printf("%-24s %-6s %s\n", c.ID, c.Level, c.Description)
	}
	// Output:
	// pod.starts               MUST   a pod with a claim from a ResourceClaimTemplate runs on the node
	// pod.cdi-edits            MUST   the container sees its device's CDI edits (environment)
	// pod.isolation            MUST   a container sees none of another claim's device edits
	// pod.two-devices          MUST   a container with two devices of one claim sees both devices' edits
	// pod.request-names        MUST   two containers, each naming one request of a claim with two, see each its own request's device
	// pod.two-claims           MUST   a pod with two claims of the driver runs and its container sees both claims' devices
	// pod.two-claims-env       SHOULD the devices of a pod's two claims set no environment variable to two values
	// pod.shared-claim         MUST   a claim shared by two pods gives both the same device edits
	// pod.first-available      MUST   a claim with firstAvailable subrequests runs with the subrequest the scheduler chose
	// pod.unprepare            MUST   deleting the pods unprepares their claims: CDI devices gone, the device allocatable and preparable again
	// pod.admin-access         MUST   an admin-access claim on a device in use runs
	// pod.driver-restart       MUST   pods keep running while the driver is restarted (its pod replaced, or a restart hook), and the new one unprepares their claims
	// pod.restart-same-edits   MUST   a pod started after the driver's restart, with a claim prepared before it, sees what the claim's first pod sees; deleting both unprepares the claim
	// pod.restart-device-names MUST   the devices that running pods were allocated are still published under their names after the driver's restart
	// pod.env-names            SHOULD the variables the driver gives containers have names a shell can read
	// pod.health               SHOULD device health reaches the pod status
}

// A report prints as a table; a warning (SHOULD) does not fail the run.
func ExampleReport_WriteSummary() {
	rep := &conformance.Report{Driver: "gpu.example.com", Node: "node-1", Duration: 9 * time.Second}
	for _, c := range conformance.Checks() {
		switch c.ID {
		case "registration.name":
			rep.Results = append(rep.Results, conformance.Result{Check: c, Status: conformance.Pass, Message: "name gpu.example.com"})
		case "prepare.device-in-use":
			rep.Results = append(rep.Results, conformance.Result{Check: c, Status: conformance.Warn, Message: "device p/d0 prepared for two claims"})
		}
	}
	_ = rep.WriteSummary(os.Stdout)
	// Output:
	// CHECK                  LEVEL   STATUS         MESSAGE
	// registration.name      MUST    pass           name gpu.example.com
	// prepare.device-in-use  SHOULD  warn (advice)  device p/d0 prepared for two claims
	//
	// PASSED: driver gpu.example.com on node node-1: 1 passed, 0 failed, 1 warnings, 0 skipped in 9.0s
}
