// Package driver is the runtime that turns a vendor's discoverer and
// preparer into a correct DRA driver behind the kubelet plugin helper
// (k8s.io/dynamic-resource-allocation/kubeletplugin).
//
// A vendor writes two things: a [Discoverer] that says which
// devices exist (and reports health), and a [Preparer] that prepares and
// unprepares one allocated device, returning CDI container edits:
//
//	d, err := driver.New("gpu.example.com",
//		driver.WithDiscoverer(myDiscoverer),
//		driver.WithPreparer(myPreparer),
//		driver.WithRESTConfig(cfg), driver.WithNodeName(node))
//	if err != nil { ... }
//	return d.Run(ctx) // blocks; stops cleanly on ctx cancel
//
// The runtime owns the rest:
//
//   - Slices: the inventory is validated and published as ResourceSlices
//     for the node, with a NoSchedule taint on each device reported
//     unhealthy (cleared on recovery; built by [device.HealthTaint]). It
//     is discovered again after every change event, with a growing delay
//     while that fails, and every [WithResyncInterval]; a watch that
//     fails is restarted with a growing delay. An inventory must be for
//     the driver's own name ([ErrDriverMismatch]).
//   - Checkpoint: one record file per claim, so a write costs the same
//     with 10 or 10,000 claims held: a prepare creates it holding the
//     intent and appends the completed record to it (one new file, no
//     rename; see Durability below for what is fsynced). Records are versioned
//     JSON with a checksum; unknown fields are ignored, and a corrupt
//     record (also one stored under another claim's file name, which
//     counts for both claims) is quarantined with a log line and a
//     Kubernetes event on the node (through client-go's event recorder,
//     which counts repeats: the driver's RBAC needs create and patch on
//     events) instead of failing the driver. Its
//     claim is not forgotten: its
//     CDI spec is kept, and when the kubelet unprepares it (or prepares it
//     again) the claim's devices are read from its allocation in the API
//     server and undone (UnprepareDevice with nil data) before anything
//     else. Only when the claim is gone from the API server by then are
//     its devices unknown; a warning event on the node says so.
//   - One process per folder: Run takes a lock file in the plugin data
//     and checkpoint folders before it reads them. A second driver on the
//     same folders (a duplicated pod, a manual start) fails at once with
//     [ErrFoldersInUse], naming the first's PID, and touches nothing;
//     the two pods of a rolling update ([WithRollingUpdate]) share it.
//   - Two-phase prepare: the intent is recorded, the vendor work done, the
//     CDI spec written, then completion recorded durably. A failure undoes
//     the claim's devices (rollback); at start, before the sockets serve,
//     claims left half-way by a crashed process are undone or their
//     unprepare finished. Unprepare records its intent too; on a full
//     disk, where no record can be written, by renaming the record
//     (which needs no space), so the operation that frees resources
//     always makes progress.
//   - Housekeeping: CDI specs of claims that are not prepared and
//     temporary files of interrupted writes are removed at start and
//     every [WithHousekeepingInterval]; a removal that fails (a read-only
//     folder) is logged, counted and retried, never fatal.
//   - Allocations are checked against the published devices: a claim
//     allocated a device this driver does not publish (a stale or forged
//     allocation) is refused before any vendor code runs.
//   - Idempotency: a repeated prepare returns the recorded result without
//     calling the vendor; unprepare of an unknown claim succeeds; unprepare
//     works from the checkpoint after the claim was deleted.
//   - Request names and share IDs are returned as allocated (the helper
//     sends a subrequest's base request name, which is what the kubelet
//     matches against containers). A device already prepared for another claim is refused
//     ([ErrDeviceInUse]) unless one of the two allocations has admin access
//     or both are distinct shares of a device that allows multiple
//     allocations.
//   - One CDI spec per claim ("<driver>/claim=<claim UID>_<n>-<device>",
//     or another kind with [WithCDIKind]).
//     Edits common to all devices of a claim (driver libraries, hooks)
//     come from an optional [ClaimEditor] and go into the spec's
//     spec-wide edits, applied once to a container that gets any of them.
//   - Device metadata (KEP-5304, [WithDeviceMetadata]): the attributes a
//     preparer returns in [PreparedDevice.Metadata] are kept in the
//     checkpoint and handed to the helper, which mounts them into the
//     claim's containers as a JSON file.
//   - Health: the kubelet's health stream carries each device's health as
//     the vendor last reported it, with the report's own time: Unknown
//     for a device never reported on or whose last report is older than
//     [WithHealthTimeout], so a health monitor that dies shows as
//     Unknown, never as the health it last saw. Nothing is re-sent on a
//     timer. A discoverer without changes gets the helper's "health not
//     supported" answer.
//   - Metrics, liveness and readiness on one HTTP port
//     ([WithHTTPAddress]):
//     drakit_driver_prepare_claim_duration_seconds,
//     drakit_driver_unprepare_claim_duration_seconds,
//     drakit_driver_errors_total{operation,reason},
//     drakit_driver_prepared_claims, drakit_driver_published_devices,
//     drakit_driver_unhealthy_devices, drakit_driver_api_server_reachable,
//     drakit_driver_orphaned_cdi_specs (also in the program's registry
//     with [WithRegisterer], or merged from [Driver.Gatherer], which has
//     no Go or process collectors); per-claim errors are [ClaimError]s
//     with one of the Reason* reasons; /healthz (the driver's own
//     health: its sockets serve) and /readyz (also: the first slices
//     are published; no API request per probe). The kubelet is served from
//     the start, also while the API server is down; the slices are
//     published as soon as it answers.
//   - Permissions: sockets and lock files are 0600 and the plugin data
//     folder 0750 whatever the process umask; existing folders that
//     others may write are tightened.
//   - Concurrency: calls for different claims run in parallel unless
//     [WithSerializedCalls] or [WithRollingUpdate]; the runtime
//     serializes itself (the helper's serialization is off), across the
//     instances of a rolling update with a lock file in [WithLockDir].
//     [WithRESTConfig] sets a client rate limit that does not cap
//     prepares at client-go's default of 5 per second.
//   - The kubelet plugin helper gets every setting the runtime relies on
//     from drakit's options, stated after any other; its knobs are typed
//     options ([WithGRPCVerbosity], [WithKubeletAPIVersions],
//     [WithHealthService], ...).
//
// Durability: who recovers what after a crash.
//
//   - Process crash (kill -9, OOM kill, panic): no record is ever read
//     torn. CDI specs are written to a temporary file and renamed. A
//     prepare's record file is created empty and filled with the intent
//     before any device work (an empty file means nothing was done, and is
//     removed); the completed record is appended to it, and a cut-short
//     append reads as the intent before it. At
//     start, before the sockets serve, recovery undoes every claim whose
//     record is an intent (prepare or unprepare started), then the kubelet
//     prepares it again or finishes unpreparing it. Nothing is lost.
//   - Power loss or kernel crash: a prepare that returned has its
//     completed record on disk (the record file is fsynced after the
//     append; on file systems that do not commit a new file's name with
//     its fsync, the name follows with the next journal commit, ext4 and
//     XFS do), so at worst a claim prepared in the last few seconds
//     comes back as its intent or not at all, which recovery undoes or
//     the kubelet prepares again. An unprepare that
//     returned is on disk (its record's removal is fsynced with the
//     folder; removals that run at the same time share one fsync).
//     Intent records and CDI specs are not fsynced: an intent lost with
//     the power guarded device state the power loss reset too, and at
//     start every prepared claim whose CDI spec is missing or torn (also a
//     CDI folder on tmpfs after a reboot) is undone, so the kubelet
//     prepares it again; specs of claims not held are removed. A vendor
//     whose device state survives a power loss (written to firmware or
//     disk) must reconcile it at start itself: drakit cannot know about
//     a prepare whose intent never reached the disk.
//   - The vendor's UnprepareDevice must be idempotent and accept a device
//     whose PrepareDevice never ran or did not finish: undoing an intent
//     calls it for every device of the claim.
//
// # DeviceClasses
//
// The runtime publishes devices; the DeviceClasses that users name in
// their claims ship with the driver's deployment, not from the running
// driver (a class is cluster-wide, a driver runs per node). Build them
// with [device.Class] (which checks names and an extendedResourceName as
// the API server does), render them with [device.ClassesYAML] into the
// chart or manifests, and let a test compare the two; a class with
// ExtendedResourceName serves unchanged `example.com/gpu: 1` pods.
package driver
