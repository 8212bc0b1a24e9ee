// Package driverflag gives every drakit driver the same command line and
// the same way to reach the API server, so that a driver's main is a few
// lines and behaves like every other Kubernetes component:
//
//	std := driverflag.Register(flag.CommandLine)
//	flag.Parse()
//	opts, err := std.Options() // node name, client, folders, HTTP address
//	if err != nil { ... }
//	d, err := driver.New("gpu.example.com", append(opts,
//		driver.WithDiscoverer(myDiscoverer), driver.WithPreparer(myPreparer))...)
//
// The flags are --node-name (default $NODE_NAME), --kubeconfig (default
// $KUBECONFIG, then the in-cluster config), --registrar-dir,
// --plugin-data-dir, --cdi-dir, --http-address, --feature-gates and
// component-base's logging flags, those of every Kubernetes component:
// --logging-format=text|json, -v, --vmodule. Unset folder flags leave the
// kubelet's defaults to the driver runtime. A driver's own feature gates
// (with their stage, alpha or beta) go into the same --feature-gates:
//
//	std := driverflag.Register(flag.CommandLine)
//	std.AddFeatureGates(map[featuregate.Feature]featuregate.FeatureSpec{
//		"PartitionedHalves": {Default: false, PreRelease: featuregate.Alpha},
//	})
//	flag.Parse()
//	opts, err := std.Options() // applies the logging flags too
//	if std.FeatureGate.Enabled("PartitionedHalves") { ... }
//
// The logging and gate packages of k8s.io/component-base (and zap, for
// JSON) come with this package, not with package driver. [LoadRESTConfig] is the client configuration on its
// own, for programs that have flags of their own.
package driverflag
