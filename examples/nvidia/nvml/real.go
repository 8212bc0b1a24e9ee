//go:build cgo

package nvml

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/drakit/drakit/mig"
)

// Real is the backend on the host's NVIDIA driver: libnvidia-ml.so.1,
// loaded at OpenReal through github.com/NVIDIA/go-nvml. Calls that change
// MIG state need root or CAP_SYS_ADMIN.
type Real struct {
	lib gonvml.Interface
}

var (
	_ Interface  = (*Real)(nil)
	_ ModeSetter = (*Real)(nil)
)

// Library returns the go-nvml library Real calls, initialized, for code
// that needs more of NVML than Interface has (nvidia-container-toolkit's
// nvcdi in examples/nvidia/cuda).
func (r *Real) Library() gonvml.Interface { return r.lib }

// NewReal is the backend on lib, a go-nvml library its caller loaded and
// initialized (go-nvml's mock servers in tests, a program that loads
// NVML its own way); Close shuts lib down. It exists in cgo
// builds only, as go-nvml does.
func NewReal(lib gonvml.Interface) *Real { return &Real{lib: lib} }

// RealOption configures OpenReal.
type RealOption func(*realOptions)

type realOptions struct{ libraryPath string }

// WithLibraryPath loads NVML from path instead of the default
// "libnvidia-ml.so.1" found by the dynamic loader.
func WithLibraryPath(path string) RealOption {
	return func(o *realOptions) { o.libraryPath = path }
}

// OpenReal loads and initializes NVML. Without an NVIDIA driver it fails
// with an error that wraps ErrLibraryNotFound, gives the dynamic loader's
// reason and says how to run the simulator instead; where the library is
// there but a library it needs is not, the error names both.
func OpenReal(opts ...RealOption) (*Real, error) {
	var o realOptions
	for _, opt := range opts {
		opt(&o)
	}
	var lopts []gonvml.LibraryOption
	lib := "libnvidia-ml.so.1"
	if o.libraryPath != "" {
		lopts = append(lopts, gonvml.WithLibraryPath(o.libraryPath))
		lib = o.libraryPath
	}
	r := &Real{lib: gonvml.New(lopts...)}
	switch ret := r.lib.Init(); ret {
	case gonvml.SUCCESS:
		return r, nil
	case gonvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, loadError(lib)
	default:
		return nil, nvErr(ret, "initialize NVML")
	}
}

// nvErr turns an NVML return code into an *Error; nil for SUCCESS.
func nvErr(ret gonvml.Return, op string, args ...any) error {
	if ret == gonvml.SUCCESS {
		return nil
	}
	if len(args) > 0 {
		op = fmt.Sprintf(op, args...)
	}
	return &Error{Op: op, Code: Return(ret), Detail: gonvml.ErrorString(ret)}
}

// skippable reports the codes NVML gives for a profile index the GPU or
// the driver does not have.
func skippable(ret gonvml.Return) bool {
	return ret == gonvml.ERROR_NOT_SUPPORTED || ret == gonvml.ERROR_INVALID_ARGUMENT
}

