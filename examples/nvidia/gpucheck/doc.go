// Package gpucheck is the container half of examples/nvidia/nvml/gpu-check.sh,
// the read-only check of the reference NVIDIA driver on a real GPU node:
// it makes a container the way a container runtime does from the
// driver's own CDI spec (the one `nvidia-dra-driver -check
// -check-cdi-dir` writes for a claim on a full GPU or an existing MIG
// device) and runs a small CUDA driver-API program in it.
//
// The container's root file system is the driver's image, unpacked
// (ociimage.Unpack); the CDI library (tags.cncf.io/container-device-interface,
// through drakit's cdi.Inject) applies the spec's edits (device nodes,
// mounts, environment, hooks) to an OCI runtime spec, and runc runs the
// bundle. The program, cuda-probe (ProbeSource, built by BuildProbe with
// the machine's C compiler), loads libcuda.so.1 with dlopen, which the
// spec mounts from the driver root, calls cuInit, cuDeviceGetCount and
// cuDeviceGetName, and prints what it sees.
//
// Without a GPU the same container is made against a fake driver root
// whose libcuda.so.1 is StandInCUDASource (BuildStandInCUDA): it reports
// the /dev/nvidia<N> nodes it finds in the container as devices, so what
// the probe prints shows which of the spec's edits reached the container.
package gpucheck
