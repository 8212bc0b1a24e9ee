package conformance

import (
	"context"
	"strings"
)

// entry is one check of the catalogue: its description, what it needs
// and its function. The runner sets up what it needs first and skips it
// when that is not possible.
type entry struct {
	Check
	needs []fixture
	run   func(r *runner, ctx context.Context) outcome
}

// catalogue lists every check in run order. Each rule says where its level
// comes from: MUST where the kubelet, the scheduler or a container breaks
// otherwise (cited from k8s.io/kubelet/pkg/apis/dra/v1/api.proto, the
// kubelet's pkg/kubelet/cm/dra, the allocator), SHOULD where it is advice.
var catalogue = []entry{
	// registration (check_registration.go)
	mk("registration.socket", Must, "the registration socket exists and answers GetInfo",
		"kubelet plugin watcher (pkg/kubelet/pluginmanager): a socket in the plugin registry answers pluginregistration.Registration/GetInfo within 1 s, or the driver is never registered",
		(*runner).checkRegistrationSocket),
	mk("registration.type", Must, "GetInfo reports type DRAPlugin",
		"kubelet: PluginInfo.type must be \"DRAPlugin\" or the plugin is routed to another handler",
		(*runner).checkRegistrationType, fxRegistration),
	mk("registration.name", Must, "GetInfo reports the driver's name",
		"kubelet: PluginInfo.name is the driver name that ResourceSlices and claims use; claims of another name never reach the driver",
		(*runner).checkRegistrationName, fxRegistration),
	mk("registration.versions", Must, "supported versions name a DRA node service the kubelet knows",
		"kubelet (pkg/kubelet/cm/dra/plugin): supported_versions must list v1.DRAPlugin or v1beta1.DRAPlugin, or registration fails; entries it does not know it ignores (noted)",
		(*runner).checkRegistrationVersions, fxRegistration),
	mk("registration.endpoint", Must, "the endpoint from GetInfo is reachable over gRPC",
		"kubelet: dials PluginInfo.endpoint (empty: the registration socket) within 10 s",
		(*runner).checkRegistrationEndpoint),
	mk("registration.notify", Must, "NotifyRegistrationStatus is accepted",
		"kubelet: calls Registration/NotifyRegistrationStatus after validating the plugin; an error there fails the registration",
		(*runner).checkRegistrationNotify),

	// slices (check_slices.go)
	mk("slices.published", Must, "ResourceSlices for the node are published and complete",
		"scheduler (structured allocator): allocates only from complete pools (all resourceSliceCount slices of the newest generation)",
		(*runner).checkSlicesPublished),
	mk("slices.pools", Must, "pools are consistent: one generation, slice count, unique device names",
		"resource.k8s.io/v1 ResourcePool: slices of a pool share generation and resourceSliceCount; the allocator refuses a pool with duplicate device names",
		(*runner).checkSlicesPools, fxSlices),
	mk("slices.standard-attributes", Must, "standard attributes pcieRoot, pciBusID and numaNode are well-typed",
		"k8s.io/dynamic-resource-allocation/deviceattribute: pcieRoot string pci<domain>:<bus>, pciBusID string dddd:bb:dd.f, numaNode int >= 0 (or int list); claims' matchAttribute and CEL selectors compare them by type",
		(*runner).checkSlicesStandardAttributes, fxSlices),
	mk("slices.counters", Must, "consumed counters exist in the pool's counter sets and fit",
		"KEP-4815: consumesCounters name a counter set and counters of the same pool; a device that consumes more than the set holds can never be allocated",
		(*runner).checkSlicesCounters, fxSlices),

	// allocation (check_allocation.go)
	mk("allocation.every-device", Must, "every published device can be allocated by a claim that selects it",
		"scheduler: a device the driver publishes must be allocatable by the structured allocator",
		(*runner).checkEveryDevice),
	mk("allocation.counters", Must, "every counter-consuming device can be allocated",
		"KEP-4815: partitionable devices are allocatable when their counters are free",
		(*runner).checkCounterDevices, fxEveryDevice),
	mk("allocation.first-available", Must, "a firstAvailable claim is allocated, prepared, and named by its base request",
		"KEP-4816: the driver gets request \"req/sub\"; the kubelet matches containers by the base request name (pkg/kubelet/cm/dra/claiminfo.go cdiDevicesAsList)",
		(*runner).checkFirstAvailable, fxNode, fxSlices),
	mk("allocation.admin-access", Must, "an admin-access claim on a device in use is prepared",
		"KEP-5018: admin access grants a device that is in use; the driver must not refuse it as double use (skips where the allocator itself does not grant it)",
		(*runner).checkAdminAccess, fxNode, fxSlices),
	mk("allocation.shared", Must, "a device that allows multiple allocations is prepared for several claims at once, each for another share",
		"KEP-5075: the scheduler gives a device with allowMultipleAllocations to as many claims as its capacity has room for (each asking for a share its request policy allows), and the kubelet prepares each, in a call of its own for each pod or together for a pod with several claims. Judged on up to three claims for unequal shares: the first prepared alone, the others in one call",
		(*runner).checkShared),
	mk("allocation.share-id", Should, "devices of shared allocations are returned with their own share IDs",
		"api.proto Device.share_id is optional (\"the share ID of device\"); the kubelet keeps it only to tell allocations apart in the PodResources API (pkg/kubelet/cm/dra/manager.go), containers get the device either way: one left out, or one that is not the allocation's, misreports there",
		(*runner).checkShareID, fxShared),
	mk("allocation.share-unprepare", Must, "unpreparing one claim on a shared device leaves the other claims' shares prepared",
		"kubeletplugin DRAPlugin contract: UnprepareResourceClaims undoes what preparing that claim did, and the kubelet unprepares each claim when its last pod is gone (pkg/kubelet/cm/dra/manager.go), while other pods' claims on the same device stay in use: their CDI devices must still resolve and inject what they did (a container of theirs may still be created), and preparing one of them again gives the same answer",
		(*runner).checkShareUnprepare, fxShared),
	mk("allocation.share-env", Should, "the shares of one device in two claims set no environment variable to two values",
		"container runtime (CDI library): a variable set by two CDI devices keeps the later value, and a pod with two claims on one shared device gives its container both shares' CDI devices; each claim is prepared on its own (api.proto NodePrepareResources), so only a variable name of its own per share keeps both: advice, as pod.two-claims-env for two devices",
		(*runner).checkShareEnv, fxShared),

	// prepare (check_prepare.go)
	mk("prepare.result-per-claim", Must, "NodePrepareResources answers every claim and only those, without error",
		"kubelet (pkg/kubelet/cm/dra/manager.go prepareResources): rejects results for unknown UIDs, fails on a per-claim error and when a requested claim is missing",
		(*runner).checkMainPrepared),
	mk("prepare.devices-match", Must, "prepared devices are exactly the driver's allocated devices (or none)",
		"kubelet gives containers the CDI devices of the returned entries (pkg/kubelet/cm/dra/manager.go prepareResources); a device not allocated, or one of several left out, reaches the wrong containers or none. api.proto allows zero devices per claim (NRI-configured drivers): noted, not failed",
		(*runner).checkDevicesMatch, fxMain),
	mk("prepare.request-names", Must, "in a claim with two requests each device names the base request it was allocated for",
		"api.proto Device.request_names: \"if empty, the device is associated with all requests\"; the kubelet gives a device to the containers of each named request (pkg/kubelet/cm/dra/claiminfo.go cdiDevicesAsList, base request names), so with two requests an empty or wrong list gives devices to the wrong containers",
		(*runner).checkRequestNames, fxMain),
	mk("prepare.cdi-ids-format", Must, "every CDI ID is a well-formed qualified name vendor/class=name",
		"CDI spec: device references are fully qualified names; the runtime rejects others when it creates the container",
		(*runner).checkCDIFormat, fxMain),
	mk("prepare.cdi-resolve", Must, "every CDI ID resolves in the CDI spec folders",
		"container runtime: fails container creation for an unresolvable CDI device",
		(*runner).checkCDIResolve, fxMain),
	mk("prepare.cdi-inject", Must, "the CDI devices inject into an OCI spec",
		"container runtime: applies CDI container edits to the OCI spec and fails the container when that fails",
		(*runner).checkCDIInject, fxMain),
	mk("prepare.cdi-env", Must, "the devices of one claim, and the entries of one CDI device, do not overwrite each other's environment variables",
		"container runtime (tags.cncf.io/container-device-interface, ContainerEdits.Apply): a variable set again, by a later CDI device or by a later entry of the same CDI device, replaces the one of the same name (internal/ociedit addEnv), and the kubelet hands a container the CDI devices of all its claim's devices (pkg/kubelet/cm/dra/claiminfo.go cdiDevicesAsList), so the container loses the earlier device's (or share's) setting. Judged on the main claims and on a claim with two shares of one device that allows multiple allocations",
		(*runner).checkCDIEnv, fxMain),
	mk("prepare.cdi-env-names", Should, "the environment variables of the CDI devices have names a shell can read",
		"POSIX (XBD 8.1) leaves variable names other than [A-Za-z_][A-Za-z0-9_]* to the implementation: the container runtime applies them (CDI ContainerEdits.Env), but a shell (busybox sh, dash) does not pass them on to the programs it starts, so a container whose entry point is a shell script never sees them: advice",
		(*runner).checkCDIEnvNames, fxMain),
	mk("prepare.idempotent", Must, "repeating NodePrepareResources gives the same answer",
		"kubeletplugin DRAPlugin contract: prepare must be idempotent (the kubelet retries after errors and restarts)",
		(*runner).checkPrepareIdempotent, fxMain),
	mk("prepare.concurrent", Must, "prepares of distinct claims at the same time all succeed",
		"kubelet: prepares claims of different pods concurrently",
		(*runner).checkConcurrent, fxNode, fxSlices),
	mk("prepare.every-device", Must, "every allocatable device can be prepared and unprepared",
		"kubelet: any allocated device of the driver may be prepared",
		(*runner).checkEveryDevicePrepared, fxNode, fxEveryDevice),
	mk("prepare.device-in-use", Should, "a device prepared for one claim is refused to a second ordinary claim",
		"kubeletplugin DRAPlugin doc: a driver should verify devices are not in use by another claim (last line of defence)",
		(*runner).checkDeviceInUse, fxMain),
	mk("prepare.other-version", Must, "an advertised second node service version prepares and unprepares like the first",
		"kubelet (pkg/kubelet/cm/dra/plugin): uses the first version it knows of those advertised; older kubelets know only v1beta1, so an advertised version must prepare and unprepare like the other (share IDs aside: v1beta1 has none)",
		(*runner).checkOtherVersion, fxNode, fxSlices),
	mk("prepare.extra-claims", Must, "the configured extra claims are allocated, prepared and unprepared",
		"the vendor's own claim templates work end to end",
		(*runner).checkExtraClaims, fxNode, fxSlices),

	// unprepare (check_unprepare.go)
	mk("unprepare.result-per-claim", Must, "NodeUnprepareResources answers every claim without error",
		"kubelet (pkg/kubelet/cm/dra/manager.go unprepareResources): fails when a requested claim is missing or has an error",
		(*runner).checkMainUnprepared),
	mk("unprepare.cleanup", Must, "the CDI devices prepare defined are no longer defined after unprepare",
		"kubeletplugin DRAPlugin contract: UnprepareResourceClaims must undo whatever PrepareResourceClaims did; CDI devices left behind (a per-claim spec file, or entries in a spec file shared by claims) pile up and, once a device name comes back, conflict, and the runtime refuses conflicting specs (tags.cncf.io/container-device-interface cache: conflicting devices are not resolved). Judged by the devices the specs define, not by file names",
		(*runner).checkCleanup, fxMainUnprepared),
	mk("unprepare.idempotent", Must, "repeating NodeUnprepareResources succeeds",
		"kubeletplugin DRAPlugin contract: unprepare must be idempotent (the kubelet retries)",
		(*runner).checkUnprepareIdempotent, fxMainUnprepared),
	mk("unprepare.unknown-claim", Must, "unpreparing a claim that was never prepared succeeds",
		"kubeletplugin DRAPlugin contract: it is not an error to unprepare a claim that is not prepared",
		(*runner).checkUnprepareUnknown, fxNode),
	mk("unprepare.after-delete", Must, "unprepare works after the claim object was deleted",
		"kubeletplugin DRAPlugin contract: the ResourceClaim may be gone when unprepare is called",
		(*runner).checkUnprepareAfterDelete, fxNode, fxSlices),

	// restart (check_restart.go)
	mk("restart.reregister", Must, "after kill -9 and restart the driver registers again",
		"kubelet: re-registers plugins whose socket reappears (GetInfo, NotifyRegistrationStatus)",
		(*runner).checkReregister),
	mk("restart.still-prepared", Must, "a claim prepared before the crash prepares to the same answer after it",
		"kubeletplugin DRAPlugin contract: prepare is idempotent across driver restarts; a running container keeps the CDI edits it got (the runtime applied them at creation), so the same CDI IDs must inject the same edits after the restart",
		(*runner).checkStillPrepared, fxRestart),
	mk("restart.device-names", Must, "the devices published before the crash keep their names after it",
		"claims name their devices by pool and name (status.allocation.devices.results); the kubelet prepares claims allocated before the driver restarted with those names (pkg/kubelet/cm/dra/manager.go), and the scheduler counts them as allocated: a device renamed at start leaves those claims pointing at nothing",
		(*runner).checkDeviceNames, fxRestart),
	mk("restart.unprepare", Must, "a claim prepared before the crash is unprepared and cleaned up after it",
		"kubeletplugin DRAPlugin contract: unprepare may be handled by another process than prepare",
		(*runner).checkRestartUnprepare, fxRestart),
	mk("restart.shares", Must, "claims for shares of one device, prepared before the crash, are each prepared again and unprepared on their own after it",
		"kubeletplugin DRAPlugin contract: prepare is idempotent across driver restarts and unprepare may come from another process than prepare, for every claim: claims on one device that allows multiple allocations (KEP-5075) are claims like any other, each with its own share, so the new process must know every share, not one per device. Judged on up to three claims for unequal shares: one prepared again, the others only unprepared",
		(*runner).checkRestartShares, fxRestart),

	// health (check_health.go)
	mk("health.initial-report", Should, "the health stream sends reports naming only published devices",
		"dra-health api.proto: NodeWatchResources streams DeviceHealth for the driver's pool/device pairs; the kubelet (pkg/kubelet/cm/dra/manager.go HandleWatchResourcesStream) matches them to prepared devices by pool and name, so a report for an unpublished device reaches no pod and the device it was meant for stays Unknown. Health is optional (Unimplemented is allowed), so nothing here breaks a pod: advice",
		(*runner).checkHealthInitial),
	mk("health.coverage", Should, "the first reports cover every published device",
		"kubeletplugin DRAPlugin.WatchHealthStatus: send an initial report covering all devices (until then the kubelet shows them as Unknown)",
		(*runner).checkHealthCoverage, fxHealth),
	mk("health.refresh", Should, "every device's health is refreshed within its timeout",
		"kubelet (pkg/kubelet/cm/dra): health not refreshed within health_check_timeout_seconds (default 30 s) becomes Unknown; a report of Unknown for a device first reported Healthy or Unhealthy is that same staleness, so it does not count as a refresh",
		(*runner).checkHealthRefresh, fxHealth),

	// robustness (check_robust.go)
	mk("robust.empty-request", Must, "NodePrepareResources and NodeUnprepareResources with no claims do not crash the driver",
		"kubelet (pkg/kubelet/cm/dra/manager.go): while the driver does not answer, every pod with a claim of it fails to start on the node; a well-formed request must not crash it",
		(*runner).checkEmptyRequest, fxNode),
	mk("robust.duplicate-uids", Must, "a request naming the same claim twice does not crash the driver",
		"kubelet: a crashed driver fails every pod start on the node (pkg/kubelet/cm/dra/manager.go); what it answers does not matter (the kubelet never names a claim twice)",
		(*runner).checkDuplicateUIDs, fxNode, fxSlices),
	mk("robust.unallocated-claim", Must, "preparing a claim with no allocation fails with an error, no crash",
		"kubeletplugin (draplugin.go) rejects claims that are not allocated; preparing one would hand out devices the scheduler never granted",
		(*runner).checkUnallocated, fxNode),
	mk("robust.other-driver", Must, "devices of another driver in a claim are not prepared",
		"kubelet (pkg/kubelet/cm/dra/manager.go) sends a claim to each driver with results in it; devices another driver prepares too are handed out twice",
		(*runner).checkOtherDriver, fxNode, fxSlices),
	mk("robust.garbage-names", Must, "claims that do not exist or have garbage names get an error, no crash",
		"kubelet (pkg/kubelet/cm/dra/manager.go): while the driver does not answer, every pod with a claim of it fails to start on the node; a well-formed request must not crash it",
		(*runner).checkGarbageNames, fxNode),
	mk("robust.still-serving", Must, "after all of the above the driver still prepares and unprepares",
		"kubelet (pkg/kubelet/cm/dra/manager.go): while the driver does not answer, every pod with a claim of it fails to start on the node; a well-formed request must not crash it",
		(*runner).checkStillServing, fxNode, fxSlices),
	mk(livenessProbeCheck, Must, "the liveness probe the suite sends after every check does not end the driver",
		"kubelet (pkg/kubelet/cm/dra/manager.go): prepareResources checkpoints a claim before NodePrepareResources, and reconcileLoop calls NodeUnprepareResources for the claims of pods that are gone, so a driver gets unprepare calls for claims it never prepared, also right after it registered; a crashed driver fails every pod start on the node. The probe is such a call (NodeUnprepareResources for a claim never prepared); a probe that ends the driver is reported here, not against the check it followed",
		(*runner).checkLivenessProbe),
}

func mk(id string, level Level, desc, rule string, run func(*runner, context.Context) outcome, needs ...fixture) entry {
	cat, _, _ := strings.Cut(id, ".")
	e := entry{Check: Check{ID: id, Category: cat, Description: desc, Rule: rule, Level: level}, needs: needs, run: run}
	for _, fx := range needs {
		e.Needs = append(e.Needs, fixtureTable[fx].name)
	}
	return e
}

// Checks returns the catalogue of checks in run order.
func Checks() []Check {
	out := make([]Check, 0, len(catalogue))
	for _, e := range catalogue {
		out = append(out, e.Check)
	}
	return out
}

func lookupCheck(id string) (entry, bool) {
	for _, e := range catalogue {
		if e.ID == id {
			return e, true
		}
	}
	return entry{}, false
}