func cString(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

func (r *Real) device(gpu int) (gonvml.Device, error) {
	d, ret := r.lib.DeviceGetHandleByIndex(gpu)
	return d, nvErr(ret, "get GPU %d", gpu)
}

// System reports the driver version and the CUDA version the driver
// supports.
func (r *Real) System() (System, error) {
	drv, ret := r.lib.SystemGetDriverVersion()
	if err := nvErr(ret, "get driver version"); err != nil {
		return System{}, err
	}
	cuda, ret := r.lib.SystemGetCudaDriverVersion()
	if err := nvErr(ret, "get CUDA version"); err != nil {
		return System{}, err
	}
	return System{
		DriverVersion: drv,
		CUDAVersion:   fmt.Sprintf("%d.%d", cuda/1000, cuda%1000/10),
	}, nil
}

var brands = map[gonvml.BrandType]string{
	gonvml.BRAND_QUADRO:              "Quadro",
	gonvml.BRAND_TESLA:               "Tesla",
	gonvml.BRAND_NVS:                 "NVS",
	gonvml.BRAND_GRID:                "Grid",
	gonvml.BRAND_GEFORCE:             "GeForce",
	gonvml.BRAND_TITAN:               "Titan",
	gonvml.BRAND_NVIDIA_VAPPS:        "NVIDIA Virtual Applications",
	gonvml.BRAND_NVIDIA_VPC:          "NVIDIA Virtual PC",
	gonvml.BRAND_NVIDIA_VCS:          "NVIDIA Virtual Compute Server",
	gonvml.BRAND_NVIDIA_VWS:          "NVIDIA RTX Virtual Workstation",
	gonvml.BRAND_NVIDIA_CLOUD_GAMING: "NVIDIA Cloud Gaming",
	gonvml.BRAND_QUADRO_RTX:          "Quadro RTX",
	gonvml.BRAND_NVIDIA_RTX:          "NVIDIA RTX",
	gonvml.BRAND_NVIDIA:              "NVIDIA",
	gonvml.BRAND_GEFORCE_RTX:         "GeForce RTX",
	gonvml.BRAND_TITAN_RTX:           "Titan RTX",
}

var architectures = map[gonvml.DeviceArchitecture]string{
	gonvml.DEVICE_ARCH_KEPLER:    "Kepler",
	gonvml.DEVICE_ARCH_MAXWELL:   "Maxwell",
	gonvml.DEVICE_ARCH_PASCAL:    "Pascal",
	gonvml.DEVICE_ARCH_VOLTA:     "Volta",
	gonvml.DEVICE_ARCH_TURING:    "Turing",
	gonvml.DEVICE_ARCH_AMPERE:    "Ampere",
	gonvml.DEVICE_ARCH_ADA:       "Ada",
	gonvml.DEVICE_ARCH_HOPPER:    "Hopper",
	gonvml.DEVICE_ARCH_BLACKWELL: "Blackwell",
	gonvml.DEVICE_ARCH_RUBIN:     "Rubin",
}

// GPUs lists the GPUs NVML sees, in index order. A GPU NVML cannot
// read (GPU_IS_LOST, a failed query) is listed with GPU.Err set and the
// facts read before the failure; only a failed count fails the call.
func (r *Real) GPUs() ([]GPU, error) {
	n, ret := r.lib.DeviceGetCount()
	if err := nvErr(ret, "count GPUs"); err != nil {
		return nil, err
	}
	out := make([]GPU, 0, n)
	for i := range n {
		g, err := r.gpu(i)
		g.Index, g.Err = i, err
		out = append(out, g)
	}
	return out, nil
}

// gpu reads GPU i's facts; on an error it returns those read before.
func (r *Real) gpu(i int) (GPU, error) {
	g := GPU{Index: i}
	d, err := r.device(i)
	if err != nil {
		return g, err
	}
	var ret gonvml.Return
	if g.UUID, ret = d.GetUUID(); ret != gonvml.SUCCESS {
		return g, nvErr(ret, "get UUID of GPU %d", i)
	}
	if g.ProductName, ret = d.GetName(); ret != gonvml.SUCCESS {
		return g, nvErr(ret, "get name of GPU %d", i)
	}
	if b, ret := d.GetBrand(); ret == gonvml.SUCCESS {
		g.Brand = brands[b]
	}
	if a, ret := d.GetArchitecture(); ret == gonvml.SUCCESS {
		g.Architecture = architectures[a]
	}
	major, minor, ret := d.GetCudaComputeCapability()
	if ret != gonvml.SUCCESS {
		return g, nvErr(ret, "get compute capability of GPU %d", i)
	}
	g.CUDAComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	mem, ret := d.GetMemoryInfo()
	if ret != gonvml.SUCCESS {
		return g, nvErr(ret, "get memory of GPU %d", i)
	}
	g.MemoryMiB = int64(mem.Total / (1 << 20))
	pci, ret := d.GetPciInfo()
	if ret != gonvml.SUCCESS {
		return g, nvErr(ret, "get PCI info of GPU %d", i)
	}
	g.PCIBusID = PCIBusID(cString(pci.BusId[:]))
	if g.Minor, ret = d.GetMinorNumber(); ret != gonvml.SUCCESS {
		return g, nvErr(ret, "get minor number of GPU %d", i)
	}
	return g, nil
}

// MigMode reports the GPU's MIG mode; ErrNotSupported on a GPU without
// MIG.
func (r *Real) MigMode(gpu int) (MigMode, error) {
	d, err := r.device(gpu)
	if err != nil {
		return MigMode{}, err
	}
	cur, pend, ret := d.GetMigMode()
	if err := nvErr(ret, "get MIG mode of GPU %d", gpu); err != nil {
		return MigMode{}, err
	}
	return MigMode{
		Current: cur == gonvml.DEVICE_MIG_ENABLE,
		Pending: pend == gonvml.DEVICE_MIG_ENABLE,
	}, nil
}

// SetMigMode requests MIG mode enabled (nvmlDeviceSetMigMode, which
// also tries to activate it by resetting the GPU) and returns the mode
// after the call. A change NVML could not activate (the GPU is busy, an
// A100 that needs a reset, a passthrough GPU that needs a VM reboot)
// stays pending: Pending is enabled and Current is not.
func (r *Real) SetMigMode(gpu int, enabled bool) (MigMode, error) {
	d, err := r.device(gpu)
	if err != nil {
		return MigMode{}, err
	}
	mode := gonvml.DEVICE_MIG_DISABLE
	if enabled {
		mode = gonvml.DEVICE_MIG_ENABLE
	}
	// The activation status says why a change is still pending; the
	// mode read back says whether it is, which is what the caller acts on.
	_, ret := d.SetMigMode(mode)
	if err := nvErr(ret, "set MIG mode of GPU %d to %v", gpu, enabled); err != nil {
		return MigMode{}, err
	}
	return r.MigMode(gpu)
}

// ResetGPU cannot reset a GPU through NVML (nvidia-smi does it with
// privileges NVML does not expose): a pending MIG mode on a real GPU is
// made current by an administrator. It retries the activation once
// (nvmlDeviceSetMigMode with the pending mode resets the GPU when it is
// idle) and fails with ErrNotSupported, saying what to do, when the mode
// is still pending.
func (r *Real) ResetGPU(gpu int) error {
	m, err := r.MigMode(gpu)
	if err != nil {
		return err
	}
	if m.Current == m.Pending {
		return nil
	}
	if m, err = r.SetMigMode(gpu, m.Pending); err != nil {
		return err
	}
	if m.Current != m.Pending {
		return NewError(
			ErrorNotSupported,
			fmt.Sprintf("reset GPU %d", gpu),
			"MIG mode %v is pending and NVML could not activate it: stop the processes that use "+
				"the GPU, then reset it (nvidia-smi -r -i %d) or reboot the node",
			m.Pending,
			gpu,
		)
	}
	return nil
}

// giProfile is a GPU instance profile with the NVML info struct the
// create and list calls take.
type giProfile struct {
	info gonvml.GpuInstanceProfileInfo
	name string
}

// giProfiles queries every GPU instance profile index NVML defines; the
// ones the GPU lacks answer NOT_SUPPORTED or INVALID_ARGUMENT.
func (r *Real) giProfiles(d gonvml.Device, gpu int) ([]giProfile, error) {
	var out []giProfile
	for i := range gonvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := d.GetGpuInstanceProfileInfo(i)
		if skippable(ret) {
			continue
		}
		if err := nvErr(ret, "get GPU instance profile %d of GPU %d", i, gpu); err != nil {
			return nil, err
		}
		if info.InstanceCount == 0 {
			continue // defined, but not creatable in the GPU's current mode
		}
		p := giProfile{info: info}
		if v3, ret := d.GetGpuInstanceProfileInfoV(i).V3(); ret == gonvml.SUCCESS {
			p.name = cString(v3.Name[:])
		} else if v2, ret := d.GetGpuInstanceProfileInfoV(i).V2(); ret == gonvml.SUCCESS {
			p.name = cString(v2.Name[:])
		}
		p.name = strings.TrimPrefix(p.name, "MIG ")
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].info.Id < out[j].info.Id })
	return out, nil
}

