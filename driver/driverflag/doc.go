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
// --plugin-data-dir, --cdi-dir, --http-address and klog's flags (-v for
// the log verbosity). Unset folder flags leave the kubelet's defaults to
// the driver runtime. [LoadRESTConfig] is the client configuration on its
// own, for programs that have flags of their own.
package driverflag
