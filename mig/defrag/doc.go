// Package defrag is NVIDIA MIG's layer over package partition/defrag,
// the vendor-neutral defragmenter controller: it makes room for a large
// MIG device by moving one or two restartable pods (mig.Defragment on a
// live cluster). Vendor gives partition/defrag mig's names: the
// controller's names in the cluster under Domain (the opt-in annotation
// AnnotationDefrag, TaintKey, LabelOperation, AnnotationOperation,
// Component), a GPU's scheme from its product attribute (mig.AttrProduct
// read by mig.Lookup), mig.DefaultProfiles, and "GPU" in Events. Deployed
// clusters and the NVIDIA chart's admission policy rely on these names;
// they do not change.
//
// New is partition/defrag's New with Vendor; Flags are the controller's
// command-line flags. The other names are partition/defrag's under
// their old names (deprecated aliases).
//
// The NVIDIA chart's ClusterRole grants exactly the API access that
// docs/defrag.md lists, and its ValidatingAdmissionPolicy limits the
// writes to what the controller owns (the names above).
//
// `drakit mig defrag-controller` runs it from the command line, and the
// reference NVIDIA driver's image runs it as `nvidia-dra-driver
// defrag-controller` in the chart's Deployment (value defrag.enabled,
// off by default). docs/defrag.md explains the design.
package defrag