func (r *Real) giProfileByID(d gonvml.Device, gpu, id int) (giProfile, error) {
	ps, err := r.giProfiles(d, gpu)
	if err != nil {
		return giProfile{}, err
	}
	for _, p := range ps {
		if int(p.info.Id) == id {
			return p, nil
		}
	}
	return giProfile{}, &Error{
		Op:     fmt.Sprintf("get GPU instance profile %d of GPU %d", id, gpu),
		Code:   ErrorInvalidArgument,
		Detail: "the GPU has no such profile",
	}
}

// GPUInstanceProfiles lists the GPU's GPU instance profiles with their
// possible placements (nvmlDeviceGetGpuInstanceProfileInfo,
// nvmlDeviceGetGpuInstancePossiblePlacements).
func (r *Real) GPUInstanceProfiles(gpu int) ([]GPUInstanceProfile, error) {
	d, err := r.device(gpu)
	if err != nil {
		return nil, err
	}
	ps, err := r.giProfiles(d, gpu)
	if err != nil {
		return nil, err
	}
	out := make([]GPUInstanceProfile, 0, len(ps))
	for _, p := range ps {
		info := p.info
		pls, ret := d.GetGpuInstancePossiblePlacements(&info)
		if err := nvErr(
			ret, "get placements of GPU instance profile %d (%s) of GPU %d", info.Id, p.name, gpu,
		); err != nil {
			return nil, err
		}
		gp := GPUInstanceProfile{
			ID:            int(info.Id),
			Name:          p.name,
			SliceCount:    int(info.SliceCount),
			InstanceCount: int(info.InstanceCount),
			MemoryMiB:     int64(info.MemorySizeMB),
			Engines: mig.Engines{
				Multiprocessors: int(info.MultiprocessorCount),
				CopyEngines:     int(info.CopyEngineCount),
				Decoders:        int(info.DecoderCount),
				Encoders: int(
					info.EncoderCount,
				),
				JpegEngines: int(info.JpegCount),
				OfaEngines:  int(info.OfaCount),
			},
		}
		for _, pl := range pls {
			gp.Placements = append(
				gp.Placements,
				mig.Placement{Start: int(pl.Start), Size: int(pl.Size)},
			)
		}
		sort.Slice(
			gp.Placements,
			func(i, j int) bool { return gp.Placements[i].Start < gp.Placements[j].Start },
		)
		out = append(out, gp)
	}
	return out, nil
}

