// Package driver is the runtime that turns a vendor's [Discoverer] and
// [Preparer] into a DRA driver behind the kubelet plugin helper
// (k8s.io/dynamic-resource-allocation/kubeletplugin).
//
// The vendor says which devices exist and reports their health (a
// [Discoverer], usually built with package device), and prepares and
// unprepares one allocated device, returning its CDI container edits (a
// [Preparer]):
//
//	rt, err := driver.New("gpu.example.com",
//		driver.WithDiscoverer(myDiscoverer),
//		driver.WithPreparer(myPreparer),
//		driver.WithRESTConfig(cfg), driver.WithNodeName(node))
//	if err != nil { ... }
//	return rt.Run(ctx) // blocks; stops cleanly on ctx cancel
//
// The [Runtime] does the rest, and these are its contracts:
//
//   - Slices: the inventory is published as the node's ResourceSlices,
//     again after every change event and every [WithResyncInterval]; a
//     device reported Unhealthy carries a NoSchedule taint
//     ([device.HealthTaint]) until it recovers.
//   - Prepare is two-phase and crash-safe: the intent is recorded before
//     any vendor call and the result after; a claim left half-way by a
//     crash, or held across a reboot, is undone through the vendor's
//     unprepare before the driver serves. UnprepareDevice must therefore
//     be idempotent and accept a device whose prepare never ran or did
//     not finish.
//   - A repeated prepare returns the recorded result without calling the
//     vendor; unprepare of an unknown claim succeeds; unprepare works
//     from the checkpoint after the claim was deleted.
//   - A device prepared for one claim is refused to another
//     ([ErrDeviceInUse]) unless admin access or distinct shares allow
//     both; a device the driver does not publish is refused.
//   - Shares (consumable capacity): each share of a device is prepared,
//     checkpointed (with its consumed capacity), unprepared and
//     recovered on its own, with a CDI device of its own
//     ([AllocatedDevice.ShareName]); two shares of a device in one claim
//     must not set the same variable; a device's health is every
//     share's. docs/sharing.md has a worked example.
//   - One CDI spec per claim, with the request names and share IDs as
//     allocated; common edits from an optional [ClaimEditor].
//   - Health reaches the kubelet as the vendor last reported it; a report
//     older than [WithHealthTimeout] shows as Unknown.
//   - One driver process per folder, or the two instances of its rolling
//     update of one owner ([WithRollingUpdate], [WithRollingUpdateOwner]);
//     a third process or a second release of the driver is refused
//     ([ErrFoldersInUse]).
//   - Metrics, /healthz and /readyz on [WithHTTPAddress]; per-claim
//     errors are [ClaimError]s with a reason.
//
// A driver ships its DeviceClasses with its deployment: build them with
// [device.Class] and render them with [device.ClassesYAML].
//
// How the runtime keeps these contracts (the checkpoint's format, what is
// fsynced, who recovers what after a crash or power loss, the numbers
// behind the defaults) is in docs/runtime.md of the drakit repository:
// https://github.com/drakit/drakit/blob/main/docs/runtime.md
package driver
