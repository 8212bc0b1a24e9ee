// Package cluster runs a real local Kubernetes 1.37 cluster for drakit's
// tests, demo and CLI: etcd, kube-apiserver, kube-scheduler and
// kube-controller-manager on 127.0.0.1 with their own PKI and RBAC, and
// optionally a real node (kubelet + containerd + runc, CDI enabled).
//
// The binaries come from "drakit setup" (which hack/setup.sh runs): it
// builds them once from the Go module proxy into the cache folder (see
// [BinDir]). Every process Start launches is stopped by PID in
// [Cluster.Stop]; the kubelet's changes to the host are undone there too. Ports are chosen free at start, so two
// control planes can run side by side; a real node takes a host-wide lock
// because a kubelet owns host-global state (cgroups, iptables chains).
package cluster