func (r *Real) gpuInstance(gpu, id int) (gonvml.GpuInstance, error) {
	d, err := r.device(gpu)
	if err != nil {
		return nil, err
	}
	gi, ret := d.GetGpuInstanceById(id)
	return gi, nvErr(ret, "get GPU instance %d of GPU %d", id, gpu)
}

// ciProfileInfos queries every compute instance profile index of a GPU
// instance (shared engines, the only engine profile NVML has).
func ciProfileInfos(
	gi gonvml.GpuInstance,
	op string,
) ([]ComputeInstanceProfile, []gonvml.ComputeInstanceProfileInfo, error) {
	var out []ComputeInstanceProfile
	var infos []gonvml.ComputeInstanceProfileInfo
	for j := range gonvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		info, ret := gi.GetComputeInstanceProfileInfo(
			j,
			gonvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
		)
		if skippable(ret) {
			continue
		}
		if err := nvErr(ret, "%s: get compute instance profile %d", op, j); err != nil {
			return nil, nil, err
		}
		cp := ComputeInstanceProfile{
			ID:            int(info.Id),
			SliceCount:    int(info.SliceCount),
			InstanceCount: int(info.InstanceCount),
		}
		if v2, ret := gi.GetComputeInstanceProfileInfoV(
			j, gonvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
		).V2(); ret == gonvml.SUCCESS {
			cp.Name = strings.TrimPrefix(cString(v2.Name[:]), "MIG ")
		}
		out = append(out, cp)
		infos = append(infos, info)
	}
	return out, infos, nil
}

// ComputeInstanceProfiles lists the compute instance profiles of a GPU
// instance (nvmlGpuInstanceGetComputeInstanceProfileInfo).
func (r *Real) ComputeInstanceProfiles(gpu, gpuInstance int) ([]ComputeInstanceProfile, error) {
	gi, err := r.gpuInstance(gpu, gpuInstance)
	if err != nil {
		return nil, err
	}
	out, _, err := ciProfileInfos(gi, fmt.Sprintf("GPU instance %d of GPU %d", gpuInstance, gpu))
	return out, err
}

