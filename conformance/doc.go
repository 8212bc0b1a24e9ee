// Package conformance checks any DRA driver by playing the kubelet and the
// scheduler against it and a real API server, the way csi-sanity does for
// CSI drivers. It speaks only the protocols, so it works for drivers not
// built with drakit:
//
//   - as the kubelet: pluginregistration GetInfo and
//     NotifyRegistrationStatus on the registration socket (again after
//     every restart), the DRA node service (dra/v1, or v1beta1 when that
//     is all the driver offers; a second advertised version is checked
//     against the first) and the health stream (dra-health v1 or
//     v1alpha1), over unix-socket gRPC;
//   - as the scheduler: it allocates claims with the real
//     k8s.io/dynamic-resource-allocation/structured allocator against the
//     driver's published ResourceSlices and writes allocation and
//     reservation to the API server with UpdateStatus.
//
// The claims are reserved for a real Pod, as the kubelet prepares only
// claims reserved for a pod: the suite creates one per run in its
// namespace, bound to the node under test by spec.nodeName, tolerating
// every taint, naming no claim in its spec (so that a kubelet on the node
// leaves the suite's claims alone) and with an image that never resolves
// (conformance.drakit.invalid/never-started:0), so it never starts. It is
// deleted at the end with the namespace, the claims and the DeviceClass
// the suite created. CDI IDs are resolved and injected into an OCI spec
// with the real CDI library (tags.cncf.io/container-device-interface).
//
// # Use
//
// From a vendor's own tests, on a cluster that package testenv starts
// (a control plane and a fake node; the suite plays the node's kubelet):
//
//	func TestConformance(t *testing.T) {
//		env := testenv.Start(t)
//		cfg := env.ConformanceConfig("gpu.example.com") // client, node, folders
//		cfg.StartCommand = append([]string{"./my-driver"}, env.DriverArgs("gpu.example.com")...)
//		conformance.Test(t, cfg)
//	}
//
// On an existing cluster, Config.Client is any cluster-admin clientset
// and the folders are the node's (/var/lib/kubelet/plugins_registry,
// /var/run/cdi).
//
// Each check is a subtest named by its ID: "go test -run
// TestConformance/prepare.idempotent" runs that check and sets up what it
// needs (registration, slices, the main claims) and nothing else. Or run
// "drakit conformance" from the command line, which runs [Run] and writes
// the summary, the details, JUnit XML and JSON.
//
// A driver the suite starts (Config.StartCommand) gets Config.StartEnv in
// its environment; "drakit conformance" sets KUBECONFIG and
// DRAKIT_KUBECONFIG (the admin kubeconfig) and NODE_NAME (the node under
// test). Its output is kept in a file (Config.DriverLog, by default a new
// file in the temporary folder, named in Report.DriverLog), and its last
// lines are shown when it exits unexpectedly.
//
// A driver deployed as a DaemonSet pod is checked in place: point
// RegistrationPath at the kubelet's plugin registry, give PathMappings when
// the suite does not run on the node, Config.RestartDriver (or
// RestartCommand, e.g. a forced pod deletion) so that the restart checks
// run, and Config.ReadCDI (or ReadCDICommand, e.g. kubectl exec ... tar)
// so that the CDI checks read the node's CDI folder rather than the
// suite's own mount namespace.
//
// # Cluster mode
//
// [RunCluster] ("drakit conformance --cluster") checks a driver that is
// installed on a cluster with nothing but a client: on a node the user
// names it runs real pods (the node's busybox image, never pulled by
// default) with claims from templates, a claim shared by two pods, a
// claim for two devices (with a matchAttribute constraint where two
// devices share an attribute), a claim with two requests whose two
// containers each name one, a pod with two claims, a firstAvailable
// claim and an admin-access claim, so that the cluster's own scheduler
// allocates, its kubelet has the driver prepare, and its container
// runtime applies the CDI edits; each container prints its environment.
// [ClusterChecks] lists what is judged: the pods run; each container
// sees its devices' edits and no other claim's or request's; two
// devices of a claim do not overwrite each other's variables (nor, as
// advice, the devices of a pod's two claims); both pods
// of a shared claim see the same; deleting the pods unprepares (the CDI
// devices gone, a new pod on the freed device runs); running pods keep
// running while the driver is restarted (its pod replaced,
// ClusterConfig.DriverPodSelector, or, for a driver that does not run as
// a pod, killed and started again by ClusterConfig.RestartDriver or
// RestartCommand), the new driver unprepares every claim prepared before
// the restart and prepares again, a claim prepared before the restart
// injects the same into a new pod after it, and the devices of pods that
// ran through the restart stay published under their names; without a
// way to restart the driver those checks skip and the verdict says so.
// Leftover CDI devices are judged once the pods that used them are gone
// (the kubelet deletes a pod's object only after the driver answered the
// unprepare of its claims), not polled for, and each is named. Device
// health reaches the pod status where the cluster has the
// ResourceHealthStatus feature on. With the node's CDI specs
// readable (CDIDirs, ReadCDI) the environment is compared with what the
// driver's CDI devices set; otherwise a device is recognized by its name
// or an attribute value in the environment, and a check that cannot
// recognize it skips. Everything it creates is labeled [ClusterLabel]
// and [ClusterDriverLabel] and deleted before RunCluster returns, also
// when its context is canceled; a later run for the same node and driver
// deletes what a killed one left, and runs for different drivers may
// share a node. It refuses a node where other pods use the driver
// ([ErrNodeBusy]). ClusterConfig.Only reports some checks only; the
// earlier checks they need (Check.Needs) still run, unreported.
//
// # What each mode catches
//
// Both modes are run against every seeded broken driver (below) that a
// pod can show, deployed as a DaemonSet on the local real node, and
// agree: TestCluster (the cases marked ci in the README's test command,
// all with DRAKIT_CONFORMANCE_MATRIX=1) runs cluster mode, then socket
// mode against the same deployed driver. It also runs the test driver as
// a process on the node (not a pod), correct and with forget-on-restart,
// restarted with a restart hook. "(CDI)" marks a cluster check that
// catches the defect only with the node's CDI specs readable:
//
//	defect                   socket mode                 cluster mode
//	cdi-unresolvable         prepare.cdi-resolve         pod.starts (the runtime cannot resolve the ID)
//	bad-cdi-id               prepare.cdi-ids-format      pod.starts (the runtime cannot parse the ID)
//	colliding-env            prepare.cdi-env             pod.two-devices; pod.two-claims-env warns (CDI)
//	wrong-request-names      prepare.request-names       pod.request-names (the container naming the
//	                                                     request gets no device)
//	missing-request-names    prepare.request-names       pod.request-names (each container gets both
//	                                                     requests' devices)
//	skip-claim               prepare.result-per-claim    pod.two-claims (the kubelet refuses the answer)
//	leak-cdi                 unprepare.cleanup           pod.unprepare (CDI)
//	leak-cdi-entry           unprepare.cleanup           pod.unprepare (CDI)
//	admin-guard              allocation.admin-access     pod.admin-access
//	forget-on-restart        restart.unprepare           pod.driver-restart (CDI), as a pod and as a
//	                                                     host process
//	restart-new-edits        restart.still-prepared      pod.restart-same-edits
//	unstable-names           restart.device-names        pod.restart-device-names
//
// The others no pod can show, so only socket mode catches them:
//
//	defect                   socket mode                 why no pod shows it
//	non-idempotent           prepare.idempotent          the kubelet prepares a claim once while pods on
//	                                                     the node use it (a second pod reuses the answer);
//	                                                     it prepares again only after a kubelet restart,
//	                                                     which a client cannot cause
//	crash-on-empty           robust.empty-request        the kubelet never sends a request without claims
//	unprepare-unknown-fails  unprepare.unknown-claim     the kubelet unprepares only claims it asked the
//	                                                     driver to prepare, and a pod's prepare succeeded
//	crash-before-prepare     robust.liveness-probe       the kubelet's unprepare of a claim the driver
//	                                                     never prepared comes from its reconcile loop
//	                                                     (pods gone while the driver was down), which a
//	                                                     client cannot time
//	env-per-share            prepare.cdi-env             a pod would show it, but cluster mode asks for
//	                                                     no two shares of one device in a claim
//	other-driver             robust.other-driver         shows only in a claim with devices of two
//	                                                     drivers; cluster mode checks one
//	no-guard                 prepare.device-in-use       the scheduler never allocates a device in use
//	                                                     to a second claim
//	wrong-device             prepare.devices-match       the kubelet does not compare the names with the
//	                                                     allocation and the container gets the edits;
//	                                                     only the health lookup (Unknown in the pod
//	                                                     status, as for a driver without health) and
//	                                                     the node's PodResources API see the name
//	drop-share-id            allocation.share-id         only the PodResources API shows share IDs
//	missing-request-names    prepare.request-names       both requests get shares of the one device,
//	  (one shared device)                                whose edits are the same
//	bad-attributes           slices.standard-attributes  slice contents: the pods run either way
//	broken-counters          slices.counters             the device is never allocated: a pod asking
//	                                                     for it stays pending, as for a device taken
//	health-unknown-device    health.initial-report       a pod's status shows only its own devices
//	health-silent            health.coverage             the pod status says Unknown, as for a driver
//	health-stale             health.refresh              without a health service (pod.health skips):
//	health-unknown-refresh   health.refresh              a pod cannot tell a driver that stopped
//	                                                     reporting from one that never reports
//
// pod.two-claims-env is advice (SHOULD): each claim is prepared on its
// own, so a claim-wide variable (one value naming all of a claim's
// devices, which pod.two-devices accepts) collides only in a container
// that has two claims. The reference NVIDIA driver passes it: its
// claim-wide variables have the same value in every claim.
//
// The correct variants pass cluster mode as they pass socket mode:
// full (every check passes), names-if-needed (pod.request-names,
// pod.two-claims), shared-spec (pod.unprepare, pod.driver-restart,
// pod.restart-same-edits), pods-only (the suite's claims are reserved
// for real pods), no-cdi (the CDI checks skip: no edits to see),
// health-empty and one-device (pod.health skips; one-device also skips
// what needs two devices or a free device during the restart). omit-share-id, no-request-policy,
// counters-only and pcie-root-list change nothing a pod sees: no cluster
// check allocates a device that allows multiple allocations on purpose,
// and none reads slice contents.
//
// # Checks
//
// Every check has an ID, a one-line description, the rule it enforces with
// its source, a level, and what it needs ([Check].Needs). The level is
// MUST only where the kubelet, the scheduler or a container really breaks
// otherwise (cited from k8s.io/kubelet/pkg/apis/dra/v1/api.proto and the
// kubelet's pkg/kubelet/cm/dra), SHOULD where it is advice (a warning,
// which never fails a run). A check skips, saying why, where the suite
// cannot set its situation up (no shared device, no free device, the
// allocator refuses the claim). [Checks] lists them all, in run order;
// categories are registration, slices, allocation, prepare, unprepare,
// restart (when the suite can restart the driver), health (when the
// driver advertises a health service and does not answer Unimplemented)
// and robust.
//
// What a check needs (the driver registered, its slices published, the
// main claims prepared, two claims on a shared device, the first health
// reports, a restart) is set up once, by the first check that needs it;
// one check reports how that went and the others skip when it failed.
// No check reads another check's result.
//
// # Crashes: which call is blamed
//
// After every check the runner sends a liveness probe: NodeUnprepareResources
// for a claim the driver never prepared, a call the kubelet makes too
// (its reconcile loop unprepares claims of pods that are gone, also
// claims it never got prepared and right after the driver registered:
// pkg/kubelet/cm/dra/manager.go reconcileLoop, prepareResources). A
// driver that stopped serving is blamed on the call that ended it:
//
//   - one that died during a check (its process exited before the probe
//     was sent, or the probe could not connect) fails that check,
//     whatever its level, with the last lines of its output; the
//     robustness checks probe after each of their own calls and name
//     the call;
//   - one that the probe's own call ended (the process was running when
//     the probe was sent and exited during it; for a driver the suite
//     did not start, the connection broke during the call) leaves the
//     check it followed as it was, passed or not, and is reported by
//     robust.liveness-probe, which names the check the probe followed
//     and the time since the driver last registered. It is reported
//     even when Config.Only leaves it out (not when Skip names it);
//   - one that exited after the last check and its probe answered fails
//     that check ("exited right after this check").
//
// Either way the driver is restarted and registered again for the next
// check; when that is not possible, the run ends at once
// ([Report].Aborted). Calls to a driver the suite started end as soon as
// it exits, otherwise after Config.CallTimeout.
//
// # Slices around restarts
//
// The suite allocates its claims, as the scheduler does, from the
// driver's ResourceSlices: it reads them once their pools are complete
// (slices.published) and again after every restart of the driver (the
// restart fixture's kill -9, and a restart after a crash). After a
// restart it waits until every pool is complete and the new process has
// published: a pool's generation changed, or 5 s passed since the
// driver registered again (a driver that publishes the same slices
// leaves them alone; kubeletplugin's slice controller writes them about
// a second after start). Claims allocated from then on name the devices
// the new process publishes; restart.device-names compares those with
// the devices published before the restart. A restarted driver whose
// pools stay incomplete for Config.PublishTimeout leaves the suite on
// the slices it had.
//
// Claims that ask for any device take, in each slice, the devices that
// consume no counters first, then those that consume the smallest share
// of their counter sets: a partitionable driver lists each card's whole
// device first, and the suite's first claims would otherwise take whole
// cards and leave nothing for the checks after them. A claim that does
// not fit says which devices the suite's claims hold and why nothing
// fits (package explain, from the same allocator).
//
// # Proof that it passes correct drivers
//
// The test driver in internal/testdriver is built directly on
// k8s.io/dynamic-resource-allocation/kubeletplugin. Each correct variant
// below behaves differently in a way the protocol allows and the kubelet
// accepts; the suite's tests assert that none fails a MUST check and
// exactly which checks skip or warn (false positives: 0 of 13):
//
//	variant             what it does                                          not passing
//	full                4 devices, 3 partitions, 1 shared device, health      -
//	one-device          a single plain device, no health service              skips: counters, shared, request-names,
//	                                                                          concurrent, extra-claims, health
//	one-shared-device   a single device that allows multiple allocations      skips: counters, device-in-use, extra-claims,
//	                                                                          health
//	omit-share-id       returns no share ID (api.proto: optional)             allocation.share-id warns (SHOULD)
//	no-request-policy   shared device without a request policy                -
//	counters-only       every device consumes counters                        skips: every-device (plain), shared, share-id,
//	                                                                          concurrent, extra-claims
//	pods-only           prepares only claims reserved for a pod on its node   -
//	no-cdi              returns no devices, writes no CDI spec (NRI)          skips: share-id, cdi-ids-format,
//	                                                                          cdi-resolve, cdi-inject, cdi-env
//	health-empty        health reports that name no device                    health.coverage warns (SHOULD),
//	                                                                          health.refresh skips
//	names-if-needed     request names only for claims with two requests       -
//	                    (api.proto: an empty list means all requests)
//	shared-spec         all claims' CDI devices in one spec file that stays,  -
//	                    with a static device (cleanup is judged by content)
//	pcie-root-list      pcieRoot as a list of two roots, with                 -
//	                    Config.FeatureGates[DRAListTypeAttributes]
//	cards               two partitionable cards, each listing its whole       skips: every-device (plain), shared,
//	                    device first, then two halves; one extra claim        share-id, concurrent
//	                    for one device (it fits next to the main claims,
//	                    which take halves)
//
// The full variant run by the test itself, with restart and CDI hooks in
// place of StartCommand and CDIDirs (as for a DaemonSet pod), passes every
// check; so does the test driver deployed as a DaemonSet pod on the local
// real node, restarted by deleting its pod (TestDaemonSet, which runs with
// DRAKIT_CONFORMANCE_DAEMONSET=1 as it needs the one real node a host
// has).
//
// # Proof that it has teeth
//
// Started with -defect NAME the test driver has one defect, and the
// suite's tests assert that the named check catches it (fail for MUST,
// warn for SHOULD; defects caught: 28 of 28), and, for those marked
// alone, that no other check fails:
//
//	defect                   what is wrong                                        caught by
//	forget-on-restart        prepared claims kept in memory only                  restart.unprepare
//	non-idempotent           new CDI device name on every prepare                 prepare.idempotent
//	wrong-request-names      names a request the device was not allocated for     prepare.request-names
//	missing-request-names    returns no request names                             prepare.request-names
//	  (one shared device)    the same, with one shared device only                prepare.request-names
//	cdi-unresolvable         CDI ID that no spec defines                          prepare.cdi-resolve
//	bad-cdi-id               CDI ID not of the form vendor/class=name             prepare.cdi-ids-format
//	bad-attributes           pciBusID as int, numaNode as string                  slices.standard-attributes
//	unprepare-unknown-fails  error when unpreparing an unknown claim              unprepare.unknown-claim
//	crash-on-empty           crashes on a prepare request with no claims          robust.empty-request
//	no-guard                 hands a device in use to a second claim              prepare.device-in-use (SHOULD)
//	leak-cdi                 leaves the claim's CDI spec behind                   unprepare.cleanup
//	wrong-device             returns a device name that was not allocated         prepare.devices-match
//	skip-claim               answers only the first claim of a request            prepare.result-per-claim
//	admin-guard              refuses admin-access claims on devices in use        allocation.admin-access
//	other-driver             prepares other drivers' allocation results           robust.other-driver
//	broken-counters          device consumes more than its counter set holds      slices.counters
//	health-unknown-device    health report names an unpublished device            health.initial-report (SHOULD)
//	health-stale             health sent once, never refreshed                    health.refresh (SHOULD)
//	health-silent            health stream open, no initial report                health.coverage (SHOULD)
//	drop-share-id            leaves out the share ID of a shared device           allocation.share-id (SHOULD)
//	colliding-env            every device of a claim sets the same variable       prepare.cdi-env
//	leak-cdi-entry           (shared-spec) leaves a claim's devices in the        unprepare.cleanup
//	                         shared spec file
//	restart-new-edits        same CDI IDs, other edits after a restart            restart.still-prepared
//	unstable-names           device names change at every start                   restart.device-names (alone)
//	health-unknown-refresh   Healthy once, then only Unknown (a runtime whose     health.refresh (SHOULD)
//	                         health source went quiet)
//	crash-before-prepare     crashes on an unprepare that comes before its first  robust.liveness-probe (alone:
//	                         prepare since it started                             the checks the probes followed
//	                                                                              pass)
//	env-per-share            one CDI device for two shares of one device in a     prepare.cdi-env (alone)
//	                         claim, one variable name set once per share
//
// # Run time
//
// Measured on a 2-core machine shared with other work, against the test
// driver and a local control plane: a full run takes 4 to 6 s on a quiet
// machine (about 1 s waiting for the first ResourceSlices, 1 s for kill
// -9, restart and registration, 1 s collecting the initial health
// reports, then up to the devices' health check timeout, 2 s here, for
// health.refresh). After a restart the suite waits up to 5 s for the new
// process's slices (the full 5 s for a driver that republishes the same
// slices), the wait restart.device-names made before. A driver that
// crashes adds a restart, and those 5 s, per crash (crash-before-prepare:
// 7 crashes). "go test ./conformance -run TestDrivers" runs 45 of them
// side by side (13 correct variants, 28 defect runs, 4 runner tests).
// A driver with the kubelet's default health timeout (30 s) makes
// health.refresh wait up to 35 s (Config.HealthWait).
//
// # Limits
//
// Cluster mode compares environment variables only, not device nodes or
// mounts, and its pods use the host's network. It tells a pod's CDI
// devices from those of other pods starting at the same time by the
// claim UIDs in their names or file names (a driver that names them
// otherwise is judged by every CDI device that appeared meanwhile).
// pod.restart-device-names judges the slices once the driver's pools
// changed generation, or 10 s after the new driver pod is ready (or the
// restart hook returned).
//
// An API server's refusal of the driver's slices is read from the output
// of a driver the suite started (client-go's message for an Invalid or
// Forbidden ResourceSlice); for a driver it did not start,
// slices.published says only that no complete pool came.
//
// The suite cannot tell a prepare that did real work from one that did
// not: it checks what the protocol shows (answers, CDI specs, the devices
// they define and what those inject into a container). Cleanup is judged
// by the CDI devices a prepare defined, not by file names: a spec file
// shared by claims may stay, a claim's entries in it may not. Files a driver keeps outside the CDI folders are not
// checked for cleanup, and files another program writes into the CDI
// folders while a claim is prepared would be blamed on the driver.
// Errors for bad claims are accepted either as a whole-call gRPC error
// (what kubeletplugin does) or as a per-claim error. A driver whose
// devices need binding conditions is allocated but not prepared device by
// device.
package conformance
