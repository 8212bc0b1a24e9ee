package nvmlsim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/drakit/drakit/examples/nvidia/nvml"
)

// Errors of a simulated CUDA program, named after CUDA's.
var (
	// ErrCUDADevicesUnavailable: the GPU's compute mode admits no new
	// context (cudaErrorDevicesUnavailable, "all CUDA-capable devices
	// are busy or unavailable").
	ErrCUDADevicesUnavailable = errors.New("CUDA_ERROR_DEVICES_UNAVAILABLE")
	// ErrCUDAOutOfMemory: an allocation over the client's pinned device
	// memory limit or the GPU's free memory.
	ErrCUDAOutOfMemory = errors.New("CUDA_ERROR_OUT_OF_MEMORY")
	// ErrMPSConnection: the MPS pipe folder has no daemon
	// (CUDA_ERROR_MPS_CONNECTION_FAILED), or it went away.
	ErrMPSConnection = errors.New("CUDA_ERROR_MPS_CONNECTION_FAILED")
)

// CUDAContext is a simulated CUDA program's context on one GPU: what a
// container's program would get with the environment its CDI edits gave
// it. Close it when done.
type CUDAContext struct {
	mps    *mpsClientConn
	memMiB int64
	used   int64
}

// OpenCUDA opens a context on the GPU with UUID gpu as a program with
// environment env would. With CUDA_MPS_PIPE_DIRECTORY it is a client of
// that folder's MPS daemon, with the pinned memory limit of
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("0=12288M": device 0 is the one GPU a
// daemon serves; units K, M, G, T of 1024) and the thread percentage of
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE. Without it, it is a plain context,
// refused (ErrCUDADevicesUnavailable) on a GPU in Prohibited mode or in
// ExclusiveProcess mode while an MPS daemon serves the GPU, as on
// hardware.
func (s *Sim) OpenCUDA(ctx context.Context, gpu string, env map[string]string) (*CUDAContext,
	error) {
	var idx int
	var memMiB int64
	var mode nvml.ComputeMode
	var daemon *simMPS
	err := s.view(func(st *simState) error {
		for i := range st.GPUs {
			if st.GPUs[i].UUID == gpu {
				g, err := st.gpu("open CUDA context", i)
				if err != nil {
					return err
				}
				idx, mode, daemon = i, g.ComputeMode, g.MPS
				return nil
			}
		}
		return nvml.NewError(nvml.ErrorNotFound, "open CUDA context", "no GPU %s", gpu)
	})
	if err != nil {
		return nil, err
	}
	gpus, err := s.GPUs()
	if err != nil {
		return nil, err
	}
	memMiB = gpus[idx].MemoryMiB
	pipe := env[EnvMPSPipeDir]
	if pipe == "" {
		switch {
		case mode == nvml.ComputeModeProhibited:
			return nil, fmt.Errorf("%w: GPU %d's compute mode is Prohibited",
				ErrCUDADevicesUnavailable, idx)
		case mode == nvml.ComputeModeExclusiveProcess && daemon != nil && alive(daemon.PID):
			return nil, fmt.Errorf("%w: GPU %d is in ExclusiveProcess mode and its MPS server "+
				"holds it; "+
				"set %s to be its client", ErrCUDADevicesUnavailable, idx, EnvMPSPipeDir)
		}
		return &CUDAContext{memMiB: memMiB}, nil
	}
	limit, err := pinnedLimitMiB(env[EnvMPSPinnedMemLimit], gpu)
	if err != nil {
		return nil, err
	}
	threads := 0
	if t := env[EnvMPSThreads]; t != "" {
		if threads, err = strconv.Atoi(t); err != nil {
			return nil, fmt.Errorf("%s=%q: %w", EnvMPSThreads, t, err)
		}
	}
	c, err := dialMPS(ctx, pipe)
	if err != nil {
		return nil, err
	}
	var rep mpsReply
	if err := c.call(mpsRequest{Op: "connect", PID: os.Getpid(), LimitMiB: limit, Threads: threads},
		&rep); err != nil {
		c.Close()
		return nil, err
	}
	if rep.Error != "" {
		c.Close()
		return nil, errors.New(rep.Error)
	}
	return &CUDAContext{mps: c, memMiB: memMiB}, nil
}

// pinnedLimitMiB reads CUDA_MPS_PINNED_DEVICE_MEM_LIMIT's entry for
// device 0 (or the GPU's UUID); 0 when there is none.
func pinnedLimitMiB(v, uuid string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	for _, part := range strings.Split(v, ",") {
		dev, amount, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return 0, fmt.Errorf("%s=%q: %q is not device=limit", EnvMPSPinnedMemLimit, v, part)
		}
		if dev != "0" && dev != uuid {
			continue
		}
		unit := map[byte]int64{'K': 1, 'M': 1 << 10, 'G': 1 << 20, 'T': 1 << 30} // in KiB
		if amount == "" || unit[amount[len(amount)-1]] == 0 {
			return 0, fmt.Errorf("%s=%q: %q has no unit K, M, G or T", EnvMPSPinnedMemLimit, v,
				amount)
		}
		n, err := strconv.ParseInt(amount[:len(amount)-1], 10, 64)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("%s=%q: %q is not a positive amount", EnvMPSPinnedMemLimit, v,
				amount)
		}
		return n * unit[amount[len(amount)-1]] / 1024, nil
	}
	return 0, nil
}

// Alloc allocates mib MiB of device memory.
func (c *CUDAContext) Alloc(mib int64) error {
	if c.mps == nil {
		if c.used+mib > c.memMiB {
			return fmt.Errorf("%w: the GPU has %d MiB", ErrCUDAOutOfMemory, c.memMiB)
		}
		c.used += mib
		return nil
	}
	var rep mpsReply
	if err := c.mps.call(mpsRequest{Op: "alloc", MiB: mib}, &rep); err != nil {
		return err
	}
	if rep.Error != "" {
		if strings.HasPrefix(rep.Error, ErrCUDAOutOfMemory.Error()) {
			return fmt.Errorf("%w%s", ErrCUDAOutOfMemory, strings.TrimPrefix(rep.Error,
				ErrCUDAOutOfMemory.Error()))
		}
		return errors.New(rep.Error)
	}
	c.used = rep.UsedMiB
	return nil
}

// Close ends the context; an MPS client's memory is free again.
func (c *CUDAContext) Close() error {
	if c.mps != nil {
		return c.mps.Close()
	}
	return nil
}

// alive says whether process pid exists (a zombie counts).
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