// migUUIDs maps (GPU instance ID, compute instance ID) to the MIG device
// UUID, from the GPU's MIG device handles.
func migUUIDs(d gonvml.Device, gpu int) (map[[2]int]string, error) {
	n, ret := d.GetMaxMigDeviceCount()
	if err := nvErr(ret, "count MIG devices of GPU %d", gpu); err != nil {
		return nil, err
	}
	out := map[[2]int]string{}
	for i := range n {
		md, ret := d.GetMigDeviceHandleByIndex(i)
		if ret == gonvml.ERROR_NOT_FOUND || ret == gonvml.ERROR_INVALID_ARGUMENT {
			continue // an empty slot
		}
		if err := nvErr(ret, "get MIG device %d of GPU %d", i, gpu); err != nil {
			return nil, err
		}
		gi, ret := md.GetGpuInstanceId()
		if err := nvErr(ret, "get GPU instance ID of MIG device %d of GPU %d", i, gpu); err != nil {
			return nil, err
		}
		ci, ret := md.GetComputeInstanceId()
		if err := nvErr(
			ret, "get compute instance ID of MIG device %d of GPU %d", i, gpu,
		); err != nil {
			return nil, err
		}
		u, ret := md.GetUUID()
		if err := nvErr(ret, "get UUID of MIG device %d of GPU %d", i, gpu); err != nil {
			return nil, err
		}
		out[[2]int{gi, ci}] = u
	}
	return out, nil
}

func giOf(gpu int, info gonvml.GpuInstanceInfo) GPUInstance {
	return GPUInstance{
		GPU:       gpu,
		ID:        int(info.Id),
		ProfileID: int(info.ProfileId),
		Placement: mig.Placement{Start: int(info.Placement.Start), Size: int(info.Placement.Size)},
	}
}

func ciOf(info gonvml.ComputeInstanceInfo, uuids map[[2]int]string, gi int) ComputeInstance {
	return ComputeInstance{
		ID: int(info.Id), ProfileID: int(info.ProfileId),
		Placement: mig.Placement{Start: int(info.Placement.Start), Size: int(info.Placement.Size)},
		UUID:      uuids[[2]int{gi, int(info.Id)}],
	}
}

// GPUInstances lists the GPU instances of every profile with their compute
// instances and MIG UUIDs; none when MIG mode is off.
func (r *Real) GPUInstances(gpu int) ([]GPUInstance, error) {
	mode, err := r.MigMode(gpu)
	if err != nil || !mode.Current {
		return nil, err
	}
	d, err := r.device(gpu)
	if err != nil {
		return nil, err
	}
	ps, err := r.giProfiles(d, gpu)
	if err != nil {
		return nil, err
	}
	uuids, err := migUUIDs(d, gpu)
	if err != nil {
		return nil, err
	}
	var out []GPUInstance
	for _, p := range ps {
		info := p.info
		gis, ret := d.GetGpuInstances(&info)
		if err := nvErr(
			ret, "list GPU instances of profile %d on GPU %d", info.Id, gpu,
		); err != nil {
			return nil, err
		}
		for _, gi := range gis {
			ginfo, ret := gi.GetInfo()
			if err := nvErr(ret, "get GPU instance info on GPU %d", gpu); err != nil {
				return nil, err
			}
			g := giOf(gpu, ginfo)
			op := fmt.Sprintf("GPU instance %d of GPU %d", g.ID, gpu)
			_, cinfos, err := ciProfileInfos(gi, op)
			if err != nil {
				return nil, err
			}
			for _, cinfo := range cinfos {
				cis, ret := gi.GetComputeInstances(&cinfo)
				if err := nvErr(
					ret, "%s: list compute instances of profile %d", op, cinfo.Id,
				); err != nil {
					return nil, err
				}
				for _, ci := range cis {
					ii, ret := ci.GetInfo()
					if err := nvErr(ret, "%s: get compute instance info", op); err != nil {
						return nil, err
					}
					g.ComputeInstances = append(g.ComputeInstances, ciOf(ii, uuids, g.ID))
				}
			}
			sort.Slice(
				g.ComputeInstances,
				func(i, j int) bool { return g.ComputeInstances[i].ID < g.ComputeInstances[j].ID },
			)
			out = append(out, g)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Placement.Start < out[j].Placement.Start })
	return out, nil
}

