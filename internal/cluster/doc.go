// Package cluster runs a real local Kubernetes 1.37 cluster for drakit's
// tests, demo and CLI: etcd, kube-apiserver, kube-scheduler and
// kube-controller-manager on 127.0.0.1 with their own PKI and RBAC, and
// optionally a real node (kubelet + containerd + runc, CDI enabled).
//
// The binaries come from "drakit setup" (which hack/setup.sh runs): it
// builds them once from the Go module proxy into the cache folder (see
// [BinDir]). Every process Start launches is stopped by PID in
// [Cluster.Stop]; the kubelet's changes to the host are undone there too
// (by the last node to stop). Ports are chosen free at start, so control
// planes run side by side. Real nodes run side by side too, up to
// [DefaultNodeSlots] ($DRAKIT_NODE_SLOTS): each takes a node slot, a lock
// that its kubelet and containerd hold while they run, with a cgroup root
// of its own; Start waits for a free slot.
package cluster
