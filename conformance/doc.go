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
// runtime applies the CDI edits; each container prints the environment
// its first process got (/proc/<pid>/environ, hex-encoded by od, so that
// names a shell drops and values with newlines arrive intact), and the
// one its shell passes on. The run starts once the driver's pools on the
// node are complete (ClusterConfig.PublishTimeout), as socket mode's
// does.
// [ClusterChecks] lists what is judged: the pods run; each container
// sees its devices' edits and no other claim's or request's; two
// devices of a claim do not overwrite each other's variables (nor, as
// advice, the devices of a pod's two claims); both pods
// of a shared claim see the same; the variables have names a shell can
// read (advice); deleting the pods unprepares (the CDI
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
//	  (renamed 15 s late)    restart.device-names        pod.restart-device-names (judged on the new
//	                                                     process's write, not 10 s after its pod ran)
//	env-name-uid             prepare.cdi-env-names warns pod.env-names warns (the container's process
//	                                                     gets CONFORMANCE_<uid>, its shell drops it)
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
//	share-amount-env         prepare.cdi-env             no share of a device that allows multiple
//	share-env-index          allocation.share-env warns  allocations on purpose
//	two-shares-max           allocation.shared
//	unprepare-device-shares  allocation.share-unprepare
//	restart-forget-shares    restart.shares
//	wrong-share-id           allocation.share-id warns   only the PodResources API shows share IDs
//	slow-crash               robust.liveness-probe       as crash-before-prepare
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
// Cluster mode is also run, correct, against drivers whose verdicts
// once rested on a guess about time: one that publishes 20 s after it
// starts, with the run started as soon as its pod runs (pod.starts
// failed at once, on no slices), and one restarted by a restart command
// that starts the new driver in the background (the suite waited for
// the command's output, which the new driver holds, and hung). Those
// cases and env-name-uid run again under CPU load (a busy process per
// core) and get the same verdicts; the slow renamer does so in socket
// mode (its pods take minutes through a restart on a busy node).
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
// counters-only, pcie-root-list and static-share-cdi change nothing a
// pod sees: no cluster check allocates a device that allows multiple
// allocations on purpose, and none reads slice contents.
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
// driver that stopped serving is blamed on the call that ended it, read
// from what the call saw, not from how long the process took to exit (a
// panic dump on a loaded machine takes seconds):
//
//   - one that died during a check (its process exited before the probe
//     was sent, or the probe could not connect: nothing listened) fails
//     that check, whatever its level, with the last lines of its output;
//     the robustness checks probe after each of their own calls and
//     name the call;
//   - one whose connection broke while the probe's own call was under
//     way (gRPC Unavailable, not a dial error nor a timeout), its
//     process not exited before the probe was sent, leaves the check it
//     followed as it was, passed or not, and is reported by
//     robust.liveness-probe, which names the check the probe followed
//     and the time since the driver last registered. It is reported
//     whatever Config.Only and Skip say: a crash is never left out;
//   - one that exited after the last check and its probe answered fails
//     that check ("exited right after this check").
//
// Either way the driver is restarted and registered again for the next
// check; when that is not possible, the run ends at once
// ([Report].Aborted). Calls to a driver the suite started end as soon as
// it exits, otherwise after Config.CallTimeout.
//
// # Hooks
//
// Config.RestartCommand and RestartDriver (and ClusterConfig's) are the
// user's, not the driver's: they run bounded (PublishTimeout; cluster
// mode: PodTimeout), a command with its output in a file rather than a
// pipe, so that a driver it starts in the background ("DRIVER &") does
// not hold the suite. A hook that fails or does not return is reported
// as the hook's failure, with its output and the file's name: the
// restart checks skip ("restarts not judged: ..."), and the run goes on
// with whatever driver serves. ReadCDICommand is bounded the same way.
//
// # Slices around restarts
//
// The suite allocates its claims, as the scheduler does, from the
// driver's ResourceSlices: it reads them once their pools are complete
// (slices.published) and again after every restart of the driver. The
// new process's publication is recognized by what the API server shows,
// not by how long the restart took: a write to the driver's slices for
// the node since the restart (a new resourceVersion or UID, or a slice
// gone), with every pool complete. After the restart fixture's kill -9
// the first allocation, and restart.device-names, wait for it. A driver
// that publishes the same devices again may write nothing
// (kubeletplugin's slice controller leaves identical slices alone):
// after Config.PublishTimeout from its registration the suite judges on
// the slices as they are, and restart.device-names says so ("not
// republished within 60s: ... judged on the slices from before the
// restart"). After a crash's restart the suite does not wait: each
// check looks once whether the new process wrote, and allocates from
// the slices there are until it did, as the scheduler would.
// restart.device-names compares the devices published before the
// restart with the new process's.
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
// exactly which checks skip or warn (false positives: 0 of 15):
//
//	variant             what it does                                          not passing
//	full                4 devices, 3 partitions, 1 shared device, health      -
//	one-device          a single plain device, no health service              skips: counters, shared, share-*,
//	                                                                          request-names, concurrent, extra-claims,
//	                                                                          restart.shares, health
//	one-shared-device   a single device that allows multiple allocations      skips: counters, device-in-use, extra-claims,
//	                                                                          health
//	omit-share-id       returns no share ID (api.proto: optional)             allocation.share-id warns (SHOULD)
//	no-request-policy   shared device without a request policy                -
//	counters-only       every device consumes counters                        skips: every-device (plain), shared, share-*,
//	                                                                          restart.shares, concurrent, extra-claims
//	pods-only           prepares only claims reserved for a pod on its node   -
//	no-cdi              returns no devices, writes no CDI spec (NRI)          skips: share-id, share-unprepare,
//	                                                                          share-env, cdi-ids-format, cdi-resolve,
//	                                                                          cdi-inject, cdi-env, cdi-env-names
//	health-empty        health reports that name no device                    health.coverage warns (SHOULD),
//	                                                                          health.refresh skips
//	names-if-needed     request names only for claims with two requests       -
//	                    (api.proto: an empty list means all requests)
//	shared-spec         all claims' CDI devices in one spec file that stays,  -
//	                    with a static device (cleanup is judged by content)
//	pcie-root-list      pcieRoot as a list of two roots, with                 -
//	                    Config.FeatureGates[DRAListTypeAttributes]
//	cards               two partitionable cards, each listing its whole       skips: every-device (plain), shared,
//	                    device first, then two halves; one extra claim        share-*, restart.shares, concurrent
//	                    for one device (it fits next to the main claims,
//	                    which take halves)
//	static-share-cdi    one static CDI device for every share of the shared   -
//	                    device (unpreparing one share must leave it)
//	republish-delay     after a restart publishes the same devices 10 s       - (restart.device-names says it was
//	                    after it registered (so it writes nothing)            judged on the slices from before)
//
// The full variant run by the test itself, with restart and CDI hooks in
// place of StartCommand and CDIDirs (as for a DaemonSet pod), passes every
// check; so does the test driver deployed as a DaemonSet pod on the local
// real node, restarted by deleting its pod (TestDaemonSet, which runs with
// DRAKIT_CONFORMANCE_DAEMONSET=1 as it needs a real node, of which a host
// runs two at a time).
//
// # Proof that it has teeth
//
// Started with -defect NAME the test driver has one defect, and the
// suite's tests assert that the named check catches it (fail for MUST,
// warn for SHOULD; defects caught: 38 of 38), and, for those marked
// alone, that no other check fails. A case not marked alone reports its
// check only (Config.Only), which sets up what it needs:
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
//	slow-unstable-names      unstable-names, and after a restart the first        restart.device-names (alone:
//	                         publish 10 s after registering                       robust.still-serving passes)
//	slow-crash               crashes like crash-before-prepare, its process       robust.liveness-probe (alone)
//	                         lingering 3 s after its connections broke
//	crash-before-prepare     the same, with Config.Skip robust                    robust.liveness-probe
//	  (robust skipped)
//	share-amount-env         each share's amount under one variable name          prepare.cdi-env (alone: two
//	                                                                              unequal shares in a claim)
//	env-name-uid             a variable named after the claim UID                 prepare.cdi-env-names (SHOULD,
//	                                                                              alone)
//	two-shares-max           refuses a third share of a device                    allocation.shared
//	unprepare-device-shares  unpreparing one share tears down every share         allocation.share-unprepare
//	restart-forget-shares    checkpoints one claim per shared device              restart.shares
//	wrong-share-id           returns the claim UID as share ID                    allocation.share-id (SHOULD,
//	                                                                              alone)
//	share-env-index          a share's variable named by its place in its claim   allocation.share-env (SHOULD,
//	                                                                              alone)
//
// The cases whose verdicts once rested on a guess about time
// (slow-unstable-names, slow-crash, crash-before-prepare with robust
// skipped, share-amount-env, env-name-uid, the republish-delay variant,
// and a restart command that starts the driver in the background) run
// again under CPU load, a busy process per core (TestDrivers/load), and
// get the same verdicts.
//
// # Run time
//
// Measured on a 2-core machine shared with other work, against the test
// driver and a local control plane: a full run takes 4 to 6 s on a quiet
// machine plus the wait for the restarted driver's publication (about 1
// s waiting for the first ResourceSlices, 1 s for kill -9, restart and
// registration, 1 s collecting the initial health reports, then up to
// the devices' health check timeout, 2 s here, for health.refresh). A
// driver that publishes the same slices after its restart writes nothing,
// and restart.device-names waits Config.PublishTimeout for a write
// before it judges the slices from before (30 s in the suite's tests,
// 60 s by default; --publish-timeout). A crash's restart adds no such
// wait. "go test ./conformance -run TestDrivers" runs 15 correct
// variants and 38 defect cases side by side (the defects not marked
// alone report their check only), the runner tests, then the
// time-sensitive cases again under CPU load. A driver with the kubelet's
// default health timeout (30 s) makes health.refresh wait up to 35 s
// (Config.HealthWait).
//
// # Limits
//
// Cluster mode compares environment variables only, not device nodes or
// mounts, and its pods use the host's network. It tells a pod's CDI
// devices from those of other pods starting at the same time by the
// claim UIDs in their names or file names (a driver that names them
// otherwise is judged by every CDI device that appeared meanwhile).
// pod.restart-device-names judges the slices once the API server shows
// the new process's write, or, for a driver that writes nothing,
// ClusterConfig.PublishTimeout after the new driver pod is ready (or
// the restart hook returned), and says which.
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