// CreateGPUInstance creates a GPU instance at a placement
// (nvmlDeviceCreateGpuInstanceWithPlacement).
func (r *Real) CreateGPUInstance(gpu, profileID int, at mig.Placement) (GPUInstance, error) {
	d, err := r.device(gpu)
	if err != nil {
		return GPUInstance{}, err
	}
	p, err := r.giProfileByID(d, gpu, profileID)
	if err != nil {
		return GPUInstance{}, err
	}
	pl := gonvml.GpuInstancePlacement{Start: uint32(at.Start), Size: uint32(at.Size)}
	gi, ret := d.CreateGpuInstanceWithPlacement(&p.info, &pl)
	if err := nvErr(
		ret,
		"create GPU instance of profile %d (%s) at %d:%d on GPU %d",
		profileID,
		p.name,
		at.Start,
		at.Size,
		gpu,
	); err != nil {
		return GPUInstance{}, err
	}
	info, ret := gi.GetInfo()
	if err := nvErr(ret, "get info of the new GPU instance on GPU %d", gpu); err != nil {
		return GPUInstance{}, err
	}
	return giOf(gpu, info), nil
}

// CreateComputeInstance creates a compute instance in a GPU instance
// (nvmlGpuInstanceCreateComputeInstance) and reads its MIG UUID.
func (r *Real) CreateComputeInstance(gpu, gpuInstance, profileID int) (ComputeInstance, error) {
	gi, err := r.gpuInstance(gpu, gpuInstance)
	if err != nil {
		return ComputeInstance{}, err
	}
	op := fmt.Sprintf(
		"create compute instance of profile %d in GPU instance %d on GPU %d",
		profileID,
		gpuInstance,
		gpu,
	)
	_, infos, err := ciProfileInfos(gi, op)
	if err != nil {
		return ComputeInstance{}, err
	}
	for _, info := range infos {
		if int(info.Id) != profileID {
			continue
		}
		ci, ret := gi.CreateComputeInstance(&info)
		if err := nvErr(ret, "%s", op); err != nil {
			return ComputeInstance{}, err
		}
		ii, ret := ci.GetInfo()
		if err := nvErr(ret, "%s: get info", op); err != nil {
			return ComputeInstance{}, err
		}
		d, err := r.device(gpu)
		if err != nil {
			return ComputeInstance{}, err
		}
		uuids, err := migUUIDs(d, gpu)
		if err != nil {
			return ComputeInstance{}, err
		}
		return ciOf(ii, uuids, gpuInstance), nil
	}
	return ComputeInstance{}, &Error{
		Op:     op,
		Code:   ErrorNotSupported,
		Detail: "the GPU instance has no such compute instance profile",
	}
}

// DestroyComputeInstance destroys a compute instance
// (nvmlComputeInstanceDestroy).
func (r *Real) DestroyComputeInstance(gpu, gpuInstance, computeInstance int) error {
	gi, err := r.gpuInstance(gpu, gpuInstance)
	if err != nil {
		return err
	}
	ci, ret := gi.GetComputeInstanceById(computeInstance)
	if err := nvErr(
		ret,
		"get compute instance %d of GPU instance %d on GPU %d",
		computeInstance,
		gpuInstance,
		gpu,
	); err != nil {
		return err
	}
	return nvErr(
		ci.Destroy(),
		"destroy compute instance %d of GPU instance %d on GPU %d",
		computeInstance,
		gpuInstance,
		gpu,
	)
}

// DestroyGPUInstance destroys a GPU instance (nvmlGpuInstanceDestroy).
func (r *Real) DestroyGPUInstance(gpu, gpuInstance int) error {
	gi, err := r.gpuInstance(gpu, gpuInstance)
	if err != nil {
		return err
	}
	return nvErr(gi.Destroy(), "destroy GPU instance %d on GPU %d", gpuInstance, gpu)
}

// noInstance is what NVML puts in an event's GPU or compute instance ID
// when the event concerns the whole GPU.
const noInstance = 0xFFFFFFFF

// WatchHealth registers every GPU for critical XID events and streams
// them until ctx is done; a GPU that cannot be registered is reported
// first with an Unmonitored event.
func (r *Real) WatchHealth(ctx context.Context) (<-chan HealthEvent, error) {
	return r.watchHealth(ctx, false)
}

// WatchHealthLiveness is WatchHealth plus an Alive tick after every wait
// for events that timed out (LivenessWatcher).
func (r *Real) WatchHealthLiveness(ctx context.Context) (<-chan HealthEvent, error) {
	return r.watchHealth(ctx, true)
}

