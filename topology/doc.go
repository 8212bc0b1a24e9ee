// Package topology provides standard, portable topology keys for devices
// and nodes, so that one workload manifest asks for "a GPU and a NIC on one
// PCIe root" or "a gang in one rack" the same way on every cluster.
//
// # Device topology
//
// Kubernetes defines three standard device attributes; a DRA driver that
// publishes them lets users align devices across drivers:
//
//	resource.kubernetes.io/pciBusID  string  "0000:3b:00.0"  the PCI address
//	resource.kubernetes.io/pcieRoot  string  "pci0000:3a"    the PCIe root complex
//	resource.kubernetes.io/numaNode  int     1               the NUMA node (absent when none)
//
// ReadPCIDevice reads all three for a PCI device from sysfs, on top of
// k8s.io/dynamic-resource-allocation/deviceattribute, and returns them as
// resource.k8s.io/v1 DeviceAttributes. Missing or malformed sysfs entries
// are errors (ErrDeviceNotFound, ErrBadSysfs) that name the entry; a device
// whose numa_node is -1 gets no numaNode attribute, as the standard demands.
// Package topologytest builds fake sysfs trees for tests.
//
// # Aligned allocation
//
// SamePCIeRoot, SameNUMANode and SameAttribute build matchAttribute
// constraints; ClaimSpec, Claim and ClaimTemplate put them in
// resource.k8s.io/v1 objects and YAML renders those for kubectl. The
// scheduler then allocates only devices whose attribute values are equal,
// and leaves the pod pending when no such set is free.
//
// # Node topology hierarchy
//
// Gang scheduling (a scheduling.k8s.io/v1beta1 PodGroup with
// schedulingConstraints.topology) keeps a group of pods within one value of
// a node label. drakit defines one hierarchy of such labels, widest first,
// reusing the Kubernetes well-known labels where they exist:
//
//	level                label key                                nodes with one value share
//	region               topology.kubernetes.io/region            a region or site
//	zone                 topology.kubernetes.io/zone              an availability zone
//	superblock           topology.drakit.dev/superblock           a third-tier (core / super-spine) switch layer
//	block                topology.drakit.dev/block                a second-tier (spine / aggregation) switch layer
//	rack                 topology.drakit.dev/rack                 a first-tier (leaf / top-of-rack) switch
//	interconnect-domain  topology.drakit.dev/interconnect-domain  an accelerator scale-up fabric (e.g. an NVLink domain)
//	host                 kubernetes.io/hostname                   one node (the kubelet sets it; drakit never writes it)
//
// The interconnect domain is its own dimension: an NVLink domain is usually
// one rack, but nothing requires it to be nested in the network levels.
// PodGroupTopology(LevelRack) gives the PodGroup constraint for a level, and
// PodGroup a whole gang PodGroup keyed by it.
//
// # Mapping from cloud and vendor labels
//
// Clouds and vendors label nodes with their own keys today. A Labeler maps
// them to the standard ones; for a level, the first row (in this order)
// whose label a node has gives the value. Facts a driver or admin knows
// (WithFact) win over every row, and WithMapping adds rows of one's own in
// front of these.
//
//	source label                              level                source
//	failure-domain.beta.kubernetes.io/region  region               Kubernetes (deprecated beta label)
//	failure-domain.beta.kubernetes.io/zone    zone                 Kubernetes (deprecated beta label)
//	topology.k8s.aws/network-node-layer-1     superblock           AWS EKS: top of the EC2 network hierarchy
//	topology.k8s.aws/network-node-layer-2     block                AWS EKS: middle layer
//	topology.k8s.aws/network-node-layer-3     rack                 AWS EKS: bottom layer on 3-layer instance types
//	cloud.google.com/gce-topology-block       block                Google Cloud GKE: reservation block
//	cloud.google.com/gce-topology-subblock    rack                 Google Cloud GKE: sub-block of a block
//	nvidia.com/gpu.clique                     interconnect-domain  NVIDIA GPU feature discovery / DRA driver: NVLink clique
//	accelerator.topograph.run/domain          interconnect-domain  NVIDIA Topograph v1
//	fabric.topograph.run/tier-0               rack                 NVIDIA Topograph v1: switch tier closest to the node
//	fabric.topograph.run/tier-1               block                NVIDIA Topograph v1
//	fabric.topograph.run/tier-2               superblock           NVIDIA Topograph v1
//	topology.nebius.com/tier-0                interconnect-domain  Nebius AI Cloud: multi-node NVLink, where present
//	topology.nebius.com/tier-1                rack                 Nebius AI Cloud: rack-level (leaf) InfiniBand switches
//	topology.nebius.com/tier-2                block                Nebius AI Cloud: spine-level switches
//	network.topology.nvidia.com/accelerator   interconnect-domain  NVIDIA Topograph before v1
//	network.topology.nvidia.com/leaf          rack                 NVIDIA Topograph before v1
//	network.topology.nvidia.com/spine         block                NVIDIA Topograph before v1
//	network.topology.nvidia.com/core          superblock           NVIDIA Topograph before v1
//
// Not mapped, on purpose: topology.k8s.aws/network-node-layer-4 (present
// only on 4-layer EC2 instance types, finer than layer 3; on those types
// rack is coarser than it could be) and cloud.google.com/gce-topology-host
// (the physical machine under a VM, not the node), and
// topology.nebius.com/gpu-cluster-id (an InfiniBand fabric, which has no
// level of its own here). Azure (AKS) sets no network-topology node label:
// VMs share an InfiniBand fabric only within a placement group, which the
// VM's Instance Metadata Service reports; a driver or admin that reads it
// passes it with WithFact (LevelSuperblock: one fabric). Values are copied
// verbatim, so a source must give IDs that are unique across the cluster
// at its level (the hashed IDs of AWS and Google Cloud are).
//
// # Ownership
//
// Labeler.Plan and LabelNode add missing standard labels and record the
// labels they wrote in the node annotation topology.drakit.dev/owned-labels.
// Only those owned labels are ever updated or removed; a standard label
// someone else set is left alone, and a disagreeing source is reported as a
// Conflict. The command "drakit topology labels" runs this as a dry run
// unless told --apply.
package topology