func (r *Real) watchHealth(ctx context.Context, alive bool) (<-chan HealthEvent, error) {
	gpus, err := r.GPUs()
	if err != nil {
		return nil, fmt.Errorf("watch health: %w", err)
	}
	set, ret := r.lib.EventSetCreate()
	if err := nvErr(ret, "create event set"); err != nil {
		return nil, err
	}
	byUUID := map[string]int{}
	var unmonitored []HealthEvent
	unwatched := func(g GPU) {
		unmonitored = append(unmonitored, HealthEvent{GPU: g.Index, UUID: g.UUID,
			GPUInstance: -1, ComputeInstance: -1, Time: time.Now().UTC(), Unmonitored: true})
	}
	for _, g := range gpus {
		if g.Err != nil {
			// Unreadable: not watched, reported so; the driver has left
			// it out already.
			unwatched(g)
			continue
		}
		d, err := r.device(g.Index)
		if err == nil {
			err = nvErr(
				d.RegisterEvents(gonvml.EventTypeXidCriticalError, set),
				"register XID events of GPU %d",
				g.Index,
			)
		}
		if err != nil {
			// e.g. a GPU behind a hypervisor that hides XIDs: the others
			// are watched, this one is reported unmonitored.
			unwatched(g)
			continue
		}
		byUUID[g.UUID] = g.Index
	}
	ch := make(chan HealthEvent)
	go func() {
		defer close(ch)
		defer set.Free()
		for _, ev := range unmonitored {
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
		}
		for ctx.Err() == nil {
			data, ret := set.Wait(500)
			if ret == gonvml.ERROR_TIMEOUT {
				if alive {
					select {
					case ch <- HealthEvent{
						GPU: -1, GPUInstance: -1, ComputeInstance: -1, Alive: true,
					}:
					case <-ctx.Done():
						return
					}
				}
				continue
			}
			if ret != gonvml.SUCCESS || data.EventType != gonvml.EventTypeXidCriticalError {
				if ret != gonvml.SUCCESS {
					time.Sleep(500 * time.Millisecond) // do not spin on a failing wait
				}
				continue
			}
			ev := HealthEvent{
				GPU:             -1,
				XID:             data.EventData,
				GPUInstance:     -1,
				ComputeInstance: -1,
				Time:            time.Now().UTC(),
			}
			if data.Device != nil {
				if u, ret := data.Device.GetUUID(); ret == gonvml.SUCCESS {
					ev.UUID = u
					if i, ok := byUUID[u]; ok {
						ev.GPU = i
					}
				}
			}
			if data.GpuInstanceId != noInstance {
				ev.GPUInstance = int(data.GpuInstanceId)
			}
			if data.ComputeInstanceId != noInstance {
				ev.ComputeInstance = int(data.ComputeInstanceId)
			}
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// Close shuts NVML down. MIG instances stay.
func (r *Real) Close() error {
	return nvErr(r.lib.Shutdown(), "shut down NVML")
}

// Processes lists NVML's compute, graphics and MPS compute running
// processes of the GPU (ProcessLister), each PID once; a kind NVML does
// not support on the GPU is skipped.
func (r *Real) Processes(gpu int) ([]Process, error) {
	d, err := r.device(gpu)
	if err != nil {
		return nil, err
	}
	var out []Process
	seen := map[uint32]bool{}
	for _, k := range []struct {
		kind string
		list func() ([]gonvml.ProcessInfo, gonvml.Return)
	}{
		{"compute", d.GetComputeRunningProcesses},
		{"graphics", d.GetGraphicsRunningProcesses},
		{"mps", d.GetMPSComputeRunningProcesses},
	} {
		ps, ret := k.list()
		if ret == gonvml.ERROR_NOT_SUPPORTED {
			continue
		}
		if err := nvErr(ret, "list the %s processes of GPU %d", k.kind, gpu); err != nil {
			return nil, err
		}
		for _, p := range ps {
			if seen[p.Pid] {
				continue
			}
			seen[p.Pid] = true
			mib := int64(p.UsedGpuMemory >> 20)
			out = append(out, Process{PID: p.Pid, Kind: k.kind, UsedMemoryMiB: mib})
		}
	}
	return out, nil
}
